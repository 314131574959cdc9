"""Exactly once across machines: jobs/transform.py submitted with spark-submit to a real Spark standalone cluster
(`spark_cluster`: a master and two workers, executors in JVMs and Python workers of their own) copies a replicated
topic into another on a real fabric cluster of three data nodes and two coordinator instances on ZooKeeper, while
the test SIGKILLs an executor, the leader node of an output partition (restarted after), the active coordinator
(the standby takes over) and the driver (the job is submitted again with the same checkpoint). A read_committed
consumer polls the output all along.

Every wait follows the jobs' progress (the Spark cluster's logs, the query's checkpoint), not a wall clock, and the
reader thread and the jobs end with the test, however it ends.

Checked: the output holds every input record exactly once (compared record by record), and the consumer never saw
a record twice nor one that is not in the final output, so it never read a record of a batch that did not commit
(a replayed batch writes the same values again: reading an aborted attempt's records would show as a duplicate).
"""
from __future__ import annotations

import collections
import os
import signal
import threading
from pathlib import Path

import pytest

import fabric
from fabric.common.errors import FabricError
from fabric.common.waiting import wait_progressing

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TRANSFORM = Path(__file__).resolve().parents[2] / "jobs" / "transform.py"
PARTITIONS, RECORDS, PER_BATCH = 3, 3600, 300  # about 12 micro-batches
# pytest-timeout's hang guard for this test, above the suite's 900 s: its waits follow the jobs' progress, and five
# Spark runs on a loaded 2-core machine (load 20+) take longer than that while progressing all along
HANG_GUARD_S = 2400


