"""Replication under failures (docs/replication.md, step 4) as real processes: a coordinator running the controller
and three data nodes, topics of replication factor 3 with min.insync.replicas=2, and Jepsen-style histories.

- Leaders are SIGKILLed (and restarted) under a steady stream of acks=all writes: every acknowledged record
  survives exactly once at its offset, offsets stay dense, and every replica ends with the same frames.
- A SIGSTOPped leader is replaced under a higher leader epoch; once resumed it acknowledges nothing, is refused
  as a leader, and truncates the divergent tail it appended alone.
- KIP-101's scenario: two failovers in a row, each old leader holding an uncommitted tail at the same offsets,
  and the leader epochs (not the high watermark) decide what every replica keeps.

Every send is recorded in the history (tests/history_recorder.py) before and after it happens, every value is
unique, and the producers never retry (retries=0), so no value is written twice on purpose: an acknowledged
acks=all send is "ok" at its offset, any failed send "info" (the routing client retries a NotLeaderError once on
its own, so even a refusal does not prove that nothing was written), and an acks=1 send whose leader later
fails "info" too, since such a record may legitimately be lost. Only an append made straight to one node (no
routing) that the node refuses as not its leader is "fail": it must never appear. At the end each partition is
read from its leader and from every node's log on disk, and the history is checked with dense offsets.

Timing: a killed or paused node is declared dead `NodeCluster.SESSION_MS` (6 s) after its last heartbeat, so
every wait here is on a condition (wait_for) with a deadline of SETTLE_S, never a sleep.
"""
from __future__ import annotations

import itertools
import os
import threading
from types import TracebackType
from typing import Any

import pyarrow.flight as flight
import pytest

import fabric
from fabric.client.producer import Producer
from fabric.common.config import TopicConfig
from fabric.common.errors import FabricError, FencedLeaderEpochError, NotLeaderError, RequestTimedOutError
from fabric.common.records import storage_schema
from fabric.common.types import LeaderAndIsr
from fabric.common.waiting import wait_for
from fabric.server.launcher import NodeProcess
from fabric.storage import frame
from fabric.storage.log import Log

SETTLE_S = 60  # a loaded machine notices a death ~6 s after it, then elects, fetches and catches up
TOPIC_CONFIG = {"min.insync.replicas": "2"}
CLIENT_QUERY = "timeout_ms=10000"  # a call to a paused leader gives up after 10 s, not the default 30 s
# A follower's long-poll at its leader lasts at most 100 ms, so QUIET_MS without a fetch means none is pending
# (see wait_quiet): what the leader appends next cannot reach a paused follower.
FETCH_WAIT = ("--replica-fetch-wait-max-ms", "100")
QUIET_MS = 1000
BACKOFF_S = 0.05  # the writer's pause after a failed send: a partition without a leader is not hammered

pytestmark = pytest.mark.slow


# -- what the controller and the nodes say ---------------------------------------------------------------------
def partition_state(fab: fabric.Fabric, topic: str, partition: int) -> LeaderAndIsr:
    """The controller's current leader, leader epoch and ISR of the partition (asked now, not cached)."""
    return fab.cluster.describe_cluster(refresh=True).partitions[(topic, partition)].state


def wait_elected(fab: fabric.Fabric, topic: str, partition: int, before: LeaderAndIsr) -> LeaderAndIsr:
    """Wait until the controller has elected a leader other than `before`'s, under a higher leader epoch."""
    def elected() -> LeaderAndIsr | None:
        state = partition_state(fab, topic, partition)
        moved = state.leader not in (None, before.leader) and state.leader_epoch > before.leader_epoch
        return state if moved else None
    return wait_for(elected, SETTLE_S, f"a new leader of {topic}-{partition} (it was node {before.leader} under "
                                       f"leader epoch {before.leader_epoch})")


