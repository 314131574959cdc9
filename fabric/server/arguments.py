"""Checking a decoded request against the signature of the interface method it calls.

The coordinator service calls Cluster and Coordinator methods with arguments a client sent; a request with a
missing, unknown or mistyped argument must be refused with an error naming the argument and the expected type
(InvalidRequestError) before it reaches a store, never fail halfway with a TypeError deep inside one.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import logging
import re
import types
import typing
from typing import Any, Callable, NamedTuple, TypeVar

from fabric.common.errors import InvalidRequestError
from fabric.common.redaction import clip, shorten

log = logging.getLogger(__name__)
T = TypeVar("T")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@functools.cache
def _hints(fn: Callable) -> dict[str, Any]:
    return typing.get_type_hints(fn)


def conforms(value: Any, hint: Any) -> bool:
    """True if `value` fits the type hint (unions, Optional, list/tuple/dict/Mapping/Sequence, dataclasses); an
    int must fit in 64 bits, as every count, offset and timestamp of the fabric does."""
    return _checker(hint)(value)


def _is_int64(value: Any) -> bool:
    return ((type(value) is int or (isinstance(value, int) and not isinstance(value, bool)))
            and INT64_MIN <= value <= INT64_MAX)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@functools.cache
def _checker(hint: Any) -> Callable[[Any], bool]:
    """The check of one type hint, worked out once per hint (every request checks its arguments against the same
    few hints); a dataclass's fields are looked up when a value is checked, so a hint may refer to itself."""
    if hint is Any:
        return lambda value: True
    if hint is None or hint is type(None):
        return lambda value: value is None
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _any_of(tuple(_checker(p) for p in params))
    if origin is None:
        if hint is float:
            return _is_number
        if hint is int:
            return _is_int64
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return lambda value: isinstance(value, hint) and all(
                _checker(h)(getattr(value, f)) for f, h in _hints(hint).items() if f in _field_names(hint))
        return (lambda value: isinstance(value, hint)) if isinstance(hint, type) else (lambda value: True)
    if origin is tuple:
        if len(params) == 2 and params[1] is Ellipsis:
            return _each(tuple, _checker(params[0]))
        return _fields(tuple(_checker(p) for p in params))
    if origin in (dict, collections.abc.Mapping):
        key, item = _checker(params[0]), _checker(params[1])
        return lambda value: isinstance(value, dict) and all(key(k) and item(v) for k, v in value.items())
    if origin in (list, collections.abc.Sequence):
        return _each((list, tuple), _checker(params[0]))
    return lambda value: isinstance(value, origin)


# The checks of containers loop instead of running a generator per value: a follower's replica fetch names every
# partition it copies from the leader, each a tuple of five fields, and the leader checks them all on every fetch.
def _any_of(alternatives: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        for alternative in alternatives:
            if alternative(value):
                return True
        return False
    return check


def _each(kind: type[Any] | tuple[type[Any], ...], item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, kind):
            return False
        for each in value:
            if not item(each):
                return False
        return True
    return check


def _fields(items: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    count = len(items)

    def check(value: Any) -> bool:
        if not isinstance(value, tuple) or len(value) != count:
            return False
        for item, field in zip(items, value, strict=True):
            if not item(field):
                return False
        return True
    return check


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _describe(hint: Any) -> str:
    if hint is int:
        return "int (64-bit)"
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


class _Signature(NamedTuple):
    """What a request to a method is checked against, worked out once per method: its parameters in order, the
    check of each (with the hint it checks, for the error) and those without a default."""

    names: tuple[str, ...]
    checks: dict[str, tuple[Any, Callable[[Any], bool]]]
    required: frozenset[str]


@functools.cache
def _signature(fn: Callable, skip: tuple[str, ...]) -> _Signature:
    """`fn`'s parameters a request supplies (inspect.signature is too slow to run on every request)."""
    params = {p: v for p, v in inspect.signature(fn).parameters.items() if p != "self" and p not in skip}
    hints = _hints(fn)
    return _Signature(tuple(params), {p: (hints.get(p, Any), _checker(hints.get(p, Any))) for p in params},
                      frozenset(p for p, v in params.items() if v.default is inspect.Parameter.empty))


def check_call(name: str, method: Callable, args: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Raise InvalidRequestError unless `method(**args)` (plus the `skip` parameters, supplied otherwise)
    binds to the method's signature with every argument of its annotated type."""
    signature = _signature(getattr(method, "__func__", method), skip)
    checks = signature.checks
    if not args.keys() <= checks.keys():
        unknown = sorted(set(args) - set(checks))
        raise InvalidRequestError(f"request {name!r}: unknown argument(s) {shorten(', '.join(unknown))}; "
                                  f"it takes {', '.join(signature.names) or 'none'}")
    if not signature.required <= args.keys():
        missing = [p for p in signature.names if p in signature.required and p not in args]
        raise InvalidRequestError(f"request {name!r}: missing argument(s) {', '.join(missing)}; "
                                  f"it takes {', '.join(signature.names)}")
    for arg, value in args.items():
        hint, check = checks[arg]
        if not check(value):
            raise InvalidRequestError(f"request {name!r}: argument {arg!r} must be {_describe(hint)}, "
                                      f"got {type(value).__name__} {clip(value)}")


def refused_arguments(message: str) -> list[str]:
    """The arguments a check_call refusal (its message) names as unknown, as the server wrote them."""
    found = re.search(r"unknown argument\(s\) ([^;]*);", message)
    return found.group(1).split(", ") if found else []


class OptionalArgument:
    """An argument that a server of an earlier release refuses as unknown (check_call's InvalidRequestError names
    it): sent with every request until a server refuses it once, then never again by this caller, who then gets
    what the earlier release answers. So a rolling upgrade of a cluster keeps its servers talking."""

    def __init__(self, name: str, without: str) -> None:
        self.name, self.without = name, without  # without: what the caller does instead, for the log
        self.sent = True

    def call(self, request: Callable[[dict[str, Any]], T], args: dict[str, Any], value: Any, server: str) -> T:
        """`request(args)` with this argument set to `value` while servers take it; `server` names the one asked,
        for the log."""
        if not self.sent:
            return request(args)
        try:
            return request({**args, self.name: value})
        except InvalidRequestError as exc:
            if self.name not in refused_arguments(str(exc)):
                raise
        log.info("%s does not take %s (an earlier release): %s", server, self.name, self.without)
        self.sent = False
        return request(args)
