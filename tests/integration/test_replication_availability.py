"""Availability and durability of replicated partitions when replicas die (docs/replication.md, step 4), with
real coordinator, node and ZooKeeper processes and every record's fate checked by the history checker.

- min.insync.replicas: with two of three replicas SIGKILLed, acks=all is refused (NotEnoughReplicasError) within
  the producer's delivery timeout while acks=1 still lands on the leader; the restarted followers catch up, rejoin
  the ISR and acks=all works again, nothing acknowledged lost.
- The whole ISR down: the partition is offline (describe, `--unavailable-partitions`, producers told so) until an
  ISR member returns; a returning out-of-sync replica does not lead. With unclean.leader.election.enable it does:
  the controller warns, writes continue, exactly the records acknowledged after it left the ISR are lost, and the
  old leader truncates its divergent records when it rejoins.
- A follower whose data directory is wiped (a replaced disk) rebuilds from the leader, byte for byte, and
  rejoins the ISR, and only once it holds the log (KIP-903: not on the strength of its former incarnation's
  progress).
- Controller failover on ZooKeeper: with the active coordinator SIGKILLed (or SIGSTOPped, a zombie) as a node dies,
  the standby takes over, moves the dead node's partitions to new leaders, and every partition state written since
  carries its controller epoch; acks=all writes go on throughout.

Every wait is on a condition with a generous deadline (the machine may be loaded); a node is declared dead
NodeCluster.SESSION_MS after its last heartbeat.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow.flight as flight
import pytest
from kazoo.client import KazooClient

import fabric
from fabric.client.producer import RecordMetadata
from fabric.common.errors import FabricError, LeaderNotAvailableError, NotEnoughReplicasError
from fabric.common.waiting import wait_for
from fabric.coordinator import zk_layout
from fabric.server.launcher import NodeProcess

pytestmark = pytest.mark.slow

SETTLE_S = 60  # a loaded machine may take a while past the session timeout to notice, decide and answer
TOPIC_ROOT = "/brokers/topics"


# -- waiting on a cluster in transition ---------------------------------------------------------------------------
def eventually(condition: Callable[[], Any], what: str, timeout: float = SETTLE_S) -> Any:
    """wait_for(condition), counting a retriable fabric error or a node that does not answer (leaders moving, a
    process restarting) as "not yet"."""
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


def partition(fab: fabric.Fabric, topic: str, p: int = 0) -> Any:
    """What describe_topic says of partition `p` (leader None while offline; end_offset the high watermark, -1
    when the leader did not answer and the controller's view of the partition is all there is)."""
    return fab.describe_topic(topic).partitions[p]


def led(fab: fabric.Fabric, topic: str, p: int = 0) -> Any:
    """Partition `p`'s description as its leader answers it (ISR, high watermark), or None when it has none or
    the leader did not answer."""
    described = partition(fab, topic, p)
    return described if described.leader is not None and described.end_offset >= 0 else None


def replica_status(node: NodeProcess, topic: str, p: int = 0) -> dict[str, Any]:
    """The node's `status` entry for its replica of partition `p` ({} while it has none)."""
    return next((r for r in node.status()["replicas"] if (r["topic"], r["partition"]) == (topic, p)), {})


def wait_isr(fab: fabric.Fabric, topic: str, isr: set[int], p: int = 0) -> Any:
    """Wait until the leader's ISR of partition `p` is exactly `isr`; the partition's description."""
    return eventually(lambda: (d := led(fab, topic, p)) and set(d.isr) == isr and d,
                      f"the ISR of {topic}-{p} to be {sorted(isr)}")


def wait_offline(fab: fabric.Fabric, topic: str, p: int = 0) -> Any:
    """Wait until partition `p` has no leader; the controller's description of it."""
    return eventually(lambda: (d := partition(fab, topic, p)).leader is None and d, f"{topic}-{p} to go offline")


def wait_in_sync(fab: fabric.Fabric, nodes: dict[int, NodeProcess], topic: str, members: set[int],
                 p: int = 0) -> int:
    """Wait until `members` are the ISR of partition `p`, each holds the leader's whole log and the high
    watermark covers it (every acknowledged record readable); the log end."""
    def synced() -> int | None:
        described = led(fab, topic, p)
        if described is None or set(described.isr) != members:
            return None
        ends = {replica_status(nodes[n], topic, p).get("log_end") for n in members}
        return ends.pop() if len(ends) == 1 and described.end_offset in ends else None
    return eventually(synced, f"replicas {sorted(members)} of {topic}-{p} to hold the whole log")


# -- writing and reading with a history ----------------------------------------------------------------------------
def certainly_failed(exc: BaseException) -> bool:
    """Whether a failed send certainly wrote nothing: refused by the leader before its append
    (NotEnoughReplicasError, not its AfterAppend subclass), or by the client because the partition is offline.
    Anything else (a timeout, a leader lost mid-call) leaves the outcome unknown."""
    return type(exc) is NotEnoughReplicasError or (isinstance(exc, LeaderNotAvailableError)
                                                   and "is offline" in str(exc))


class Writer:
    """A producer of `fab` (`config`: its settings) sending one record at a time to `topic` and recording each
    send in `recorder`: ok with its offset, fail when it certainly wrote nothing, info otherwise (then
    re-raised). A context manager: the producer is closed on exit."""

    def __init__(self, fab: fabric.Fabric, recorder: Any, topic: str, **config: Any) -> None:
        self.recorder, self.topic = recorder, topic
        self.producer = fab.producer(**config)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.producer.close()

    def send(self, value: bytes, p: int = 0) -> RecordMetadata:
        self.recorder.invoke(value, p, self.topic)
        try:
            meta = self.producer.send(self.topic, value, partition=p).result(SETTLE_S * 2)
        except Exception as exc:
            if certainly_failed(exc):
                self.recorder.fail(value, exc)
            else:
                self.recorder.info(value, exc)
            raise
        self.recorder.ok(value, meta.partition, meta.offset, self.topic)
        return meta

    def send_all(self, values: list[bytes], p: int = 0) -> list[int]:
        """Send each value in turn; their offsets."""
        return [self.send(v, p).offset for v in values]



def values(tag: str, count: int) -> list[bytes]:
    """`count` values unique across the history (the checker names a send by its value)."""
    return [f"{tag}-{i}".encode() for i in range(count)]


def final_read(fab: fabric.Fabric, recorder: Any, drain: Callable[..., list], topic: str, p: int = 0
               ) -> list[bytes]:
    """Read partition `p` whole from its leader (below the high watermark: call once the replicas are in sync)
    and record the read in the history; the values in offset order."""
    began = recorder.clock()
    end = eventually(lambda: led(fab, topic, p), f"the leader of {topic}-{p} to answer").end_offset
    consumer = fab.consumer(auto_offset_reset="earliest")
    try:
        consumer.assign([(topic, p)])
        records = drain(consumer, end, timeout=SETTLE_S)
    finally:
        consumer.close()
    recorder.read(p, [(r.offset, r.value) for r in records], start=0, end=end, topic=topic, began=began)
    return [r.value for r in records]


# -- replicas on disk ------------------------------------------------------------------------------------------
def partition_dir(node: NodeProcess, topic: str, p: int = 0) -> str:
    """Where `node` keeps its replica of partition `p`."""
    return os.path.join(node.data_dir, topic, str(p))


def data_frames(storage: Any, directory: str) -> list[bytes]:
    """Every record frame of a partition directory, byte for byte, in offset order (segment boundaries and the
    schema frame heading each segment are the replica's own, so they are left out)."""
    frames = []
    for path in storage.data_files(directory):
        with open(path, "rb") as f:
            data = f.read()
        frames += [data[pos:pos + header.size] for pos, header, _ in storage.scan_frames(path)
                   if not header.is_schema]
    return frames


def wipe(node: NodeProcess) -> None:
    """Remove everything in a stopped node's data directory, as a replaced disk would (its node.id file too), but
    the test harness's capture of the process output."""
    for name in os.listdir(node.data_dir):
        path = os.path.join(node.data_dir, name)
        if path != node.log_path:
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)