def wait_full_isr(fab: fabric.Fabric, topic: str, partitions: int, nodes: int = 3) -> None:
    """Wait until every node is in the ISR of every partition of the topic."""
    wait_for(lambda: all(len(partition_state(fab, topic, p).isr) == nodes for p in range(partitions)), SETTLE_S,
             f"every node to be in the ISR of every partition of {topic}")


def replica_status(node: NodeProcess, topic: str, partition: int) -> dict[str, Any] | None:
    """What `node`'s status says of its replica of the partition (role, leader_epoch, log_end, high_watermark;
    a leader's isr and followers' log_end and lag_ms); None if the node does not answer or hosts none."""
    try:
        replicas = node.status()["replicas"]
    except flight.FlightError:
        return None
    return next((r for r in replicas if (r["topic"], r["partition"]) == (topic, partition)), None)


def wait_converged(cluster: Any, topic: str, partitions: int) -> dict[int, int]:
    """Wait until, for every partition, one node leads and the others follow under one leader epoch, and every
    node's log end and high watermark are the same offset; that offset by partition."""
    def converged() -> dict[int, int] | None:
        ends = {}
        for p in range(partitions):
            seen = [replica_status(node, topic, p) for node in cluster.nodes.values()]
            if any(s is None for s in seen):
                return None
            roles = sorted(s["role"] for s in seen)
            offsets = {(s["log_end"], s["high_watermark"]) for s in seen}
            if (roles != ["Follower"] * (len(seen) - 1) + ["Leader"] or len({s["leader_epoch"] for s in seen}) != 1
                    or len(offsets) != 1):
                return None
            log_end, high_watermark = offsets.pop()
            if log_end != high_watermark:
                return None
            ends[p] = log_end
        return ends
    return wait_for(converged, SETTLE_S, f"every replica of {topic} to hold the same log, all of it committed")


def wait_quiet(leader: NodeProcess, topic: str, partition: int, followers: list[int]) -> None:
    """Wait until `leader` has had no fetch from any of the (paused) `followers` for QUIET_MS. The leader stamps
    a caught-up follower's every fetch, and answers it within the 100 ms long-poll (FETCH_WAIT): so every fetch
    they sent has been answered without frames, and nothing the leader appends from now on reaches them."""
    def quiet() -> bool:
        status = replica_status(leader, topic, partition)
        return (status is not None and status["role"] == "Leader"
                and all(status["followers"][str(f)]["lag_ms"] >= QUIET_MS for f in followers))
    wait_for(quiet, SETTLE_S, f"node {leader.node_id} to hear no fetch of {topic}-{partition} from {followers}")


def follower_log_end(leader: NodeProcess, topic: str, partition: int, follower: int) -> int | None:
    """The offset `follower` last fetched from at `leader` in its current leader epoch (-1 before its first
    fetch); None while `leader` does not answer as the partition's leader."""
    status = replica_status(leader, topic, partition)
    return status["followers"][str(follower)]["log_end"] if status and status["role"] == "Leader" else None


def pause(*nodes: NodeProcess) -> None:
    """SIGSTOP the nodes; returns once they are stopped (NodeProcess.pause)."""
    for node in nodes:
        node.pause()


def resume(*nodes: NodeProcess) -> None:
    """SIGCONT the nodes."""
    for node in nodes:
        node.resume()


