"""Group offsets in the replicated `__consumer_offsets` topic on the data nodes (fabric/server/replicated_offsets.py),
as real coordinator, node and ZooKeeper processes: commits land in the topic's partitions on the nodes, in sync,
and `fabric groups describe` shows them; SIGKILL of the node leading the group's offsets partition, SIGKILL of
the active ZooKeeper-backed coordinator and SIGSTOP of the next one (instances with data directories of their own,
so nothing local can keep an offset) lose no acknowledged commit, a group consumer resumes from the last one, and
the deposed instance's late commit is refused. The offsets of the coordinator's local topic move to the nodes
once."""
from __future__ import annotations

import os
import shutil
import threading
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import fabric
from fabric.common.errors import FabricError, InvalidProducerEpochError
from fabric.common.protocol import payloads
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.waiting import wait_for
from fabric.coordinator.offsets_records import OFFSETS_PARTITIONS, OFFSETS_TOPIC, batch, offset_key, offsets_partition
from fabric.server import wire
from fabric.server.connection import put_call
from fabric.server.launcher import CoordinatorProcess
from fabric.server.protocol_server import WORKERS
from fabric.server.replicated_offsets import OFFSETS_PRODUCER_ID

GROUP, TOPIC, PARTITIONS, RECORDS = "resumers", "events", 2, 2000
SETTLE_S = 60  # a failover on a loaded machine: a session timeout, an election, the topic loaded


class Committer:
    """Commits offset n of every partition of TOPIC for GROUP, n = first, first + 1, ... in a thread through a
    client of `url`, each retriable failure retried with the same n; `acked` is the last acknowledged n, `sent`
    the one being sent. stop() returns between two commits, so then nothing is in flight."""

    def __init__(self, url: str, first: int) -> None:
        self.url, self.acked, self.sent = url, first - 1, first - 1
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Committer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            with fabric.connect(self.url) as fab:
                while not self._stop.is_set():
                    self.sent = n = self.acked + 1
                    try:
                        fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, p): n for p in range(PARTITIONS)})
                    except FabricError as exc:
                        if not exc.retriable:
                            raise
                        self._stop.wait(0.05)  # backoff before the retry
                        continue
                    self.acked = n
        except BaseException as exc:  # noqa: BLE001 (reported by wait_acked)
            self.failure = exc

    def wait_acked(self, target: int, what: str) -> None:
        def reached() -> bool:
            if self.failure is not None:
                raise AssertionError(f"the committer failed: {self.failure!r}")
            return self.acked >= target
        wait_for(reached, SETTLE_S, f"commit {target} acknowledged {what}")

    def stop(self) -> int:
        """Stop after the commit in flight; the last acknowledged n."""
        self._stop.set()
        self._thread.join(SETTLE_S)
        assert not self._thread.is_alive(), "the committer did not stop"
        assert self.failure is None, repr(self.failure)
        return self.acked


def _fill(fab: fabric.Fabric) -> None:
    fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    with fab.producer() as producer:
        producer.send_batch(TOPIC, pa.table({"value": [b"v%d" % i for i in range(RECORDS * PARTITIONS)],
                                             "partition": [i % PARTITIONS for i in range(RECORDS * PARTITIONS)]}))


def _committed(fab: fabric.Fabric) -> dict[int, int]:
    return _committed_group(fab, GROUP)


def _committed_group(fab: fabric.Fabric, group: str) -> dict[int, int]:
    return {tp[1]: c.offset for tp, c in fab.cluster.coordinator.committed(group).items()}


def _committed_once_loaded(fab: fabric.Fabric) -> dict[int, int]:
    """_committed, waiting while a (re)started coordinator is still loading the offsets topic (retriable)."""
    def attempt() -> dict[int, int] | None:
        try:
            return _committed(fab)
        except FabricError as exc:
            if not exc.retriable:
                raise
            return None
    return wait_for(attempt, SETTLE_S, "the offsets topic loaded on the restarted coordinator")