def epoch_checkpoint(directory: str) -> str:
    """A partition directory's leader-epoch checkpoint file (its epochs and their start offsets)."""
    with open(os.path.join(directory, "leader-epoch-checkpoint")) as f:
        return f.read()


def assert_same_replicas(storage: Any, nodes: list[NodeProcess], topic: str, p: int = 0) -> int:
    """The stopped nodes' replicas of partition `p` hold the same frames, byte for byte (CRCs valid), and the
    same leader epochs; the number of frames."""
    first, *others = [partition_dir(n, topic, p) for n in nodes]
    expected = data_frames(storage, first)
    assert expected
    for path in storage.data_files(first):
        assert all(ok for _, _, ok in storage.scan_frames(path)), path
    for other in others:
        assert data_frames(storage, other) == expected, f"{other} differs from {first}"
        assert epoch_checkpoint(other) == epoch_checkpoint(first)
    return len(expected)


# -- the tests ------------------------------------------------------------------------------------------------
def test_min_insync_replicas_refuses_acks_all_while_followers_are_down(node_cluster, history, drain,
                                                                      fabric_cli) -> None:
    """Kafka's case: RF 3, min.insync.replicas 2, both followers down. acks=all is refused without writing
    (NotEnoughReplicasError, retried until delivery_timeout_ms); acks=1 is written to the leader, but the high
    watermark stays until the ISR is back to min.insync.replicas (KIP-966). The followers return, catch up and
    rejoin; nothing acknowledged is lost, nothing refused appears."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("mir", replication_factor=3, config={"min.insync.replicas": "2"})
        leader = partition(fab, "mir").leader
        followers = {1, 2, 3} - {leader}
        with Writer(fab, recorder, "mir", acks="all") as w:
            assert w.send_all(values("all-before", 10)) == list(range(10))
        for n in followers:
            cluster.nodes[n].kill()
        described = wait_isr(fab, "mir", {leader})
        assert (described.leader, described.end_offset) == (leader, 10)
        shown = fabric_cli("topics", "describe", "mir", "--under-replicated-partitions", "--format", "json",
                           "--url", cluster.url)
        assert [(p["partition"], p["isr"]) for t in json.loads(shown.stdout) for p in t["partitions"]] == [
            (0, [leader])], shown.stderr

        with Writer(fab, recorder, "mir", acks="all", delivery_timeout_ms=5000, retry_backoff_ms=100) as w:
            began = time.monotonic()
            with pytest.raises(NotEnoughReplicasError, match="below its min.insync.replicas 2") as refused:
                w.send(b"all-refused")
            took = time.monotonic() - began
        assert type(refused.value) is NotEnoughReplicasError  # refused before the append, not after it
        assert took < 5 + 10, f"refused after {took:.1f} s, past delivery_timeout_ms (5 s) and slack"
        with Writer(fab, recorder, "mir", acks="1") as w:
            assert w.send_all(values("one-alone", 5)) == list(range(10, 15))
        assert replica_status(cluster.nodes[leader], "mir")["log_end"] == 15
        # the ISR is below min.insync.replicas: the high watermark does not advance
        assert eventually(lambda: led(fab, "mir"), "the leader to answer").end_offset == 10

        for n in followers:
            cluster.restart(n)
        assert wait_in_sync(fab, cluster.nodes, "mir", {1, 2, 3}) == 15
        with Writer(fab, recorder, "mir", acks="all") as w:
            assert w.send_all(values("all-after", 5)) == list(range(15, 20))
        wait_in_sync(fab, cluster.nodes, "mir", {1, 2, 3})
        read = final_read(fab, recorder, drain, "mir")
    assert b"all-refused" not in read
    assert history.check(dense=True).assert_valid().sends == {"ok": 20, "fail": 1}


def lose_the_whole_isr(cluster: Any, fab: fabric.Fabric, recorder: Any, topic: str, unclean: bool
                       ) -> tuple[int, int, int]:
    """RF 3 topic `topic` (one partition). Records "early" are written with every replica in sync; then node X,
    a follower, is SIGKILLed and leaves the ISR; records "late" are written with the other two; then those two
    die: the partition goes offline (describe, the CLI, producers). Returns (X, the old leader, the one ISR
    member the controller kept)."""
    fab.create_topic(topic, replication_factor=3,
                     config={"unclean.leader.election.enable": "true"} if unclean else {})
    leader = partition(fab, topic).leader
    x = min({1, 2, 3} - {leader})
    with Writer(fab, recorder, topic, acks="all") as w:
        assert w.send_all(values(f"{topic}-early", 10)) == list(range(10))
        cluster.nodes[x].kill()
        wait_isr(fab, topic, {1, 2, 3} - {x})
        assert w.send_all(values(f"{topic}-late", 6)) == list(range(10, 16))
    for n in {1, 2, 3} - {x}:
        cluster.nodes[n].kill()
    offline = wait_offline(fab, topic)
    assert len(offline.isr) == 1 and x not in offline.isr, offline  # the last member to die keeps the log
    assert offline.end_offset == -1  # unknown while offline
    with Writer(fab, recorder, topic, delivery_timeout_ms=1000, retry_backoff_ms=100) as w:
        with pytest.raises(LeaderNotAvailableError, match=f"{topic}-0 is offline"):
            w.send(f"{topic}-refused-offline".encode())
    return x, leader, offline.isr[0]


def unavailable(fabric_cli: Callable[..., Any], url: str) -> list[tuple[str, int]]:
    """What `fabric topics describe --unavailable-partitions --format json` lists."""
    shown = fabric_cli("topics", "describe", "--unavailable-partitions", "--format", "json", "--url", url)
    assert shown.returncode == 0, shown.stderr
    return [(t["name"], p["partition"]) for t in json.loads(shown.stdout) for p in t["partitions"]]


def test_a_partition_with_its_whole_isr_down_is_offline_until_an_isr_member_returns(node_cluster, history, drain,
                                                                                   fabric_cli) -> None:
    """Clean election only: a returning out-of-sync replica does not lead (it lacks acknowledged records); the
    returning ISR member does, under a new leader epoch, with every acknowledged record; the others catch up."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        x, _, last = lose_the_whole_isr(cluster, fab, recorder, "whole", unclean=False)
        assert unavailable(fabric_cli, cluster.url) == [("whole", 0)]
        offline_epoch = fab.cluster.describe_cluster(refresh=True).partitions[("whole", 0)].state.leader_epoch

        cluster.restart(x)  # registered: the controller has decided on it
        assert partition(fab, "whole").leader is None
        assert unavailable(fabric_cli, cluster.url) == [("whole", 0)]
        cluster.restart(last)
        back = eventually(lambda: (d := led(fab, "whole")) and d.leader == last and d, "the ISR member to lead")
        assert back.leader_epoch > offline_epoch and back.end_offset == 16
        assert unavailable(fabric_cli, cluster.url) == []
        with Writer(fab, recorder, "whole", acks="all") as w:
            assert w.send_all(values("whole-back", 4)) == list(range(16, 20))
        for n in set(cluster.nodes) - {x, last}:
            cluster.restart(n)
        wait_in_sync(fab, cluster.nodes, "whole", {1, 2, 3})
        final_read(fab, recorder, drain, "whole")
    assert history.check(dense=True).assert_valid().sends == {"ok": 20, "fail": 1}


