"""Where the coordinator keeps its state in ZooKeeper, modelled on Kafka's znode layout, and how to connect.

Every path lives under the optional chroot of the URL `zk://host:port[,host:port]/chroot`:

    /brokers/ids/<id>                          ephemeral: a live coordinator instance
                                               {"version":1,"instance_id","address","timestamp"}
    /brokers/ids/<node id>                     persistent: a data node's registration (a numeric id)
                                               {"version":1,"address","rack","node_epoch"}
    /brokers/topics/<t>                        {"version":1,"partitions":N,"config":{k:v},
                                                "value_schema": base64 Arrow IPC schema | null,
                                                "assignment": {"<p>": [node ids]} (replicated topics only)}
    /brokers/topics/<t>/partitions/<p>/state   {"version":1,"leader","leader_epoch","isr":[...],"controller_epoch"}
                                               replicated: leader a node id (-1: none), isr node ids, and
                                               "partition_epoch", the compare-and-set token of ISR changes
    /controller                                ephemeral: the active instance
                                               {"version":1,"instance_id","address","epoch","timestamp"}
    /controller_epoch                          the epoch of the latest election, as a decimal string
    /consumers/<group>/state                   the group coordinator's state JSON (compare-and-set on its version)
    /consumers/<group>/offsets/<t>/<p>         {"offset","metadata","commit_ms"}
    /transaction_ids/<id>                      {"sequence","commit_ms","writers"}: the highest committed sequence
                                               of a transactional id (a sink: its last published batch) and its
                                               latest transaction's writers (coordinator/transactions.py)
    /transactions/<txn>                        read only: a transaction committed by version 0.1.0
    /offsets_owners/<p>                        the instance serving __consumer_offsets partition p
                                               {"version":1,"instance_id","address","session","epoch"}
                                               (coordinator/offsets_owners.py)

Names that are not plain znode names (a group id with "/", a transactional id ".") are percent-encoded.
With one shared data directory each partition has a single replica: its leader is the active instance.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from fabric.common.errors import CoordinatorUnavailableError, InvalidConfigError
from fabric.common.redaction import redact_url
from fabric.common.types import CommittedOffset, LeaderAndIsr, NodeInfo, PartitionAssignment, TopicInfo

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONSUMERS = "/consumers"
TRANSACTION_IDS = "/transaction_ids"
PRODUCER_ID_BLOCKS = "/producer_id_blocks"  # a znode per block of producer ids claimed, with its owner
LEGACY_TRANSACTIONS = "/transactions"  # one znode per transaction, written by 0.1.0; only read now
ROOTS = (BROKER_IDS, TOPICS, CONSUMERS, TRANSACTION_IDS, PRODUCER_ID_BLOCKS)
FORMAT_VERSION = 1
DEFAULT_PORT = 2181
DEFAULT_SESSION_TIMEOUT_S = 18.0  # Kafka's zookeeper.session.timeout.ms
MAX_OPS = 512  # znodes one transaction writes at most: far below jute.maxbuffer (1 MiB)


def node(name: str) -> str:
    """`name` as one znode name: percent-encoded so "/", "%" and the names "." / ".." cannot break a path."""
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return quote(name, safe="")


def name_of(znode: str) -> str:
    """The name `node()` encoded."""
    return unquote(znode)


def broker(instance_id: str) -> str:
    return f"{BROKER_IDS}/{node(instance_id)}"


def producer_id_block(block: int) -> str:
    """The znode of producer id block `block` (coordinator.producer_ids), which records its owner."""
    return f"{PRODUCER_ID_BLOCKS}/{block}"


def producer_id_block_data(principal: str) -> bytes:
    return dumps({"version": FORMAT_VERSION, "principal": principal})


def producer_id_block_owner(data: bytes) -> str:
    """The principal a producer id block's znode names."""
    return str(loads(data)["principal"])


def data_node(node_id: int) -> str:
    """A data node's registration; its znode name is the numeric id (coordinator instances' never are)."""
    return broker(str(node_id))


def topic(name: str) -> str:
    return f"{TOPICS}/{node(name)}"


def topic_of(path: str) -> str:
    """The name of the topic whose znode (`topic()`) is `path`."""
    return name_of(path.rsplit("/", 1)[-1])


def partitions(name: str) -> str:
    return f"{topic(name)}/partitions"


