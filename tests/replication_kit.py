"""The replication tests' kit (the `replication` fixture of tests/integration/conftest.py): what the tests of
replicated partitions on real coordinator and node processes share, each concept once.

- Asking: the controller's state of a partition (`state`), its description as its leader answers it
  (`described`, `led`), a node's status of its replica (`status`) and what a leader knows of a follower.
- Waiting on a cluster in transition: `eventually`, and the waits built on it (a new leader elected, the ISR
  exactly some nodes, a partition offline, replicas in sync, a leader hearing no fetch from paused followers).
- Writing and reading with a Jepsen-style history (tests/history_recorder.py): `Sender`, a producer whose every
  send is recorded with the outcome the client can vouch for; `BackgroundWriters`, threads sending acks=all
  records to each partition until stopped; `final_read`, a partition read whole through its leader.
- Replicas on disk: where a node keeps a partition, wiping a node's disk, and the byte-for-byte comparison of
  every replica's frames.
- The partition states the controllers wrote in ZooKeeper.

Why one kit: the tests were written one by one and grew copies of these helpers that drifted apart (a status that
returned None or {} or raised, waits on the controller's ISR or the leader's). Each helper here is the stricter
of its former versions. This is a plain module of tests/ (no package), loaded by tests/conftest.py's
`plain_module`; it imports only the installed packages.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import pyarrow.flight as flight
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

import fabric
from fabric.client.delivery import RecordMetadata
from fabric.client.producer import Producer
from fabric.common.config import TopicConfig
from fabric.common.errors import FabricError, LeaderNotAvailableError, NotEnoughReplicasError
from fabric.common.records import storage_schema
from fabric.common.types import LeaderAndIsr, PartitionState
from fabric.common.waiting import wait_for
from fabric.coordinator import zk_layout
from fabric.server.launcher import NodeProcess
from fabric.storage import frame
from fabric.storage.log import Log

# A loaded machine notices a death NodeCluster.SESSION_MS (6 s) after it, then decides, elects, fetches and
# catches up: every wait is on a condition with this deadline, never a sleep.
SETTLE_S = 60


def certainly_failed(exc: BaseException) -> bool:
    """Whether a failed send certainly wrote nothing: refused by the leader before its append
    (NotEnoughReplicasError, not its AfterAppend subclass), or by the client because the partition is offline.
    Anything else (a timeout, a leader lost mid-call, a NotLeaderError after the append) leaves the outcome
    unknown."""
    return type(exc) is NotEnoughReplicasError or (isinstance(exc, LeaderNotAvailableError)
                                                   and "is offline" in str(exc))


class Sender:
    """A producer whose sends to `topic` are recorded in the history through `recorder`: "invoke" before the
    send; after it "ok" at the acknowledged partition and offset (or "info" for a send that `may_be_lost`: acks=1
    to a leader that fails afterwards, whose record may legitimately vanish); on an error "fail" when the send
    certainly wrote nothing (certainly_failed), else "info", and the error is raised. The routing client tries an
    append once, so with retries=0 a refusal speaks for the one attempt made; with retries, for the last one.
    A context manager: the producer is closed on exit."""

    def __init__(self, producer: Producer, recorder: Any, topic: str) -> None:
        self.producer, self.recorder, self.topic = producer, recorder, topic

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.producer.close()

    def send(self, value: bytes, p: int = 0, may_be_lost: bool = False) -> RecordMetadata:
        """Send `value` to partition `p` and wait for its acknowledgement; its metadata."""
        self.recorder.invoke(value, p, self.topic)
        try:
            meta = self.producer.send(self.topic, value, partition=p).result(SETTLE_S * 2)
        except Exception as exc:
            if certainly_failed(exc):
                self.recorder.fail(value, exc)
            else:
                self.recorder.info(value, exc)
            raise
        if may_be_lost:
            self.recorder.info(value, f"acknowledged at offset {meta.offset} with acks=1 by a leader that fails")
        else:
            self.recorder.ok(value, meta.partition, meta.offset, self.topic)
        return meta

    def send_all(self, values: list[bytes], p: int = 0, may_be_lost: bool = False) -> list[int]:
        """Send each value to partition `p` in turn, each acknowledged before the next; their offsets."""
        return [self.send(v, p, may_be_lost).offset for v in values]


class BackgroundWriters:
    """One thread per partition of `topic`, each sending acks=all records (`topic`-p<p>-<i>) one at a time over a
    connection and a producer of its own, recorded in the history as process writer-<p>, from the start of the
    `with` block to its end; `acked[p]` counts partition p's acknowledged sends. One thread per partition because
    a producer sends under its lock: a partition waiting for a new leader would hold up the others.

    Each send is one attempt (retries=0) and a failed one is left as the Sender recorded it while the next value
    is sent after BACKOFF_S: this producer is not idempotent, so retrying a send whose answer was lost (its leader
    killed after the append reached the followers) could write it twice, which Kafka's non-idempotent producer
    does too. An error other than a fabric error stops the thread and fails the test (wait_acked, pause or the
    block's end raises it). `pause()` returns once no send is in flight, and none starts until `resume()`."""

    BACKOFF_S = 0.1  # between a failed send and the next: a partition without a leader is not hammered

    def __init__(self, url: str, history: Any, topic: str, partitions: int) -> None:
        """`url`: the fabric:// URL the writers connect to (its timeout_ms bounds a call to a paused node)."""
        self.url, self.history, self.topic = url, history, topic
        self.acked = [0] * partitions
        self.crashed: list[BaseException] = []
        self._cond = threading.Condition()
        self._stopped = self._paused = False
        self._busy = 0  # sends in flight
        self._threads = [threading.Thread(target=self._run, args=(p,), name=f"writer-{topic}-{p}", daemon=True)
                         for p in range(partitions)]

    def __enter__(self) -> BackgroundWriters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(SETTLE_S * 2)
        assert not any(t.is_alive() for t in self._threads), "a writer did not finish its last send"
        if exc is None:
            self._raise_crash()

    def _run(self, p: int) -> None:
        try:
            with fabric.connect(self.url) as fab, Sender(fab.producer(acks="all", retries=0, linger_ms=0),
                                                         self.history.recorder(f"writer-{p}"), self.topic) as sender:
                for i in itertools.count():
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopped or not self._paused)
                        if self._stopped:
                            return
                        self._busy += 1
                    try:
                        sender.send(f"{self.topic}-p{p}-{i}".encode(), p)
                        self.acked[p] += 1
                    except FabricError:  # recorded; a leader or the controller is moving
                        with self._cond:
                            self._cond.wait_for(lambda: self._stopped, self.BACKOFF_S)
                    finally:
                        with self._cond:
                            self._busy -= 1
                            self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 (raised in the test's thread)
            with self._cond:
                self.crashed.append(exc)
                self._cond.notify_all()

    def _raise_crash(self) -> None:
        if self.crashed:
            raise self.crashed[0]

    def pause(self) -> None:
        """Hold every writer before its next send; returns once no send is in flight."""
        with self._cond:
            self._paused = True
            assert self._cond.wait_for(lambda: not self._busy, SETTLE_S * 2), "a writer's send did not finish"
        self._raise_crash()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def wait_acked(self, p: int, more: int, what: str) -> None:
        """Wait until partition `p` has `more` acknowledged sends than now."""
        target = self.acked[p] + more
        wait_for(lambda: self.acked[p] >= target or self.crashed, SETTLE_S, what, interval=0.2)
        self._raise_crash()


class ReplicationKit:
    """The helpers of the replication tests (see the module's docstring); `storage` is tests/conftest.py's
    StorageKit, whose frame scanning and log reading the replica comparison uses."""

    SETTLE_S = SETTLE_S
    # A follower's long-poll at its leader lasts at most 100 ms with FETCH_WAIT among the nodes' options, so
    # QUIET_MS without a fetch means none is pending (see wait_quiet).
    FETCH_WAIT = ("--replica-fetch-wait-max-ms", "100")
    QUIET_MS = 1000

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    # -- asking the controller, the leaders and the nodes ----------------------------------------------------
    @staticmethod
    def client_url(cluster: Any) -> str:
        """The cluster's fabric:// URL for clients whose call to a paused node gives up after 10 s instead of the
        default 30 s (then counts as a node that did not answer)."""
        return f"{cluster.url}?timeout_ms=10000"

    @staticmethod
    def fetched_bytes(node: Any) -> float:
        """Bytes of records node `node` served to readers (its Prometheus metric; fetches from followers replicating
        are not counted): a node of a cluster started with --metrics-port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{node.status()['metrics_port']}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return next((s.value for family in text_string_to_metric_families(text) for s in family.samples
                     if s.name == "fabric_fetch_bytes_total"), 0.0)

    @staticmethod
    def state(fab: fabric.Fabric, topic: str, p: int = 0) -> LeaderAndIsr:
        """The controller's current leader, leader epoch and ISR of partition `p` (asked now, not cached)."""
        return fab.cluster.describe_cluster(refresh=True).partitions[(topic, p)].state

    @staticmethod
    def described(fab: fabric.Fabric, topic: str, p: int = 0) -> PartitionState:
        """What describe_topic says of partition `p` (leader None while offline; end_offset the high watermark, -1
        when the leader did not answer and the controller's view of the partition is all there is)."""
        return fab.describe_topic(topic).partitions[p]

    def led(self, fab: fabric.Fabric, topic: str, p: int = 0) -> PartitionState | None:
        """Partition `p`'s description as its leader answers it (ISR, high watermark), or None when it has none or
        the leader did not answer."""
        described = self.described(fab, topic, p)
        return described if described.leader is not None and described.end_offset >= 0 else None

    @staticmethod
    def status(node: NodeProcess, topic: str, p: int = 0) -> dict[str, Any]:
        """`node`'s `status` entry of its replica of partition `p` (role, leader_epoch, high_watermark, log_end once
        known; a leader's isr and followers), {} while it hosts none. A node that does not answer raises a
        FlightError, which `eventually` counts as "not yet"."""
        return next((r for r in node.status()["replicas"] if (r["topic"], r["partition"]) == (topic, p)), {})

    def follower(self, leader: NodeProcess, topic: str, p: int, follower: int) -> dict[str, Any]:
        """What `leader` knows of node `follower`'s replica of partition `p`: log_end, the offset it last fetched
        from in the current leader epoch (-1 before its first fetch), and lag_ms, the time since it was last
        caught up (the leader stamps every fetch of a caught-up follower); {} while `leader` does not lead it."""
        status = self.status(leader, topic, p)
        return status["followers"].get(str(follower), {}) if status.get("role") == "Leader" else {}

    # -- waiting on a cluster in transition ------------------------------------------------------------------
    @staticmethod
    def eventually(condition: Callable[[], Any], what: str, timeout: float = SETTLE_S) -> Any:
        """wait_for(condition): its first truthy answer, counting a retriable fabric error or a node that does not
        answer (leaders moving, a process restarting or paused) as "not yet"."""
        def attempt() -> Any:
            try:
                return condition()
            except FabricError as exc:
                if not exc.retriable:
                    raise
            except flight.FlightError:
                pass
            return None
        return wait_for(attempt, timeout, what, interval=0.2)

    def wait_elected(self, fab: fabric.Fabric, topic: str, p: int, before: LeaderAndIsr | PartitionState
                     ) -> LeaderAndIsr:
        """Wait until the controller has elected a leader of partition `p` other than `before`'s, under a higher
        leader epoch; its state."""
        def elected() -> LeaderAndIsr | None:
            state = self.state(fab, topic, p)
            moved = state.leader not in (None, before.leader) and state.leader_epoch > before.leader_epoch
            return state if moved else None
        return self.eventually(elected, f"a new leader of {topic}-{p} (it was node {before.leader} under leader "
                                        f"epoch {before.leader_epoch})")

    def wait_isr(self, fab: fabric.Fabric, topic: str, isr: set[int], p: int = 0) -> PartitionState:
        """Wait until partition `p`'s ISR is exactly `isr`, both as the controller has it and as the leader answers
        it (the leader's view lags the controller's when the controller removed a dead node); the leader's
        description."""
        def settled() -> PartitionState | None:
            described = self.led(fab, topic, p)
            if described is None or set(described.isr) != isr or set(self.state(fab, topic, p).isr) != isr:
                return None
            return described
        return self.eventually(settled, f"the ISR of {topic}-{p} to be {sorted(isr)}")

    def wait_offline(self, fab: fabric.Fabric, topic: str, p: int = 0) -> PartitionState:
        """Wait until partition `p` has no leader; the controller's description of it."""
        return self.eventually(lambda: (d := self.described(fab, topic, p)).leader is None and d,
                               f"{topic}-{p} to go offline")

    def wait_in_sync(self, fab: fabric.Fabric, nodes: Mapping[int, NodeProcess], topic: str, p: int = 0) -> int:
        """Wait until the replicas of partition `p` on `nodes` (by id) are its whole ISR (see wait_isr), one leads
        and the others follow it under its leader epoch, and every one holds the leader's whole log and knows all
        of it committed (log end = high watermark = the leader's high watermark); that offset. After it every
        acknowledged record is readable, and every replica can be compared with the others."""
        members = set(nodes)

        def synced() -> tuple[int] | None:
            described = self.led(fab, topic, p)
            if (described is None or set(described.isr) != members
                    or set(self.state(fab, topic, p).isr) != members):
                return None
            end = described.end_offset
            for node_id, node in nodes.items():
                status = self.status(node, topic, p)
                role = "Leader" if node_id == described.leader else "Follower"
                seen = tuple(status.get(k) for k in ("role", "leader_epoch", "log_end", "high_watermark"))
                if seen != (role, described.leader_epoch, end, end):
                    return None
            return (end,)
        return self.eventually(synced, f"replicas {sorted(members)} of {topic}-{p} to hold the whole log, all of "
                                       "it committed")[0]

    def wait_quiet(self, leader: NodeProcess, topic: str, p: int, followers: list[int]) -> None:
        """Wait until `leader` has had no fetch of partition `p` from any of the (paused) `followers` for
        QUIET_MS. The leader stamps a caught-up follower's every fetch, and answers it within the 100 ms
        long-poll of nodes started with FETCH_WAIT: so every fetch they sent has been answered without frames,
        and nothing the leader appends from now on reaches them."""
        self.eventually(lambda: all(self.follower(leader, topic, p, f).get("lag_ms", -1) >= self.QUIET_MS
                                    for f in followers),
                        f"node {leader.node_id} to hear no fetch of {topic}-{p} from {followers}")

    def append_alone(self, sender: Sender, leader: NodeProcess, followers: list[NodeProcess], values: list[bytes],
                     p: int = 0) -> list[int]:
        """Give `leader`'s replica of partition `p` a tail no follower has (KIP-101's divergent tail): SIGSTOP the
        `followers`, wait until the leader hears no fetch from them (wait_quiet), then send `values` through
        `sender`, an acks=1 producer, as sends that may be lost (the test fails this leader next); their
        offsets. The followers stay paused: the caller fails the leader, then resumes them."""
        self.pause(*followers)
        self.wait_quiet(leader, sender.topic, p, [f.node_id for f in followers])
        return sender.send_all(values, p, may_be_lost=True)

    @staticmethod
    def pause(*nodes: NodeProcess) -> None:
        """SIGSTOP the nodes; returns once they are stopped (NodeProcess.pause)."""
        for node in nodes:
            node.pause()

    @staticmethod
    def resume(*nodes: NodeProcess) -> None:
        """SIGCONT the nodes."""
        for node in nodes:
            node.resume()

    # -- writing and reading with a history ------------------------------------------------------------------
    @staticmethod
    def values(tag: str, count: int) -> list[bytes]:
        """`count` values `tag`-0, `tag`-1, ...: unique across the history, as the checker names a send by its
        value."""
        return [f"{tag}-{i}".encode() for i in range(count)]

    @staticmethod
    def sender(producer: Producer, recorder: Any, topic: str) -> Sender:
        """A Sender: `producer`'s sends to `topic` recorded through `recorder`; closes the producer on exit."""
        return Sender(producer, recorder, topic)

    @staticmethod
    def writers(url: str, history: Any, topic: str, partitions: int) -> BackgroundWriters:
        """BackgroundWriters of `topic`'s `partitions` connecting to `url`, recording in `history`; they run for
        the `with` block."""
        return BackgroundWriters(url, history, topic, partitions)

    def final_read(self, fab: fabric.Fabric, recorder: Any, topic: str, p: int = 0) -> list[tuple[int, bytes]]:
        """Read partition `p` whole through its leader (the coordinator, for a single-directory topic), from
        offset 0 to the high watermark it answers, and record it as a final read that began before it; the
        (offset, value) records. Call it once the writers stopped and the replicas are in sync: the read must
        hold every acknowledged record, each offset below the high watermark once."""
        began = recorder.clock()
        records: list[tuple[int, bytes]] = []
        with fab.consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([(topic, p)])
            end = self.eventually(lambda: (consumer.end_offsets([(topic, p)])[(topic, p)],),
                                  f"the leader of {topic}-{p} to answer")[0]
            consumer.seek(topic, p, 0)

            def read_up_to_end() -> bool:  # (the position runs ahead of what poll returned: fetched records wait)
                records.extend((r.offset, r.value) for r in consumer.poll(0.2))
                return not end or bool(records) and records[-1][0] >= end - 1
            self.eventually(read_up_to_end, f"{topic}-{p} to be read up to its high watermark {end}")
        offsets = [o for o, _ in records]
        assert offsets == list(range(end)), (
            f"{topic}-{p} read below its high watermark {end}: {len(offsets)} records, offsets "
            f"{[o for i, o in enumerate(offsets) if o != i][:10]} out of place")
        recorder.read(p, records, start=0, end=end, topic=topic, began=began, source="the leader")
        return records

    # -- replicas on disk ------------------------------------------------------------------------------------
    @staticmethod
    def partition_dir(node: NodeProcess, topic: str, p: int = 0) -> str:
        """Where `node` keeps its replica of partition `p`."""
        return os.path.join(node.data_dir, topic, str(p))

    @staticmethod
    def wipe(node: NodeProcess) -> None:
        """Remove everything in a stopped node's data directory, as a replaced disk would (its node.id file too),
        but the test harness's capture of the process output."""
        for name in os.listdir(node.data_dir):
            path = os.path.join(node.data_dir, name)
            if path != node.log_path:
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)

    def _record_frames(self, directory: str) -> list[bytes]:
        """Every record frame of a partition directory, byte for byte, in offset order, once every segment file
        is checked to be whole, CRC-valid frames and nothing else (the schema frame heading each segment is the
        replica's own, as are the segment boundaries, so they are left out)."""
        frames = []
        for path in self.storage.data_files(directory):
            with open(path, "rb") as f:
                data = f.read()
            scanned = self.storage.scan_frames(path)
            assert all(ok for _, _, ok in scanned), f"{path}: a frame fails its CRC"
            assert sum(header.size for _, header, _ in scanned) == len(data), f"{path}: bytes past its last frame"
            frames += [data[pos:pos + header.size] for pos, header, _ in scanned if not header.is_schema]
        return frames

    @staticmethod
    def _epoch_checkpoint(directory: str) -> str:
        """A partition directory's leader-epoch checkpoint file (its epochs and their start offsets)."""
        with open(os.path.join(directory, "leader-epoch-checkpoint")) as f:
            return f.read()

    def assert_identical_replicas(self, nodes: Mapping[int, NodeProcess], topic: str, p: int = 0,
                                  recorder: Any = None) -> int:
        """Stop `nodes` (SIGTERM; a stopped node stays so), then: their replicas of partition `p` hold the same
        record frames, byte for byte (every segment file whole and CRC-valid), and the same leader epochs. With
        `recorder`, each replica's records are recorded as a final read of it too, so the history checker holds
        every replica, not only the leader, to every acknowledged write. The number of frames."""
        for node in nodes.values():
            node.stop()
        directories = {i: self.partition_dir(node, topic, p) for i, node in nodes.items()}
        frames = {i: self._record_frames(directory) for i, directory in directories.items()}
        first = min(frames)
        assert frames[first], f"{directories[first]} holds no record"

        def listed(held: list[bytes]) -> list[tuple[int, int, int]]:  # as a mismatch is shown
            return [(h.base_offset, h.record_count, h.leader_epoch) for h in map(frame.unpack_header, held)]
        for i, held in frames.items():
            assert listed(held) == listed(frames[first]), f"{topic}-{p}: nodes {first} and {i} differ"
            assert held == frames[first], f"{topic}-{p}: nodes {first} and {i} hold frames of different bytes"
            assert self._epoch_checkpoint(directories[i]) == self._epoch_checkpoint(directories[first]), (
                f"{topic}-{p}: nodes {first} and {i} hold different leader epochs")
        if recorder is not None:
            for i, directory in directories.items():
                log = Log(directory, storage_schema(), TopicConfig(), replica=True)
                recorder.read(p, [(o, v) for o, v, _ in self.storage.read_all(log, 0)], start=0,
                              end=log.end_offset, topic=topic, source=f"node {i}'s log")
        return len(frames[first])

    # -- the controllers' partition states in ZooKeeper ------------------------------------------------------
    TOPIC_ROOT = "/brokers/topics"

    @staticmethod
    @contextmanager
    def zk_client(zk_url: str) -> Iterator[KazooClient]:
        """A kazoo client inside the zk:// URL's chroot, to read what the controllers wrote."""
        address = zk_layout.parse_url(zk_url)
        client = KazooClient(hosts=address.hosts + address.chroot)
        client.start(timeout=30)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def zk_states(self, zk: KazooClient, topic: str) -> dict[int, dict[str, Any]]:
        """The partition state znodes of `topic` ({leader, leader_epoch, isr, partition_epoch, controller_epoch}),
        by partition."""
        base = f"{self.TOPIC_ROOT}/{topic}/partitions"
        return {int(p): json.loads(zk.get(f"{base}/{p}/state")[0]) for p in zk.get_children(base)}