def test_unclean_election_elects_an_out_of_sync_replica_and_reports_what_is_lost(node_cluster, history, drain,
                                                                                storage) -> None:
    """unclean.leader.election.enable=true: the out-of-sync replica X, back alone, leads at once, and the
    controller warns that records may be lost; writes go on. The history checker reports exactly the records
    acknowledged after X left the ISR as lost, and nothing else but their offsets now holding X's new records.
    The old leader, back, truncates those records (KIP-101) and copies X's log byte for byte."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        x, old_leader, _ = lose_the_whole_isr(cluster, fab, recorder, "unclean", unclean=True)
        offline_epoch = fab.cluster.describe_cluster(refresh=True).partitions[("unclean", 0)].state.leader_epoch

        cluster.restart(x)
        elected = eventually(lambda: (d := led(fab, "unclean")) and d.leader == x and d, "X to be elected")
        assert (elected.isr, elected.end_offset) == ((x,), 10) and elected.leader_epoch > offline_epoch
        with open(cluster.coordinator.log_path, errors="replace") as log:
            warnings = [line for line in log if "WARNING" in line and "unclean election" in line]
        assert len(warnings) == 1 and f"unclean election of node {x} " in warnings[0], warnings
        assert "may be lost" in warnings[0]
        with Writer(fab, recorder, "unclean", acks="all") as w:
            assert w.send_all(values("unclean-after", 4)) == list(range(10, 14))

        cluster.restart(old_leader)
        wait_in_sync(fab, cluster.nodes, "unclean", {x, old_leader})
        final_read(fab, recorder, drain, "unclean")
        for n in (x, old_leader):
            cluster.nodes[n].stop()
    assert assert_same_replicas(storage, [cluster.nodes[x], cluster.nodes[old_leader]], "unclean") == 14

    result = history.check(dense=True)
    late = {v.decode() for v in values("unclean-late", 6)}
    assert {lost.value for lost in result.lost} == late, result.summary()
    # X's new records took the lost records' first offsets
    assert sorted((io.partition, io.offset) for io in result.inconsistent_offsets) == [
        (("unclean", 0), o) for o in range(10, 14)], result.summary()
    assert not (result.duplicates or result.wrong_offsets or result.phantoms or result.gaps), result.summary()


def test_a_follower_with_a_wiped_data_directory_rebuilds_from_the_leader(node_cluster, history, drain,
                                                                         storage) -> None:
    """A replaced disk: the follower is stopped, its whole data directory (node.id file included) removed, and it
    starts again at once on an empty --data, likely before its session lapsed (its new registration then counts
    as a bounce, taking it out of the ISR). It copies the leader's log from offset 0 (several segments), rejoins
    the ISR once caught up, and holds the leader's frames byte for byte; acks=all writes go on meanwhile."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("wiped", replication_factor=3, config={"min.insync.replicas": "2",
                                                               "segment.bytes": "2048"})
        leader = partition(fab, "wiped").leader
        follower = min({1, 2, 3} - {leader})
        with Writer(fab, recorder, "wiped", acks="all") as w:
            w.send_all(values("wiped-before", 30))
            cluster.nodes[follower].stop()
            wipe(cluster.nodes[follower])
            cluster.restart(follower)
            assert w.send_all(values("wiped-while-copying", 10)) == list(range(30, 40))
            assert wait_in_sync(fab, cluster.nodes, "wiped", {1, 2, 3}) == 40
            assert replica_status(cluster.nodes[follower], "wiped")["role"] == "Follower"
            assert w.send_all(values("wiped-after", 5)) == list(range(40, 45))
        wait_in_sync(fab, cluster.nodes, "wiped", {1, 2, 3})
        final_read(fab, recorder, drain, "wiped")
    for n in cluster.nodes.values():
        n.stop()
    assert len(storage.data_files(partition_dir(cluster.nodes[leader], "wiped"))) > 2  # the copy spans segments
    assert assert_same_replicas(storage, [cluster.nodes[leader], cluster.nodes[follower]], "wiped") == 45
    history.check(dense=True).assert_valid()