# -- sending, recorded in the history --------------------------------------------------------------------------
class Sender:
    """Sends unique values (`prefix`-0, `prefix`-1, ...) one at a time through `producer` (retries=0),
    recording each in the history: "invoke" before; after, "ok" at the acknowledged offset (or, for a send that
    `may_be_lost`, "info": an acks=1 record whose leader fails afterwards), and "info" for any error."""

    def __init__(self, producer: Producer, recorder: Any, topic: str, prefix: str) -> None:
        self.producer, self.recorder, self.topic, self.prefix = producer, recorder, topic, prefix
        self._numbers = itertools.count()

    def send(self, partition: int, may_be_lost: bool = False) -> tuple[str, int | None]:
        """Send the next value to `partition`; the value and its offset (None if the send failed)."""
        value = f"{self.prefix}-{next(self._numbers)}"
        self.recorder.invoke(value, partition, self.topic)
        try:
            offset = self.producer.send(self.topic, value.encode(), partition=partition).result(SETTLE_S).offset
        except (FabricError, TimeoutError) as exc:
            self.recorder.info(value, exc)
            return value, None
        if may_be_lost:
            self.recorder.info(value, f"acknowledged at offset {offset} with acks=1 by a leader that fails")
        else:
            self.recorder.ok(value, partition, offset, self.topic)
        return value, offset

    def sent(self, partition: int, count: int, may_be_lost: bool = False) -> list[tuple[str, int]]:
        """Send `count` values that must all be acknowledged; (value, offset) of each."""
        out = []
        for _ in range(count):
            value, offset = self.send(partition, may_be_lost)
            assert offset is not None, f"the send of {value!r} to {self.topic}-{partition} failed"
            out.append((value, offset))
        return out


class Writer:
    """A thread sending acks=all values to each partition of `topic` in turn, through a connection and a
    producer of its own, until the `with` block ends; `acked[p]` counts the acknowledged sends to partition p.
    `pause()` returns once no send is in flight and none starts until `resume()`."""

    def __init__(self, url: str, recorder: Any, topic: str, partitions: int) -> None:
        self.url, self.recorder, self.topic = url, recorder, topic
        self.acked = [0] * partitions
        self._cond = threading.Condition()
        self._paused = self._stopped = self._busy = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(SETTLE_S)
        assert not self._thread.is_alive(), "the writer did not stop"
        if self._error is not None and exc is None:
            raise self._error

    def _run(self) -> None:
        try:
            with fabric.connect(self.url) as fab, fab.producer(acks="all", retries=0, linger_ms=0) as producer:
                sender = Sender(producer, self.recorder, self.topic, "w")
                for i in itertools.count():
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopped or not self._paused)
                        if self._stopped:
                            return
                        self._busy = True
                    partition = i % len(self.acked)
                    _, offset = sender.send(partition)
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
                        if offset is not None:
                            self.acked[partition] += 1
                        else:
                            self._cond.wait_for(lambda: self._stopped, BACKOFF_S)
        except BaseException as exc:  # noqa: BLE001 (raised in the test's thread when the block ends)
            self._error = exc
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def pause(self) -> None:
        with self._cond:
            self._paused = True
            assert self._cond.wait_for(lambda: not self._busy, SETTLE_S), "the writer's send did not finish"
        if self._error is not None:
            raise self._error

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def wait_acked(self, partition: int, more: int, what: str) -> None:
        """Wait until `more` sends to `partition` are acknowledged from now on."""
        target = self.acked[partition] + more
        wait_for(lambda: self.acked[partition] >= target or self._error, SETTLE_S, what)
        if self._error is not None:
            raise self._error


# -- the final reads -------------------------------------------------------------------------------------------
def read_partition(consumer: Any, topic: str, partition: int) -> tuple[list[tuple[int, str]], int]:
    """Every record of the partition from offset 0 to its high watermark, read through its leader, and that
    high watermark."""
    consumer.assign([(topic, partition)])
    end = consumer.end_offsets([(topic, partition)])[(topic, partition)]
    consumer.seek(topic, partition, 0)
    records: list[tuple[int, str]] = []

    def read_up_to_end() -> bool:
        records.extend((r.offset, r.value.decode("latin-1")) for r in consumer.poll(0.2))
        return consumer.position(topic, partition) >= end
    wait_for(read_up_to_end, SETTLE_S, f"{topic}-{partition} to be read up to its high watermark {end}")
    return records, end