def _late_append(fab: fabric.Fabric, partition: int, leader_epoch: int, producer_epoch: int) -> Callable[..., Any]:
    """A DoPut of a commit record to the offsets topic's `partition` as the offsets producer under
    `producer_epoch` (sequence 1, the next after a leadership record), as a deposed instance would send it."""
    rows = batch([(offset_key(GROUP, (TOPIC, 0)), {"next_offset": 1, "metadata": "", "commit_ms": 0})], 0)
    topic_id = fab.cluster.describe_cluster(refresh=True).topic_ids[OFFSETS_TOPIC]
    descriptor = wire.put_descriptor("append", topic=OFFSETS_TOPIC, partition=partition, codec="none",
                                     leader_epoch=leader_epoch, topic_id=topic_id, acks="all", timeout_ms=8000,
                                     producer_id=OFFSETS_PRODUCER_ID, producer_epoch=producer_epoch,
                                     base_sequence=1)
    return put_call(descriptor, rows.schema, lambda: [rows])


def _resumes_at(fab: fabric.Fabric, drain, offset: int) -> None:
    """A group member's first records are at `offset` in every partition."""
    with fab.consumer(TOPIC, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        records = drain(consumer, (RECORDS - offset) * PARTITIONS, timeout=SETTLE_S)
    assert {p: min(r.offset for r in records if r.partition == p) for p in range(PARTITIONS)} == \
        dict.fromkeys(range(PARTITIONS), offset)


def test_commits_land_on_the_nodes_in_sync_and_survive_the_leader_node_killed(node_cluster, replication, drain,
                                                                                fabric_cli) -> None:
    cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3"))
    with fabric.connect(cluster.url) as fab:
        _fill(fab)
        with Committer(cluster.url, 1) as committer:
            committer.wait_acked(20, "on a fresh cluster")
        p = offsets_partition(GROUP)
        described = fab.describe_topic(OFFSETS_TOPIC).partitions
        assert len(described) == OFFSETS_PARTITIONS and all(len(d.replicas) == 3 for d in described)
        acked = committer.acked
        end = replication.wait_in_sync(fab, cluster.nodes, OFFSETS_TOPIC, p)  # every replica holds every commit
        assert end >= acked + 1  # the leadership record, then one record per partition per commit
        assert _committed(fab) == dict.fromkeys(range(PARTITIONS), acked)
        shown = fabric_cli("groups", "describe", GROUP, "--url", cluster.url)
        assert shown.returncode == 0, shown.stderr
        rows = [line.split() for line in shown.stdout.splitlines() if line.startswith(GROUP)]
        assert sorted((int(r[2]), int(r[3])) for r in rows) == [(q, acked) for q in range(PARTITIONS)], shown.stdout

        leader = replication.state(fab, OFFSETS_TOPIC, p)
        with Committer(cluster.url, acked + 1) as committer:
            committer.wait_acked(acked + 10, "before the kill")
            cluster.nodes[leader.leader].kill()
            killed_at = committer.acked
            committer.wait_acked(killed_at + 20, "after the offsets partition's leader was SIGKILLed")
        acked = committer.acked
        assert replication.state(fab, OFFSETS_TOPIC, p).leader != leader.leader
        assert _committed(fab) == dict.fromkeys(range(PARTITIONS), acked)
        _resumes_at(fab, drain, acked)


def test_coordinator_failover_keeps_every_acknowledged_commit_and_fences_the_deposed(
        offsets_kit, node_cluster, zk_url, tmp_path, the_active, raw, drain, replication) -> None:
    ha = offsets_kit.HaOffsetsCluster(node_cluster, zk_url, tmp_path, the_active)
    cluster, url, active_process = ha.cluster, ha.url, ha.active_process
    with fabric.connect(url) as fab:
        first = active_process(fab)
        _fill(fab)
        with Committer(url, 1) as committer:
            committer.wait_acked(20, "on the first active instance")
            first.kill()  # SIGKILL: its data directory is not the other instance's
            killed_at = committer.acked
            committer.wait_acked(killed_at + 20, "after the active instance was SIGKILLed")
        acked = committer.acked
        second = active_process(fab)
        assert second is not first
        assert _committed(fab) == dict.fromkeys(range(PARTITIONS), acked)

        fenced_epoch = wait_for(lambda: the_active(fab), SETTLE_S, "the active instance").epoch  # `second`'s
        index = cluster.coordinators.index(first)
        cluster.coordinators[index] = first = CoordinatorProcess(first.data_dir, port=first.port,
                                                                 extra=first.extra).start()  # a standby now
        with Committer(url, acked + 1) as committer:
            committer.wait_acked(acked + 10, "before the pause")
            second.pause()  # SIGSTOP: it still believes it is active when it resumes
            paused_at = committer.acked
            committer.wait_acked(paused_at + 20, "after the active instance was SIGSTOPped")
        acked = committer.acked
        assert active_process(fab) is first
        second.resume()
        with pytest.raises(FabricError) as refused:  # the deposed instance's late commit
            raw.action(second.address, "commit_offsets", group=GROUP, offsets={(TOPIC, 0): 1})
        assert refused.value.retriable, refused.value
        # whatever the deposed instance still believes, the nodes refuse its epoch: the new active instance's
        # leadership record fenced the offsets producer's older epochs on every partition
        p = offsets_partition(GROUP)
        leader = replication.state(fab, OFFSETS_TOPIC, p)
        address = next(n.address for n in fab.list_nodes() if n.id == leader.leader)
        with pytest.raises(InvalidProducerEpochError, match=f"epoch {fenced_epoch} is older"):
            raw.call(address, _late_append(fab, p, leader.leader_epoch, fenced_epoch))
        assert _committed(fab) == dict.fromkeys(range(PARTITIONS), acked)
        _resumes_at(fab, drain, acked)


def test_offsets_of_the_local_topic_move_to_the_nodes_once(node_cluster) -> None:
    cluster = node_cluster()  # no offsets.topic.replication.factor: offsets in the coordinator's directory
    old = cluster.coordinator
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): 7, (TOPIC, 1): 8})

    def restart(*extra: str) -> CoordinatorProcess:
        cluster.coordinator.stop()
        cluster.coordinators[0] = CoordinatorProcess(old.data_dir, port=old.port, extra=(*old.extra, *extra))
        return cluster.coordinators[0].start()

    restart("--offsets-topic-replication-factor", "3")
    with fabric.connect(cluster.url) as fab:
        assert _committed_once_loaded(fab) == {0: 7, 1: 8}  # migrated
        fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): 9})
    restart("--offsets-topic-replication-factor", "3")
    with fabric.connect(cluster.url) as fab:
        assert _committed_once_loaded(fab) == {0: 9, 1: 8}  # the local 7 was not migrated again
    shutil.rmtree(Path(old.data_dir) / "__fabric" / OFFSETS_TOPIC)  # from now on only the nodes have them
    restart("--offsets-topic-replication-factor", "3")
    with fabric.connect(cluster.url) as fab:
        assert _committed_once_loaded(fab) == {0: 9, 1: 8}