def partition(name: str, p: int) -> str:
    return f"{partitions(name)}/{p}"


def partition_state(name: str, p: int) -> str:
    return f"{partition(name, p)}/state"


def group(name: str) -> str:
    return f"{CONSUMERS}/{node(name)}"


def group_state(name: str) -> str:
    return f"{group(name)}/state"


def group_of_state(path: str) -> str:
    """The name of the group whose state znode (`group_state()`) is `path`."""
    return name_of(path.rsplit("/", 2)[-2])


def group_offsets(name: str) -> str:
    return f"{group(name)}/offsets"


def group_topic_offsets(name: str, topic_name: str) -> str:
    return f"{group_offsets(name)}/{node(topic_name)}"


def offset(name: str, topic_name: str, p: int) -> str:
    return f"{group_topic_offsets(name, topic_name)}/{p}"


def transaction_id(transactional_id: str) -> str:
    return f"{TRANSACTION_IDS}/{node(transactional_id)}"


def legacy_transaction(txn: str) -> str:
    return f"{LEGACY_TRANSACTIONS}/{node(txn)}"


# -- znode contents ------------------------------------------------------------------------------------
def dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def loads(data: bytes) -> dict[str, Any]:
    return json.loads(data.decode())


def topic_data(info: TopicInfo, assignment: Mapping[int, PartitionAssignment] | None = None) -> bytes:
    """The /brokers/topics/<t> content for `info`, with the replicas of a replicated topic's partitions."""
    schema = (base64.b64encode(info.value_schema.serialize().to_pybytes()).decode()
              if info.value_schema is not None else None)
    doc: dict[str, Any] = {"version": FORMAT_VERSION, "partitions": info.partitions, "config": info.config,
                           "value_schema": schema, "topic_id": info.topic_id}
    if assignment:
        doc["assignment"] = {str(p): list(a.replicas) for p, a in sorted(assignment.items())}
        targets = {str(p): list(a.target) for p, a in sorted(assignment.items()) if a.target}
        if targets:
            doc["reassigning"] = targets  # Kafka keeps adding/removing replicas beside the assignment too
    return dumps(doc)


def topic_assignment(data: bytes) -> dict[int, PartitionAssignment]:
    """The replicas of a replicated topic's partitions ({} for a topic created without replication), with the
    target of those being reassigned."""
    doc = loads(data)
    targets = doc.get("reassigning") or {}
    return {int(p): PartitionAssignment(tuple(r), tuple(targets.get(p, ()))) for p, r in
            (doc.get("assignment") or {}).items()}


def node_data(info: NodeInfo) -> bytes:
    return dumps({"version": FORMAT_VERSION, "address": info.address, "rack": info.rack,
                  "node_epoch": info.node_epoch, "directory_id": info.directory_id})


def node_info(node_id: int, data: bytes) -> NodeInfo | None:
    """Decode a data node's /brokers/ids/<id>; None for a coordinator instance's registration."""
    doc = loads(data)
    if "node_epoch" not in doc:
        return None
    return NodeInfo(node_id, doc["address"], doc.get("rack"), int(doc["node_epoch"]),
                    directory_id=str(doc.get("directory_id", "")))


def state_data(state: LeaderAndIsr) -> bytes:
    """A replicated partition's state znode (Kafka's: leader -1 when there is none)."""
    return dumps({"version": FORMAT_VERSION, "leader": -1 if state.leader is None else state.leader,
                  "leader_epoch": state.leader_epoch, "isr": list(state.isr),
                  "partition_epoch": state.partition_epoch, "controller_epoch": state.controller_epoch})


def leader_and_isr(data: bytes) -> LeaderAndIsr:
    doc = loads(data)
    leader = int(doc["leader"])
    return LeaderAndIsr(None if leader < 0 else leader, int(doc["leader_epoch"]), tuple(doc["isr"]),
                        int(doc["partition_epoch"]), int(doc["controller_epoch"]))


def topic_info(name: str, data: bytes) -> TopicInfo:
    """Decode /brokers/topics/<t>."""
    doc = loads(data)
    schema = doc.get("value_schema")
    value_schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema))) if schema else None
    return TopicInfo(name, int(doc["partitions"]), dict(doc.get("config") or {}), value_schema,
                     str(doc.get("topic_id") or ""))