def read_from_leaders(fab: fabric.Fabric, recorder: Any, topic: str,
                      partitions: int) -> dict[int, list[tuple[int, str]]]:
    """Read every partition through its leader, recorded as a final read; the (offset, value) records by
    partition."""
    out = {}
    consumer = fab.consumer(auto_offset_reset="earliest")
    try:
        for p in range(partitions):
            out[p], end = read_partition(consumer, topic, p)
            recorder.read(p, out[p], start=0, end=end, topic=topic, source="the leader")
    finally:
        consumer.close()
    return out


def stored_frames(log: Log) -> list[bytes]:
    """Every data frame of a log from its start to its end, as stored (header and payload)."""
    out, offset = [], log.start_offset
    while offset < log.end_offset:
        data = log.read_frames(offset, 1 << 20)
        assert data.size, f"{log.directory}: no frame at offset {offset}, below its end {log.end_offset}"
        position = 0
        while position < data.size:
            header = frame.unpack_header(data, position)
            out.append(data.slice(position, header.size).to_pybytes())
            position += header.size
            offset = header.next_offset
    return out


def frame_list(frames: list[bytes]) -> list[tuple[int, int, int]]:
    """(base offset, record count, leader epoch) of each frame, as a mismatch is shown."""
    return [(h.base_offset, h.record_count, h.leader_epoch) for h in map(frame.unpack_header, frames)]


def assert_identical_replicas(cluster: Any, recorder: Any, storage: Any, topic: str, partitions: int) -> None:
    """Stop the cluster (SIGTERM), then: every node's log of each partition holds the same frames, byte for byte,
    and each node's records are recorded as a final read of that replica."""
    cluster.close()
    for p in range(partitions):
        logs = {i: Log(os.path.join(node.data_dir, topic, str(p)), storage_schema(), TopicConfig(), replica=True)
                for i, node in cluster.nodes.items()}
        frames = {i: stored_frames(log) for i, log in logs.items()}
        first = min(frames)
        for i, held in frames.items():
            assert frame_list(held) == frame_list(frames[first]), f"{topic}-{p}: nodes {first} and {i} differ"
            assert held == frames[first], f"{topic}-{p}: nodes {first} and {i} hold frames of different bytes"
        for i, log in logs.items():
            recorder.read(p, [(o, v) for o, v, _ in storage.read_all(log, 0)], start=0, end=log.end_offset,
                          topic=topic, source=f"node {i}'s log")


def values_in(records: list[tuple[int, str]]) -> set[str]:
    return {v for _, v in records}


# -- the tests ---------------------------------------------------------------------------------------------------
def test_leaders_killed_under_acks_all_writes_lose_no_acknowledged_record(node_cluster, history, storage) -> None:
    """Three rounds: SIGKILL the leader of a partition while a writer sends acks=all records to both partitions,
    wait for a new leader under a higher epoch and for acknowledgements from it, and for the killed node,
    restarted, to rejoin the ISR. Rounds 1 and 3 restart the node once the controller has declared it dead (its
    lease lapsed); round 2 restarts it at once, and its new registration tells the controller the old process
    died. A restarted node may come back with records it appended but never replicated, which it must truncate
    as it follows the new leader."""
    cluster = node_cluster(nodes=3)
    topic, partitions = "killed", 2
    recorder = history.recorder("test")
    url = f"{cluster.url}?{CLIENT_QUERY}"
    with fabric.connect(url) as fab:
        fab.create_topic(topic, partitions=partitions, replication_factor=3, config=TOPIC_CONFIG)
        with Writer(url, history.recorder("writer"), topic, partitions) as writer:
            for round_ in range(3):
                p = round_ % partitions
                writer.wait_acked(p, 10, f"acknowledged writes to {topic}-{p} before round {round_ + 1}")
                before = partition_state(fab, topic, p)
                victim = before.leader
                cluster.nodes[victim].kill()
                if round_ == 1:
                    cluster.restart(victim)
                after = wait_elected(fab, topic, p, before)
                assert after.leader != victim and after.leader_epoch > before.leader_epoch
                if round_ != 1:  # (a restarted node may rejoin the ISR before the election is seen)
                    assert after.isr == tuple(r for r in before.isr if r != victim), after
                writer.wait_acked(p, 10, f"acks=all writes to {topic}-{p} acknowledged by node {after.leader}")
                if round_ != 1:
                    cluster.restart(victim)
                wait_full_isr(fab, topic, partitions)
            writer.wait_acked(0, 5, "writes after the last round")
        ends = wait_converged(cluster, topic, partitions)
        read = read_from_leaders(fab, recorder, topic, partitions)
    assert {p: len(records) for p, records in read.items()} == ends
    assert_identical_replicas(cluster, recorder, storage, topic, partitions)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] >= 65 and result.reads == partitions * 4, result.summary()  # as the waits saw


