"""Kafka's ACL admin types as both Python clients name them, so a program that builds ACL bindings imports and
constructs them as it did, and its ACL calls then fail with the error that says where a fabric's ACLs are: in the
acl.file of each server, which no admin call reaches (`NoAclCalls`, docs/security.md).

- confluent-kafka: AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType (with the
  configs' ResourceType);
- kafka-python: ACL, ACLFilter, ResourcePattern, ACLOperation, ACLPermissionType, ACLResourcePatternType.
"""
from __future__ import annotations

import enum
from typing import Any, NamedTuple, NoReturn

from fabric.common.errors import InvalidRequestError


class AclOperation(enum.IntEnum):
    """An operation an ACL allows or denies (Kafka's numbering)."""

    UNKNOWN, ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = range(9)
    CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = range(9, 13)


class AclPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies its operation."""

    UNKNOWN, ANY, DENY, ALLOW = range(4)


class ResourcePatternType(enum.IntEnum):
    """How an ACL's resource name matches: the name itself (LITERAL) or a prefix (PREFIXED)."""

    UNKNOWN, ANY, MATCH, LITERAL, PREFIXED = range(5)


class AclBinding(NamedTuple):
    """confluent-kafka's ACL: a principal allowed or denied an operation on a resource, from a host."""

    restype: Any
    name: str | None
    resource_pattern_type: ResourcePatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType


AclBindingFilter = AclBinding  # (confluent-kafka's filter has the same fields, None matching any)


class ResourcePattern(NamedTuple):
    """kafka-python's resource of an ACL: its type, name and pattern type."""

    resource_type: Any
    resource_name: str | None
    pattern_type: ResourcePatternType = ResourcePatternType.LITERAL


class ACL(NamedTuple):
    """kafka-python's ACL: a principal allowed or denied an operation on `resource_pattern`, from a host."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType
    resource_pattern: ResourcePattern


ACLFilter = ACL  # (kafka-python's filter has the same fields, None matching any)
ACLOperation, ACLPermissionType, ACLResourcePatternType = AclOperation, AclPermissionType, ResourcePatternType


class NoAclCalls:
    """Both clients' ACL calls (create_acls, describe_acls, delete_acls), refused naming the file that holds the
    fabric's ACLs and how a change takes effect (no_acl_calls), whatever bindings they are given."""

    def create_acls(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Create ACLs: refused, as no admin call reaches the acl.file that holds them."""
        raise no_acl_calls("create_acls()")

    def describe_acls(self, *args: Any, **kwargs: Any) -> NoReturn:
        """List ACLs: refused, as no admin call reaches the acl.file that holds them."""
        raise no_acl_calls("describe_acls()")

    def delete_acls(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Delete ACLs: refused, as no admin call reaches the acl.file that holds them."""
        raise no_acl_calls("delete_acls()")


def no_acl_calls(call: str) -> InvalidRequestError:
    """The error of both clients' ACL calls: the fabric's ACLs are a file its servers read, not admin state."""
    return InvalidRequestError(
        f"{call} is not served: a fabric keeps its ACLs in the acl.file (--acl-file) of its coordinator and of "
        "each data node, `principal operation resource` lines each process reads when it starts, and no admin call "
        "lists or changes them. Read or edit that file on every server, then restart each process so it reads it "
        "again (docs/security.md, Principals, tokens and ACLs). An embedded fabric (file://) has no ACLs.")