def test_the_offsets_topic_is_created_at_the_first_group_request_over_every_node_alive_then(node_cluster) -> None:
    """Kafka creates `__consumer_offsets` at the first FindCoordinator, not when the cluster starts: a coordinator
    that created it as soon as `offsets.topic.replication.factor` nodes had registered would put every group on
    the first three nodes of a cluster started node by node. Five nodes registered, nothing asked of a group:
    no offsets topic yet; the first commit (retried by the client while it is created and loaded) creates it over
    all five. Until then the coordinator's log says it waits for that request, and warns of nothing, not even of
    a topic deleted meanwhile (no offsets topic holds no offsets of it: 16 warnings that they stayed, before)."""
    cluster = node_cluster(nodes=5, coordinator_extra=("--offsets-topic-replication-factor", "3"))
    log = Path(cluster.coordinator.log_path)
    with fabric.connect(cluster.url) as fab:
        _fill(fab)
        fab.create_topic("short-lived", partitions=1)
        fab.delete_topic("short-lived")
        assert OFFSETS_TOPIC not in fab.cluster.describe_cluster(refresh=True).topic_ids
        wait_for(lambda: "waits for the first group request" in log.read_text(errors="replace"), 60,
                 "the offsets loader to say it waits for the first group request")
        before = log.read_text(errors="replace")
        assert "short-lived" in before  # its deletion went through this coordinator
        assert not [line for line in before.splitlines() if "WARNING" in line
                    and ("group offsets" in line or "short-lived" in line)]
        fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): 5})
        assert _committed(fab) == {0: 5}
        hosts = {node for p in range(OFFSETS_PARTITIONS)
                 for node in fab.partition_assignment(OFFSETS_TOPIC, p).assignment.replicas}
        assert hosts == set(cluster.nodes) == {1, 2, 3, 4, 5}


