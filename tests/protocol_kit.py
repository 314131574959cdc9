"""The fabric protocol tests' kit (the `protocol_kit` fixture of tests/integration/conftest.py, whose
`protocol_cluster` and `protocol_admin` are built from it): what tests/integration/test_protocol.py and
test_protocol_refusals.py share, each once.

- The secured cluster's principals and grants: TOKENS ({token: principal}) and ACLS (ACL file lines). "admin" may
  do anything, "node" (the coordinator's and the node's token towards each other) has cluster_action, "user" may
  write, read and describe topics mine and mine-rf, "other" may write and describe mine.
- `open_admin(cluster)`: the admin's client, with topic mine (2 partitions, at the coordinator) and mine-rf
  (1 partition on the node).
- Talking to a server: `protocol_address` and `connect` (a ProtocolConnection as a principal), `hello` (a hello
  frame's bytes) and `until_closed` (raw bytes sent, answers read until the server closes the connection).
- Records and offsets: `rows` (a stored batch of values) and `end_offset`.

This is a plain module of tests/ (no package), loaded by tests/conftest.py's `plain_module`; it imports only the
installed packages.
"""
from __future__ import annotations

import socket
import time
from typing import Any

import pyarrow as pa

import fabric
from fabric.common.protocol import frames, messages
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.records import to_storage
from fabric.server import wire

TOKENS = {"admin-token": "admin", "node-token": "node", "user-token": "user", "other-token": "other"}
ACLS = """admin admin topic:*
admin admin group:*
admin admin cluster:fabric
node cluster_action cluster:fabric
user write topic:mine
user read topic:mine
user describe topic:mine
user write topic:mine-rf
user read topic:mine-rf
user describe topic:mine-rf
other write topic:mine
other describe topic:mine
"""


def open_admin(cluster: Any) -> fabric.Fabric:
    """The admin's client of `cluster`, with topic mine (2 partitions, at the coordinator) and mine-rf (1 partition
    on the node) created."""
    handle = fabric.connect(cluster.coordinator.url("token=admin-token"))
    handle.create_topic("mine", partitions=2)
    handle.create_topic("mine-rf", partitions=1, replication_factor=1)
    return handle


def rows(*values: bytes, keys: list[bytes | None] | None = None) -> pa.RecordBatch:
    table = pa.table({"value": list(values), **({"key": keys} if keys is not None else {})})
    return to_storage(table, None, time.time_ns() // 1000).to_batches()[0]


def protocol_address(cluster: Any, where: str) -> str:
    """The protocol address of the coordinator ("coordinator") or of node 1 ("node")."""
    if where == "coordinator":
        return cluster.coordinator.status(token="admin-token").protocol_address
    return cluster.nodes[1].status(token="admin-token")["protocol_address"]


def connect(cluster: Any, where: str, token: str = "user-token") -> ProtocolConnection:
    return ProtocolConnection(protocol_address(cluster, where), token, None, 30.0, wire.exception_of)


def end_offset(admin: Any, topic: str, partition: int) -> int:
    return admin.cluster.partition_state(topic, partition).end_offset


def hello(version: int = 1) -> bytes:
    return frames.encode(messages.encode_request(1, "hello", {"protocol": "fabric", "version": version,
                                                                "token": "user-token"}))


def until_closed(address: str, data: bytes) -> list[messages.Answer]:
    """Send raw bytes and read the answers until the server closes the connection."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(data)
        reader, answers = frames.FrameReader(), []
        while received := raw.recv(1 << 16):
            reader.feed(received)
            answers += [messages.decode_answer(f.header) for f in reader.frames()]
        return answers
