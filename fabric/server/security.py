"""Authentication and authorization of the coordinator service.

Tokens file: `token principal` lines. Every call must carry `authorization: Bearer <token>`; a missing or
unknown token fails with FlightUnauthenticatedError before any handler runs.
ACL file: `principal operation resource` lines; operations read, write, create, describe, group,
cluster_action, admin (admin grants every operation on its resource); resources topic:NAME, topic:*,
group:NAME, group:*, transactional-id:NAME, transactional-id:* (a sink's transaction ids are
`<transactional id>:<sequence>`; as in Kafka, publishing and committing under one needs `write` on it, asking
whether one committed `describe`) and cluster:fabric (or cluster:*): data nodes registering and heartbeating
need `cluster_action` on it, as Kafka's brokers need ClusterAction on the cluster.
Without a tokens file every caller is ANONYMOUS; without an ACL file every principal may do everything.
Token file (`token.file`): the one token a server process itself presents to the coordinator and the nodes.
Errors about these files never show a line of them: a misplaced tokens file must not print its tokens.
"""
from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Iterable

import pyarrow.flight as flight

from fabric.common.errors import AuthorizationError, InvalidConfigError
from fabric.common.redaction import clip

OPERATIONS = ("read", "write", "create", "describe", "group", "cluster_action", "admin")
RESOURCE_TYPES = ("topic", "group", "transactional-id", "cluster")
CLUSTER = "cluster:fabric"  # the one cluster resource (Kafka's kafka-cluster); `cluster:*` matches it too
ANONYMOUS = "ANONYMOUS"
MIDDLEWARE_KEY = "auth"


def _read_lines(path: str, what: str) -> Iterable[tuple[int, str]]:
    """(line number, stripped line) of a text file, skipping blank lines and lines starting with # or !."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read the {what} file {path!r}: {exc.strerror}") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            yield number, line


def _lines(path: str, what: str, form: str) -> Iterable[tuple[int, list[str]]]:
    """(line number, fields) of a whitespace-separated file whose lines have the fields named in `form`."""
    fields = len(form.split())
    for number, line in _read_lines(path, what):
        parts = line.split()
        if len(parts) != fields:
            article = "an" if what[0] in "AEIOU" else "a"
            raise InvalidConfigError(f"{path}:{number}: {article} {what} line has {fields} fields ({form}), got "
                                     f"{len(parts)} (the line is not shown: it may hold a token); is this the "
                                     f"{what} file?")
        yield number, parts


def load_tokens(path: str) -> dict[str, str]:
    """token → principal from a tokens file (`token principal` per line)."""
    tokens: dict[str, str] = {}
    for number, (token, principal) in _lines(path, "tokens", "token principal"):
        if token in tokens:
            raise InvalidConfigError(f"{path}:{number}: token listed twice; each token names one principal")
        tokens[token] = principal
    return tokens


def load_token(path: str, option: str = "--token-file") -> str:
    """The one token of a token file (`option`): a single line holding nothing else."""
    found = [parts[0] for _, parts in _lines(path, "token", "token")]
    if len(found) != 1:
        raise InvalidConfigError(f"the token file {path!r} ({option}) must hold one token on one line, it holds "
                                 f"{len(found)}; a tokens file of `token principal` lines is --tokens-file")
    return found[0]


@dataclass(frozen=True)
class Acl:
    """One grant: `principal` may do `operation` on `resource` ("topic:NAME", "topic:*", ...)."""

    principal: str
    operation: str
    resource: str

    def allows(self, principal: str, operation: str, resource: str) -> bool:
        if self.principal != principal or self.operation not in (operation, "admin"):
            return False
        kind, _, name = self.resource.partition(":")
        return self.resource == resource or (name == "*" and resource.startswith(kind + ":"))


def load_acls(path: str) -> list[Acl]:
    """The grants of an ACL file (`principal operation resource` per line)."""
    acls = []
    for number, (principal, operation, resource) in _lines(path, "ACL", "principal operation resource"):
        kind, sep, name = resource.partition(":")
        if operation not in OPERATIONS:
            raise InvalidConfigError(f"{path}:{number}: unknown operation {clip(operation, 40)}; "
                                     f"use one of {', '.join(OPERATIONS)}")
        if not sep or kind not in RESOURCE_TYPES or not name:
            raise InvalidConfigError(f"{path}:{number}: resource {clip(resource, 80)} must be topic:NAME, topic:*, "
                                     "group:NAME or group:* (or transactional-id:NAME, transactional-id:*, "
                                     "cluster:fabric)")
        acls.append(Acl(principal, operation, resource))
    return acls


class Authorizer:
    """Decides whether a principal may do an operation on resources; None acls means allow everything."""

    def __init__(self, acls: list[Acl] | None) -> None:
        self.acls = acls

    def allowed(self, principal: str, operation: str, resource: str) -> bool:
        return self.acls is None or any(a.allows(principal, operation, resource) for a in self.acls)

    def check(self, principal: str, checks: Iterable[tuple[str, str]]) -> None:
        """Raise AuthorizationError unless every (operation, resource) is granted."""
        for operation, resource in checks:
            if not self.allowed(principal, operation, resource):
                shown = resource if len(resource) <= 200 else resource[:200] + "..."
                raise AuthorizationError(f"principal {principal!r} is not allowed to {operation} {shown}; "
                                         f"grant it with an ACL line `{principal} {operation} {shown}`")


class Principal(flight.ServerMiddleware):
    """Per-call middleware holding the authenticated principal (handlers read `.name`)."""

    def __init__(self, name: str) -> None:
        self.name = name


class TokenAuthFactory(flight.ServerMiddlewareFactory):
    """Checks `authorization: Bearer <token>` on every call; tokens None disables authentication."""

    def __init__(self, tokens: dict[str, str] | None) -> None:
        self.tokens = tokens

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[str]]) -> Principal:
        if self.tokens is None:
            return Principal(ANONYMOUS)
        values = headers.get("authorization") or []
        scheme, _, token = (values[0] if values else "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise flight.FlightUnauthenticatedError(
                "no credentials: send the header `authorization: Bearer <token>` (set FABRIC_TOKEN)")
        principal = principal_of(self.tokens, token)
        if principal is None:
            raise flight.FlightUnauthenticatedError(UNKNOWN_TOKEN)
        return Principal(principal)


UNKNOWN_TOKEN = "unknown token: it is not in the coordinator's tokens file"


def principal_of(tokens: dict[str, str], token: str) -> str | None:
    """The principal a token names in `tokens` (compared in constant time), or None for an unknown token."""
    for known, principal in tokens.items():
        if hmac.compare_digest(known.encode(), token.strip().encode()):
            return principal
    return None


def read_pem(path: str | None, what: str) -> bytes | None:
    """The contents of a PEM file option (None stays None)."""
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read the {what} {path!r}: {exc.strerror}") from None


def load_properties(path: str) -> dict[str, str]:
    """A Java-style .properties file: `key=value` lines, # comments."""
    props: dict[str, str] = {}
    for number, line in _read_lines(path, "config"):
        key, sep, value = line.partition("=")
        if not sep:
            raise InvalidConfigError(f"{path}:{number}: expected key=value (the line is not shown: it may hold a "
                                     "secret); is this the config file?")
        props[key.strip()] = value.strip()
    return props


def resolve_path(value: str | None, base_file: str | None) -> str | None:
    """A file path from a config file, relative to that file's directory."""
    if not value or os.path.isabs(value) or base_file is None:
        return value or None
    return os.path.join(os.path.dirname(os.path.abspath(base_file)), value)