def test_the_nodes_compact_the_offsets_topic_so_it_stays_small(node_cluster, replication, the_active, raw) -> None:
    """Commits of the same keys for as long as ~1500 take (about 10 s here) into an offsets topic of 16 KiB
    segments, which the nodes clean every 300 ms: every replica of the group's partition ends a few segments
    big, below what the frame headers of those commits alone would take uncompacted; the group reads its
    latest commits, a restarted coordinator loads them from the compacted topic, and the nodes still refuse the
    offsets producer's epoch of the instance before it (the cleaner keeps the producer's last batch)."""
    segment = 16384
    cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3",
                                              "--offsets-topic-segment-bytes", str(segment)),
                           node_extra=("--log-retention-check-interval-ms", "300"))
    p = offsets_partition(GROUP)
    with fabric.connect(cluster.url) as fab:
        _fill(fab)
        old_epoch = wait_for(lambda: the_active(fab), SETTLE_S, "the active instance").epoch
        with Committer(cluster.url, 1) as committer:
            committer.wait_acked(1500, "of the same keys")
        acked = committer.acked
        end = replication.wait_in_sync(fab, cluster.nodes, OFFSETS_TOPIC, p)
        assert end >= acked  # a record per partition per commit, in one frame (64-byte header) per commit at least

        def sizes() -> dict[int, int]:
            dirs = {n: replication.partition_dir(node, OFFSETS_TOPIC, p) for n, node in cluster.nodes.items()}
            return {n: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".arrows"))
                    for n, d in dirs.items()}
        small = replication.eventually(lambda: all(s <= 3 * segment for s in sizes().values()) and sizes(),
                                       f"every replica of {OFFSETS_TOPIC}-{p} to be compacted to 3 segments")
        assert max(small.values()) * 2 < acked * 64, (small, acked)  # far below the uncompacted headers alone
        assert _committed(fab) == dict.fromkeys(range(PARTITIONS), acked)

    old = cluster.coordinator
    old.stop()  # a failover to a new instance of the store: it loads the compacted topic
    cluster.coordinators[0] = CoordinatorProcess(old.data_dir, port=old.port, extra=old.extra).start()
    with fabric.connect(cluster.url) as fab:
        assert _committed_once_loaded(fab) == dict.fromkeys(range(PARTITIONS), acked)
        leader = replication.state(fab, OFFSETS_TOPIC, p)
        address = next(n.address for n in fab.list_nodes() if n.id == leader.leader)
        with pytest.raises(InvalidProducerEpochError, match=f"epoch {old_epoch} is older"):
            raw.call(address, _late_append(fab, p, leader.leader_epoch, old_epoch))