class CommittedReader(threading.Thread):
    """Polls `topic` read_committed from the start until stopped and every partition is read to its end (or at
    once when halted); `seen` counts each value read."""

    def __init__(self, url: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.url, self.topic = url, topic
        self.seen: collections.Counter[bytes] = collections.Counter()
        self.stop, self.halt = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with fabric.connect(self.url) as fab, fab.consumer(auto_offset_reset="earliest") as consumer:
                partitions = [(self.topic, p) for p in range(PARTITIONS)]
                consumer.assign(partitions)
                while not self.halt.is_set() and not self._caught_up(consumer, partitions):
                    try:
                        self.seen.update(r.value for r in consumer.poll(timeout=0.5))
                    except FabricError as exc:  # a leader being killed: poll raises it once its timeout passed
                        if not exc.retriable:
                            raise
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc

    def _caught_up(self, consumer, partitions) -> bool:
        """Stopped, and read up to every partition's end (ends unknown while a leader moves: not yet)."""
        if not self.stop.is_set():
            return False
        try:
            ends = consumer.end_offsets(partitions)
        except FabricError as exc:
            if not exc.retriable:
                raise
            return False
        return all(consumer.position(*tp) >= ends[tp] for tp in partitions)


def committed_total(fab: fabric.Fabric, topic: str) -> int:
    """The sum of the topic's partition ends (last stable offsets): grows as micro-batches commit."""
    try:
        return sum(max(p.end_offset, 0) for p in fab.describe_topic(topic).partitions)
    except FabricError as exc:
        if exc.retriable:
            return -1
        raise


@pytest.mark.zookeeper
@pytest.mark.timeout(HANG_GUARD_S)
def test_transform_on_a_spark_cluster_writes_every_record_once_through_kills(
        spark_cluster, node_cluster, replication, zk_url, the_active, tmp_path, running) -> None:
    config = tmp_path / "zk.properties"
    config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms=2000\n")
    cluster = node_cluster(coordinator_extra=("--config", str(config)), instances=2)
    url = replication.client_url(cluster)
    values = [f"rec-{i:05d}".encode() for i in range(RECORDS)]
    with fabric.connect(url) as fab:
        for topic in ("raw", "copied"):
            fab.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer() as producer:
            for i, value in enumerate(values):
                producer.send("raw", value, key=b"k%d" % (i % 97))
        with running(CommittedReader(url, "copied")) as reader:
            _transform_through_kills(spark_cluster, cluster, replication, the_active, fab, url, tmp_path)
            reader.stop.set()
            wait_progressing(lambda: not reader.is_alive(), lambda: sum(reader.seen.values()),
                             spark_cluster.STALL_S, "the reader to read the output to its end")
            assert reader.error is None, reader.error
        final = collections.Counter()
        with fab.consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([("copied", p) for p in range(PARTITIONS)])
            while sum(final.values()) < RECORDS:
                got = consumer.poll(timeout=30)
                assert got, f"the output stopped at {sum(final.values())} of {RECORDS} records"
                final.update(r.value for r in got)
            assert consumer.poll(timeout=2) == []
    assert sorted(final.elements()) == values  # every input record exactly once
    twice = [v for v, n in reader.seen.items() if n > 1]
    assert not twice, f"the read_committed consumer saw {len(twice)} records twice, e.g. {twice[:3]}"
    assert not set(reader.seen) - set(values), "the consumer saw records that are not in the output"


def _transform_through_kills(spark_cluster, cluster, replication, the_active, fab: fabric.Fabric, url: str,
                             tmp_path: Path) -> None:
    """Run jobs/transform.py from `raw` to `copied`, killing an executor, an output leader, the active coordinator
    and the driver in turn, each once the query committed more; then run it again to the end."""
    checkpoint = tmp_path / "checkpoint"
    args = ["--url", url, "--checkpoint", str(checkpoint), "--input", "raw", "--output", "copied",
            "--sql", "SELECT key, value FROM input", "--max-offsets-per-trigger", str(PER_BATCH)]

    def progressed(beyond: int, query) -> int:
        """Wait until the output's committed records pass `beyond` (or the job ended); how many there are."""
        spark_cluster.wait(lambda: committed_total(fab, "copied") > beyond or query.ended(),
                           f"the transform query to commit more than {beyond} records", checkpoint)
        assert not query.ended(), f"the job ended before the kills:\n{spark_cluster.output(query.job)}"
        return committed_total(fab, "copied")

    query = spark_cluster.supervise(TRANSFORM, *args, name="fabric-transform")
    # 1. an executor JVM: its tasks run again on the other executor (or its replacement)
    done = progressed(0, query)
    app = spark_cluster.wait_for_app("fabric-transform")
    spark_cluster.kill_executor(app_id=app["id"])
    # 2. the leader of an output partition: the controller elects another, the sink's appends and markers retry
    done = progressed(done, query)
    before = replication.state(fab, "copied", 0)
    cluster.nodes[before.leader].kill()
    replication.wait_elected(fab, "copied", 0, before)
    cluster.restart(before.leader)
    # 3. the active coordinator (the commit point): the standby wins the election, the sink's calls move there
    done = progressed(done, query)
    first = replication.eventually(lambda: the_active(fab), "an active coordinator")
    next(c for c in cluster.coordinators if c.address == first.instance).kill()
    replication.eventually(lambda: (a := the_active(fab)) and a.instance != first.instance and a,
                           "the standby to take over")
    # 4. the driver: the query starts again from its checkpoint, replaying the batch it was in
    progressed(done, query)
    os.killpg(query.job.pid, signal.SIGKILL)
    query.job.wait(60)
    rerun = spark_cluster.supervise(TRANSFORM, *args, name="fabric-transform")
    spark_cluster.wait(rerun.ended, "the rerun to finish the input", checkpoint)
    assert rerun.job.returncode == 0, spark_cluster.output(rerun.job)


ARCHIVE = TRANSFORM.parent / "archive.py"


def test_archive_on_a_spark_cluster_fills_a_delta_table_and_shows_its_lag(spark_cluster, shared_cluster, fabric_cli,
                                                                         tmp_path) -> None:
    """jobs/archive.py (Delta) submitted to the Spark cluster reads a replicated topic into a Delta table, every
    record once; the query's consumer group (groupId) shows in `fabric groups describe` with its committed
    offsets at the partitions' ends: lag 0."""
    from deltalake import DeltaTable

    values = [f"arc-{i:04d}".encode() for i in range(900)]
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("archived", partitions=PARTITIONS, replication_factor=3)
        with fab.producer() as producer:
            for i, value in enumerate(values):
                producer.send("archived", value, partition=i % PARTITIONS)
    table = tmp_path / "lake"
    spark_cluster.run(ARCHIVE, "--url", shared_cluster.url, "--checkpoint", str(tmp_path / "checkpoint"),
                      "--topic", "archived", "--table", str(table), "--group-id", "archiver")
    archived = DeltaTable(str(table)).to_pyarrow_table(columns=["value", "partition", "offset"])
    assert sorted(archived.column("value").to_pylist()) == values
    shown = fabric_cli("groups", "describe", "archiver", "--url", shared_cluster.url)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith("archiver ")]
    assert len(rows) == PARTITIONS, shown.stdout
    header = next(line.split() for line in shown.stdout.splitlines() if "LAG" in line.split())
    lag = header.index("LAG")
    assert [row[lag] for row in rows] == ["0"] * PARTITIONS, shown.stdout
    assert sum(int(row[header.index("CURRENT-OFFSET")]) for row in rows) == len(values)