def test_a_wiped_follower_rejoins_the_isr_only_once_it_holds_the_log(node_cluster, history, drain) -> None:
    """KIP-903's case: a follower's disk is replaced while it is down, long enough to have left the ISR, and
    nothing is written meanwhile. Its leader must not take the log end of the follower's previous incarnation
    for its progress: the follower may rejoin the ISR only once it holds every record below the high watermark,
    else a clean election could make the empty replica leader and lose acknowledged records. Followers fetch one
    frame at a time here, so catching up takes a while, and the node hosts many other partitions, which it opens
    before it fetches this one: its leader decides on the ISR a few times between its registration and its
    first fetch."""
    cluster = node_cluster(nodes=3, node_extra=("--replica-fetch-max-bytes", "1"))
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("a-padding", partitions=300, replication_factor=1)
        fab.create_topic("rejoin", replication_factor=3)
        leader = partition(fab, "rejoin").leader
        follower = min({1, 2, 3} - {leader})
        with Writer(fab, recorder, "rejoin", acks="all") as w:
            w.send_all(values("rejoin", 400))
        cluster.nodes[follower].kill()
        wait_isr(fab, "rejoin", {1, 2, 3} - {follower})
        wipe(cluster.nodes[follower])
        cluster.restart(follower)

        def rejoined() -> bool:
            described = led(fab, "rejoin")
            if described is None or follower not in described.isr:
                return False
            holds = replica_status(cluster.nodes[follower], "rejoin").get("log_end", 0)  # read after the ISR
            assert holds >= described.end_offset, (
                f"node {follower} is in the ISR {list(described.isr)} holding {holds} of the "
                f"{described.end_offset} records below the high watermark")
            return True
        eventually(rejoined, f"node {follower} to rejoin the ISR")
        wait_in_sync(fab, cluster.nodes, "rejoin", {1, 2, 3})
        final_read(fab, recorder, drain, "rejoin")
    history.check(dense=True).assert_valid()