def test_concurrent_commits_of_groups_sharing_a_partition_are_all_kept(node_cluster) -> None:
    """Groups whose offsets share one partition commit at once, each from its own client, back to back: commits
    that meet an append in flight go together in the next one (group commit). Every commit is acknowledged and
    each group's last one is what the nodes keep: a restarted coordinator loads exactly those from the topic."""
    cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3"))
    p = offsets_partition(GROUP)
    groups = [g for g in (f"sharer-{i}" for i in range(1000)) if offsets_partition(g) == p][:8]
    commits, failures = 30, []

    def commit_all(group: str) -> None:
        try:
            with fabric.connect(cluster.url) as fab:
                for n in range(1, commits + 1):
                    fab.cluster.coordinator.commit_offsets(group, {(TOPIC, 0): n, (TOPIC, 1): n})
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            failures.append((group, exc))

    with fabric.connect(cluster.url) as fab:
        _fill(fab)
        fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): 0})  # the topic is loaded: no retries below
        threads = [threading.Thread(target=commit_all, args=(g,), daemon=True) for g in groups]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SETTLE_S)
        assert not any(t.is_alive() for t in threads) and failures == []
        assert {g: _committed_group(fab, g) for g in groups} == {g: {0: commits, 1: commits} for g in groups}
    old = cluster.coordinator
    old.stop()
    cluster.coordinators[0] = CoordinatorProcess(old.data_dir, port=old.port, extra=old.extra).start()
    with fabric.connect(cluster.url) as fab:
        _committed_once_loaded(fab)
        assert {g: _committed_group(fab, g) for g in groups} == {g: {0: commits, 1: commits} for g in groups}