def test_a_paused_leader_is_fenced_and_truncates_its_divergent_tail(node_cluster, history, storage, raw) -> None:
    """The divergent tail, built deterministically: with the writer paused and every replica caught up, SIGSTOP
    both followers, wait until the leader has heard no fetch from them for QUIET_MS (so none is pending at the
    leader, see wait_quiet), append 3 records with acks=1 to the leader alone (recorded as info), then SIGSTOP the
    leader and SIGCONT the followers. The controller declares the paused leader dead and elects a follower under
    a higher epoch; writes go on there. The old leader, resumed, acknowledges no acks=all append quoting its old
    epoch (it refuses it, or gives up waiting for followers that no longer fetch from it), refuses any append
    once it has learned it is a follower, truncates its 3 records (the new leader never had them) and ends with
    the same frames as the others."""
    cluster = node_cluster(nodes=3, node_extra=FETCH_WAIT)
    topic = "paused"
    recorder = history.recorder("test")
    url = f"{cluster.url}?{CLIENT_QUERY}"
    with fabric.connect(url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        with Writer(url, history.recorder("writer"), topic, 1) as writer, \
                fab.producer(acks="1", retries=0, linger_ms=0) as acks1_producer:
            writer.wait_acked(0, 20, "acknowledged writes before the pause")
            writer.pause()
            committed = wait_converged(cluster, topic, 1)[0]
            before = partition_state(fab, topic, 0)
            old = cluster.nodes[before.leader]
            followers = [n for i, n in cluster.nodes.items() if i != before.leader]
            pause(*followers)
            wait_quiet(old, topic, 0, [f.node_id for f in followers])
            tail = Sender(acks1_producer, recorder, topic, "alone").sent(0, 3, may_be_lost=True)
            assert [o for _, o in tail] == [committed, committed + 1, committed + 2]
            pause(old)
            resume(*followers)
            writer.resume()
            after = wait_elected(fab, topic, 0, before)
            writer.wait_acked(0, 10, f"acks=all writes acknowledged by the new leader, node {after.leader}")

            resume(old)
            recorder.invoke("zombie-all", 0, topic)
            with pytest.raises((NotLeaderError, FencedLeaderEpochError, RequestTimedOutError)) as refused:
                raw.append(old.address, topic, 0, before.leader_epoch, b"zombie-all", acks="all", timeout_ms=5000)
            recorder.info("zombie-all", refused.value)
            wait_for(lambda: (replica_status(old, topic, 0) or {}).get("role") == "Follower", SETTLE_S,
                     f"node {old.node_id} to follow")
            recorder.invoke("zombie-1", 0, topic)
            with pytest.raises((NotLeaderError, FencedLeaderEpochError)) as refused:
                raw.append(old.address, topic, 0, before.leader_epoch, b"zombie-1", acks="1")
            recorder.fail("zombie-1", refused.value)
            writer.wait_acked(0, 10, "acks=all writes after the old leader is back")
        wait_converged(cluster, topic, 1)
        read = read_from_leaders(fab, recorder, topic, 1)
    final = values_in(read[0])
    assert not final & ({v for v, _ in tail} | {"zombie-all"}), "the old leader's divergent tail survived"
    assert_identical_replicas(cluster, recorder, storage, topic, 1)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] >= 40, result.summary()