class BackgroundWriters:
    """One thread per partition of `topic`, each sending acks=all records one at a time over a connection of its
    own (a producer sends under its lock, so a partition waiting for a new leader would hold up the others),
    recording in the history as process writer-<p>, until stop().

    Each send is one attempt (retries=0), and a failed one is left of unknown outcome while the next value is
    sent: this producer is not idempotent, so retrying a send whose answer was lost (its leader killed after the
    append reached the followers) may write it twice, which Kafka's non-idempotent producer does too."""

    BACKOFF_S = 0.1  # between a failed send and the next

    def __init__(self, url: str, history: Any, topic: str, partitions: int) -> None:
        """`url`: the fabric:// URL the writers connect to (its timeout_ms bounds an acks=all wait too)."""
        self.url, self.history, self.topic = url, history, topic
        self.acked = [0] * partitions
        self.crashed: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in range(partitions)]

    def start(self) -> BackgroundWriters:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self, p: int) -> None:
        try:
            with fabric.connect(self.url) as fab, \
                    Writer(fab, self.history.recorder(f"writer-{p}"), self.topic, acks="all", retries=0) as w:
                i = 0
                while not self._stop.is_set():
                    try:
                        w.send(f"{self.topic}-p{p}-{i}".encode(), p)
                        self.acked[p] += 1
                    except FabricError:  # recorded; a leader or the controller is moving
                        self._stop.wait(self.BACKOFF_S)
                    i += 1
        except BaseException as exc:  # noqa: BLE001 (the test fails on it in stop())
            self.crashed.append(exc)

    def wait_acked(self, p: int, more: int, what: str) -> None:
        """Wait until partition `p` has `more` acknowledgements than now."""
        target = self.acked[p] + more
        wait_for(lambda: self.acked[p] >= target, SETTLE_S, what, interval=0.2)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(SETTLE_S * 2)
        assert not any(t.is_alive() for t in self._threads), "a writer did not finish its last send"
        assert not self.crashed, self.crashed


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