@dataclass(frozen=True)
class LeaderState:
    """A partition's leadership, as Kafka keeps it: leader "" means none (no active controller wrote it)."""

    leader: str
    leader_epoch: int
    isr: tuple[str, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return dumps({"version": FORMAT_VERSION, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def decode(cls, data: bytes) -> LeaderState:
        doc = loads(data)
        return cls(doc["leader"], int(doc["leader_epoch"]), tuple(doc["isr"]), int(doc["controller_epoch"]))


def offset_data(committed: CommittedOffset) -> bytes:
    return dumps({"offset": committed.offset, "metadata": committed.metadata, "commit_ms": committed.commit_ms})


def committed_offset(data: bytes) -> CommittedOffset:
    doc = loads(data)
    return CommittedOffset(int(doc["offset"]), doc.get("metadata", ""), int(doc.get("commit_ms", 0)))


# -- connecting ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZkAddress:
    """A parsed zk:// URL: the connect string and the chroot ("" for none)."""

    hosts: str
    chroot: str


def parse_url(url: str) -> ZkAddress:
    """Parse `zk://host:port[,host:port]/chroot` (port defaults to 2181, chroot to none)."""
    parsed = urlparse(url)
    url = redact_url(url)  # errors never show a password
    if parsed.scheme != "zk" or not parsed.netloc:
        raise InvalidConfigError(f"ZooKeeper URL {url!r} is invalid; use zk://host:port[,host:port][/chroot]")
    if "@" in parsed.netloc:
        raise InvalidConfigError(f"ZooKeeper URL {url!r} carries credentials, which are not supported; use "
                                 "zk://host:port[,host:port][/chroot]")
    hosts = []
    for host in parsed.netloc.split(","):
        name, _, port = host.partition(":")
        if not name or (port and not port.isdigit()):
            raise InvalidConfigError(f"ZooKeeper URL {url!r} has a bad host {host!r}; use host:port")
        hosts.append(f"{name}:{port or DEFAULT_PORT}")
    chroot = parsed.path.rstrip("/")
    if "//" in chroot or any(part in (".", "..") for part in chroot.split("/")):
        raise InvalidConfigError(f"ZooKeeper URL {url!r} has a bad chroot {parsed.path!r}; use /name[/name]")
    return ZkAddress(",".join(hosts), chroot)


HANDSHAKE_TRIES = 3  # a hung handshake costs at most 1/HANDSHAKE_TRIES of the session (kazoo_hosts)


def kazoo_hosts(hosts: str) -> str:
    """The connect string kazoo is given for `hosts`: the servers listed again until there are HANDSHAKE_TRIES.

    kazoo waits for a handshake's answer session timeout / number of hosts, and ZooKeeper 3.9 never answers nor
    closes a connection made while it starts (before its database is loaded). With one server listed, a restart
    of it could cost the client its whole session; listed three times, a hung handshake is given up after a third
    of it and the next one still finds the session."""
    servers = hosts.split(",")
    return ",".join(servers * -(-HANDSHAKE_TRIES // len(servers)))


def _start(client: KazooClient, timeout: float, url: str) -> None:
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise CoordinatorUnavailableError(
            f"no ZooKeeper server answered at {redact_url(url)!r} within {timeout:g} s; start ZooKeeper or fix "
            "the URL"
        ) from None


def connect(url: str, timeout: float = 15.0,
            session_timeout: float = DEFAULT_SESSION_TIMEOUT_S) -> KazooClient:
    """A started KazooClient rooted at the URL's chroot, with the chroot and the layout's roots created.

    The client reconnects forever on its own and retries idempotent commands for up to `timeout` seconds.
    """
    address = parse_url(url)
    if address.chroot:
        boot = KazooClient(hosts=kazoo_hosts(address.hosts), timeout=session_timeout)
        _start(boot, timeout, url)
        try:
            boot.ensure_path(address.chroot)
        finally:
            boot.stop()
            boot.close()
    client = KazooClient(hosts=kazoo_hosts(address.hosts) + address.chroot, timeout=session_timeout,
                         connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 1.0},
                         command_retry={"max_tries": -1, "delay": 0.02, "max_delay": 1.0, "deadline": timeout})
    _start(client, timeout, url)
    for root in ROOTS:
        client.retry(client.ensure_path, root)
    return client