def test_two_fast_failovers_with_divergent_tails_leave_no_divergence(node_cluster, history, storage) -> None:
    """KIP-101's scenario, where truncating to the high watermark would leave replicas diverged. Every replica
    holds the committed records 0..X-1 (acks=all), then:
    1. A (the leader) appends 3 records at X.. with acks=1 while B and C are SIGSTOPped and quiet (wait_quiet);
       A is SIGKILLed and B, C resumed: the controller elects B under a new epoch.
    2. Once C follows B, B appends 2 other records at X.. with acks=1 while C is SIGSTOPped and quiet; B is
       SIGKILLed and C resumed: C, never having had either tail, is elected alone (ISR [C]).
    3. C appends 4 more records at X.. with acks=1. C stays leader to the end, so these are recorded "ok" at
       their offsets: nothing may drop them. A's and B's tails are recorded "info", since both leaders failed.
    4. A returns, then B: each truncates its tail where its own last epoch ends in C's log (X), copies C's
       records and rejoins the ISR; acks=all writes follow.
    replica.lag.time.max.ms is 60 s, so a paused follower stays in the ISR and remains electable."""
    cluster = node_cluster(nodes=3, node_extra=("--replica-lag-time-max-ms", "60000", *FETCH_WAIT))
    topic = "kip101"
    recorder = history.recorder("test")
    with fabric.connect(f"{cluster.url}?{CLIENT_QUERY}") as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        with fab.producer(acks="all", retries=0, linger_ms=0) as acks_all, \
                fab.producer(acks="1", retries=0, linger_ms=0) as acks_1:
            Sender(acks_all, recorder, topic, "committed").sent(0, 10)
            end = wait_converged(cluster, topic, 1)[0]
            first = partition_state(fab, topic, 0)
            a = cluster.nodes[first.leader]
            others = [n for i, n in cluster.nodes.items() if i != first.leader]

            pause(*others)
            wait_quiet(a, topic, 0, [n.node_id for n in others])
            tail_a = Sender(acks_1, recorder, topic, "a").sent(0, 3, may_be_lost=True)
            a.kill()
            resume(*others)
            second = wait_elected(fab, topic, 0, first)
            b = cluster.nodes[second.leader]
            c = next(n for n in others if n is not b)
            assert (replica_status(b, topic, 0) or {}).get("log_end") == end, "B must not hold A's tail"

            wait_for(lambda: follower_log_end(b, topic, 0, c.node_id) == end, SETTLE_S,
                     f"node {c.node_id} to follow node {b.node_id}")
            pause(c)
            wait_quiet(b, topic, 0, [c.node_id])
            tail_b = Sender(acks_1, recorder, topic, "b").sent(0, 2, may_be_lost=True)
            b.kill()
            resume(c)
            third = wait_elected(fab, topic, 0, second)
            assert third.leader == c.node_id and third.isr == (c.node_id,), third
            kept = Sender(acks_1, recorder, topic, "c").sent(0, 4)
            for offsets in (tail_a, tail_b, kept):
                assert [o for _, o in offsets] == list(range(end, end + len(offsets))), offsets

            for node in (a, b):
                cluster.restart(node.node_id)
                wait_for(lambda n=node: n.node_id in partition_state(fab, topic, 0).isr, SETTLE_S,
                         f"node {node.node_id} back in the ISR")
            Sender(acks_all, recorder, topic, "after").sent(0, 10)
        wait_converged(cluster, topic, 1)
        read = read_from_leaders(fab, recorder, topic, 1)
    assert not values_in(read[0]) & {v for v, _ in tail_a + tail_b}, "a failed leader's tail survived"
    assert [v for o, v in read[0] if end <= o < end + 4] == [v for v, _ in kept]
    assert_identical_replicas(cluster, recorder, storage, topic, 1)
    history.check(dense=True).assert_valid()
