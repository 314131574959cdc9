"""The fabric source on a real Spark standalone cluster (a master and two workers, `spark_cluster`) next to a real
fabric cluster of three data nodes in racks rack-1..rack-3 (`racked_cluster`): jobs run with spark-submit
(tests/jobs/read_topic.py), so read tasks run in executor JVMs and Python workers of their own, which know only what
reaches them through the plan, the confs and their environment.

- A job reads a replication-factor-3 topic whole, every record exactly once, in executors under the workers.
- The URL from the driver's environment alone ($FABRIC_URL of spark-submit) reaches the executors in the plan, and
  executors given a rack (spark.executorEnv.FABRIC_CLIENT_RACK) read from the in-sync replica in that rack: only
  that node serves fetches, also for the partitions other nodes lead. (Spark confs such as spark.fabric.url reach a
  Python data source only through fabric.spark.session.use_fabric_confs: tests/integration/test_source.py.)
- A read task whose leader dies retries within itself until the controller elected another (no Spark needed:
  read_range is what the task runs).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import fabric
from fabric.sources.fabric_source import read_plan, spark_schema
from fabric.sources.offsets import OffsetRange
from fabric.sources.options import parse_source_options
from fabric.sources.reading import read_range

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "read_topic.py"
TOPIC, PARTITIONS, RECORDS = "spread", 3, 600


@pytest.fixture(scope="module")
def spread(racked_cluster) -> list[list[Any]]:
    """Topic `spread` (3 partitions, replication factor 3) holding RECORDS records, acknowledged by every replica;
    the [partition, offset, value] of each, sorted."""
    with fabric.connect(racked_cluster.url) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "3"})
        with fab.producer() as producer:
            futures = [(f"v-{i}", producer.send(TOPIC, f"v-{i}".encode(), partition=i % PARTITIONS))
                       for i in range(RECORDS)]
            sent = [[f.result(60).partition, f.result(60).offset, value] for value, f in futures]
    return sorted(sent)


def read_job(spark_cluster, out: Path, *args: str, conf: dict[str, str] | None = None,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run tests/jobs/read_topic.py on the cluster to completion; what it wrote."""
    spark_cluster.run(JOB, str(out), TOPIC, *args, conf=conf, env=env)
    return json.loads(out.read_text())


def assert_read_once_in_executors(result: dict[str, Any], spread: list[list[Any]], spark_cluster) -> None:
    """The job ran on the standalone master, every task in an executor's directory under a worker's work
    directory, and together they read every record of the topic exactly once."""
    assert result["master"] == spark_cluster.master_url
    workers = {str(spark_cluster.root / f"worker{i}") for i in range(1, spark_cluster.workers + 1)}
    places = {task["cwd"] for task in result["tasks"]}
    assert places and all(str(Path(cwd).parents[1]) in workers for cwd in places), places
    assert len(result["tasks"]) == PARTITIONS  # a task per partition
    assert sorted(r for task in result["tasks"] for r in task["records"]) == spread


def test_a_job_reads_every_record_once_in_executors_of_the_cluster(spark_cluster, racked_cluster, spread,
                                                                    tmp_path) -> None:
    """The url option reaches the executors; while the application runs, its executors are JVMs apart from the
    driver (spark-submit), found by executor_pids, and one can be SIGKILLed (the application outlives it)."""
    out, release = tmp_path / "read.json", tmp_path / "release"
    reader = spark_cluster.supervise(JOB, str(out), TOPIC, "--url", racked_cluster.url, "--release", str(release))
    try:
        spark_cluster.wait(lambda: out.exists() or reader.ended(), "the job's result")
        assert out.exists(), spark_cluster.output(reader.job)
        result = json.loads(out.read_text())
        executors = spark_cluster.executor_pids(result["app_id"])
        assert executors and reader.job.pid not in executors
        assert executors == spark_cluster.executor_pids()  # no other application runs on this cluster
        killed = spark_cluster.kill_executor(app_id=result["app_id"])
        assert killed in executors and killed not in spark_cluster.executor_pids()
    finally:
        release.touch()
    spark_cluster.wait(reader.ended, "the job to end once released")
    assert reader.job.returncode == 0, spark_cluster.output(reader.job)
    assert_read_once_in_executors(result, spread, spark_cluster)


def test_executors_read_the_drivers_url_from_the_replica_in_their_rack(spark_cluster, racked_cluster, spread,
                                                                      replication, tmp_path) -> None:
    """What reaches executors: no url option, so the driver resolves $FABRIC_URL (set for spark-submit only) and
    the plan carries it to tasks whose executors have no FABRIC_URL (they would read ./fabric-data under their work
    directory otherwise); and KIP-392 from Spark: executors whose FABRIC_CLIENT_RACK is node k's rack read every
    partition from node k, the leader of some and a follower of the others, while the other nodes serve no reader
    at all."""
    nodes = racked_cluster.nodes
    with fabric.connect(racked_cluster.url) as fab:
        for p in range(PARTITIONS):  # a follower serves up to its own high watermark: let it know them all
            assert replication.wait_in_sync(fab, nodes, TOPIC, p) == sum(1 for r in spread if r[0] == p)
        leaders = [replication.state(fab, TOPIC, p).leader for p in range(PARTITIONS)]
    near = min(nodes, key=leaders.count)
    assert leaders.count(near) < PARTITIONS  # node `near` follows at least one partition
    before = {n: replication.fetched_bytes(node) for n, node in nodes.items()}
    result = read_job(spark_cluster, tmp_path / "read.json", env={"FABRIC_URL": racked_cluster.url},
                      conf={"spark.executorEnv.FABRIC_CLIENT_RACK": f"rack-{near}"})
    after = {n: replication.fetched_bytes(node) for n, node in nodes.items()}
    assert_read_once_in_executors(result, spread, spark_cluster)
    assert [task["env"] for task in result["tasks"]] == [{"FABRIC_URL": None, "FABRIC_CLIENT_RACK": f"rack-{near}"}
                                                         ] * PARTITIONS
    assert after[near] > before[near]
    assert {n: after[n] - before[n] for n in nodes if n != near} == {n: 0 for n in nodes if n != near}, leaders


def test_a_read_task_retries_through_its_leaders_death(node_cluster, replication, caplog) -> None:
    """A task planned while the leader lived finds it dead (SIGKILL): it refreshes the metadata and retries until
    the controller made another replica the leader (the node's session, 6 s, runs out), then reads the range whole
    instead of failing."""
    cluster = node_cluster()
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("moving", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer() as producer:
            futures = [producer.send("moving", f"m-{i}".encode()) for i in range(50)]
            assert [f.result(60).offset for f in futures] == list(range(50))
        assert replication.wait_in_sync(fab, cluster.nodes, "moving") == 50
        plan = read_plan(parse_source_options({"url": cluster.url, "subscribe": "moving"}, streaming=False),
                         spark_schema(None, False))
        dead = replication.state(fab, "moving").leader
        cluster.nodes[dead].kill()
        with caplog.at_level(logging.WARNING, logger="fabric.client.retry"):
            batches = list(read_range(plan, OffsetRange("moving", 0, 0, 50)))
        assert [v for b in batches for v in b.column("value").to_pylist()] == [f"m-{i}".encode() for i in range(50)]
        assert replication.state(fab, "moving").leader not in (dead, -1, None)
    assert any("retrying with fresh metadata" in r.getMessage() for r in caplog.records)