@pytest.mark.parametrize("store", ["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def test_commits_waiting_on_a_paused_leader_hold_no_worker_of_the_coordinator(store, request, node_cluster,
                                                                               replication) -> None:
    """The coordinator sends a commit's append to its leader from its event loop and answers it from there
    (fabric/server/offsets_on_loop.py), over SQLite and, once the commit's topics are kept in memory, over
    ZooKeeper: with the leader of the offsets partitions of some groups SIGSTOPped, more commits of theirs than
    the coordinator instance has worker threads wait on it, and a commit of a group whose partition another node
    leads, sent after all of them on the same connection, is answered while none of theirs is written. Once the
    node resumes, every waiting commit is acknowledged and kept (sent again where its answer failed, written
    once)."""
    if store == "sqlite":
        cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3", "--metrics-port", "0"))
        url, instance = cluster.url, cluster.coordinator
    else:
        ha = request.getfixturevalue("offsets_kit").HaOffsetsCluster(
            node_cluster, request.getfixturevalue("zk_url"), request.getfixturevalue("tmp_path"),
            request.getfixturevalue("the_active"))
        cluster, url = ha.cluster, ha.url
    with fabric.connect(url) as fab:
        if store == "zookeeper":
            instance = ha.active_process(fab)
        _fill(fab)
        served = wait_for(lambda: _served_by(fab, instance.address, shared=store == "zookeeper"), SETTLE_S,
                          "the offsets topic loaded (shared out between the instances)")
        leaders = {p: replication.state(fab, OFFSETS_TOPIC, p).leader for p in served}
        stopped = leaders[min(served)]
        waiting = [g for g in (f"waiter-{i}" for i in range(20_000))
                   if leaders.get(offsets_partition(g)) == stopped][:WORKERS + 8]
        other = next(g for g in (f"other-{i}" for i in range(1000))
                     if leaders.get(offsets_partition(g), stopped) != stopped)
        for group in [*waiting, other]:
            fab.cluster.coordinator.commit_offsets(group, {(TOPIC, 0): 1})
        address = fab.cluster.connection.status_of(instance.address).protocol_address
        connection = ProtocolConnection(address, None, None, SETTLE_S, wire.exception_of)
        node = cluster.nodes[stopped]
        node.pause()
        try:
            sent = [connection.send("commit_offsets", {"group": g, "offsets": [[TOPIC, 0, 2]]}) for g in waiting]
            connection.wait(connection.send("commit_offsets", {"group": other, "offsets": [[TOPIC, 0, 2]]}),
                            SETTLE_S)
            assert {g: _committed_group(fab, g)[0] for g in waiting} == dict.fromkeys(waiting, 1)
        finally:
            node.resume()
        for request_id in sent:
            connection.wait(request_id, SETTLE_S)
        connection.close()
        assert {g: _committed_group(fab, g)[0] for g in [*waiting, other]} == dict.fromkeys([*waiting, other], 2)
    if store == "sqlite":  # the first append to each node went through a worker (it learns the node's address)
        port = instance.status().metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            scraped = {s.labels.get("path"): s.value for family in text_string_to_metric_families(
                answer.read().decode()) for s in family.samples if s.name == "fabric_offsets_appends_total"}
        assert scraped["loop"] >= 1 and scraped["worker"] >= 1, scraped


def test_a_coordinator_whose_offsets_are_on_the_nodes_holds_long_polls_without_a_worker(node_cluster) -> None:
    """A cluster's coordinator (its offsets topic on the nodes) holds consumers' long polls of the topics it keeps
    itself on its event loop, as a lone service does: more of them than it has worker threads, all from one
    connection, leave another client's produce and fetch answered at once (before, each held a worker, and the
    produce waited until the polls' max_wait_ms ran out), and an append to their partition answers every one."""
    cluster = node_cluster(nodes=1, coordinator_extra=("--offsets-topic-replication-factor", "1"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("kept-here", partitions=2)  # no replication factor: in the coordinator's directory
        address = fab.cluster.connection.status_of(cluster.coordinator.address).protocol_address
        polls = ProtocolConnection(address, None, None, SETTLE_S, wire.exception_of)
        idle = [polls.send("fetch", {"topic": "kept-here", "partition": 0, "offset": 0, "max_bytes": 1 << 20,
                                     "max_wait_ms": 120_000}) for _ in range(WORKERS + 6)]
        with fab.producer() as producer:  # (a client of its own connection)
            assert producer.send("kept-here", b"not stalled", partition=1).get(timeout=30).offset == 0
        reader = fab.consumer(auto_offset_reset="earliest")
        reader.assign([("kept-here", 1)])
        assert [r.value for r in reader.poll(timeout=30)] == [b"not stalled"]
        reader.close()
        with fab.producer() as producer:
            producer.send("kept-here", b"the end of the wait", partition=0).get(timeout=30)
        for request in idle:
            fetched = payloads.fetched_of(*polls.wait(request, SETTLE_S))
            assert [(r.offset, r.batch.column("value").to_pylist()) for r in fetched] == [(0, [b"the end of the wait"])]
        polls.close()


def _served_by(fab: fabric.Fabric, address: str, shared: bool) -> set[int] | None:
    """The offsets partitions the instance at `address` serves, once their groups' offsets are loaded (a commit of
    one of them is answered) and, if `shared`, once it shares them with another instance; a lone instance (over
    SQLite) serves them all."""
    status = fab.cluster.statuses().get(address)
    if status is None or isinstance(status, Exception):
        return None
    served = set(status.group_partitions) or set(range(OFFSETS_PARTITIONS))
    group = next(g for g in (f"probe-{i}" for i in range(1000)) if offsets_partition(g) in served)
    try:  # (the first group request also creates the offsets topic: until then there is nothing to share out)
        fab.cluster.coordinator.commit_offsets(group, {(TOPIC, 0): 0})
    except FabricError as exc:
        if not exc.retriable:
            raise
        return None
    return None if shared and not 0 < len(served) < OFFSETS_PARTITIONS else served