def zk_states(zk: KazooClient, topic: str) -> dict[int, dict[str, Any]]:
    """The partition state znodes of `topic` ({leader, leader_epoch, isr, partition_epoch, controller_epoch}), by
    partition."""
    base = f"{TOPIC_ROOT}/{topic}/partitions"
    return {int(p): json.loads(zk.get(f"{base}/{p}/state")[0]) for p in zk.get_children(base)}


@pytest.mark.zookeeper
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "paused"])
def test_a_controller_failover_while_a_node_dies_moves_its_partitions_under_the_new_controller(
        node_cluster, history, drain, zk_url, tmp_path, the_active, how) -> None:
    """Two coordinator instances on ZooKeeper. The active one is SIGKILLed (or SIGSTOPped: a zombie) just after a
    data node is SIGKILLed: the standby wins the election with a higher controller epoch, gives the nodes a
    session, declares the dead node dead and elects new leaders for its partitions (higher leader epochs). Every
    partition state written after the failover carries the new controller epoch, the surviving nodes follow it,
    and acks=all writes to every partition go on across it, nothing lost or duplicated. The zombie, resumed
    with every node lease it held long lapsed, learns it was deposed and changes nothing: its writes are fenced
    by /controller_epoch, the nodes ignore its views."""
    config = tmp_path / "zk.properties"
    config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms=2000\n")
    cluster = node_cluster(nodes=3, coordinator_extra=("--config", str(config)), instances=2)
    # clients give up on an instance that does not answer (the paused one) after 10 s, not 30, then try the
    # other; a writer's send timed out meanwhile is merely of unknown outcome
    url = f"{cluster.url}?timeout_ms=10000"
    with zk_client(zk_url) as zk, fabric.connect(url) as fab:
        fab.create_topic("failover", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
        first = wait_for(lambda: the_active(fab), SETTLE_S, "an active coordinator")
        deposed = next(c for c in cluster.coordinators if c.address == first.instance)
        before = {p.partition: p for p in fab.describe_topic("failover").partitions}
        victim = before[0].leader
        moved = sorted(p for p, d in before.items() if d.leader == victim)
        survivors = {n: node for n, node in cluster.nodes.items() if n != victim}
        writers = BackgroundWriters(url, history, "failover", 3).start()
        try:
            for p in range(3):
                writers.wait_acked(p, 5, f"writes to partition {p}")
            cluster.nodes[victim].kill()
            os.kill(deposed.process.pid, how)
            at_failover = zk_states(zk, "failover")  # the deposed controller decides nothing from here on

            active = eventually(lambda: (a := the_active(fab)) and a.instance != first.instance and a,
                                "the standby to take over")
            assert active.epoch > first.epoch
            assert int(zk.get("/controller_epoch")[0]) == active.epoch
            eventually(lambda: {node.status()["controller_epoch"] for node in survivors.values()} == {active.epoch},
                       "the surviving nodes to heartbeat to the new controller")

            def moved_on() -> bool:
                now = {p.partition: p for p in fab.describe_topic("failover").partitions}
                return all(now[p].leader not in (None, victim) and now[p].leader_epoch > before[p].leader_epoch
                           for p in moved) and all(victim not in d.isr for d in now.values())
            eventually(moved_on, f"node {victim}'s partitions {moved} to get new leaders and ISRs without it")
            for p in range(3):  # acks=all goes on everywhere, the moved partitions at their new leaders
                writers.wait_acked(p, 5, f"writes to partition {p} after the failover")
            if how == signal.SIGSTOP:
                os.kill(deposed.process.pid, signal.SIGCONT)
                eventually(lambda: not deposed.status().active, "the resumed instance to know it was deposed")
                for p in range(3):
                    writers.wait_acked(p, 5, f"writes to partition {p} with the deposed instance back")
        finally:
            os.kill(deposed.process.pid, signal.SIGCONT)  # a paused instance must be able to stop after the test
            writers.stop()

        states = zk_states(zk, "failover")
        for p, state in states.items():
            if state["partition_epoch"] != at_failover[p]["partition_epoch"]:
                assert state["controller_epoch"] == active.epoch, (p, state, at_failover[p])
        for p in moved:
            assert states[p]["leader"] != victim and states[p]["controller_epoch"] == active.epoch, states[p]
            assert states[p]["leader_epoch"] > at_failover[p]["leader_epoch"]
        assert {node.status()["controller_epoch"] for node in survivors.values()} == {active.epoch}
        described = fab.cluster.describe_cluster(refresh=True)
        assert described.controller_epoch == active.epoch
        assert {n.id for n in described.nodes if n.alive} == set(survivors)
        reader = history.recorder("reader")
        for p in range(3):
            wait_in_sync(fab, survivors, "failover", set(survivors), p)
            final_read(fab, reader, drain, "failover", p)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] == sum(writers.acked) >= 30, result.summary()
