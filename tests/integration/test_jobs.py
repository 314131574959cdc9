"""The spark-submit jobs, each run through a real `spark-submit` from a directory outside the checkout, and
the demo end to end. The demo's test runs it twice, so it is the one that restarts transform and archive from
their checkpoints (each run's queries take only the new events, once)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import fabric
from fabric.common.waiting import wait_for
from fabric.spark import jar

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")
pytestmark = [pytest.mark.spark, pytest.mark.slow]
SUBMIT_ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
              "PYSPARK_DRIVER_PYTHON": sys.executable}


def submit_command(job: str, *args: str, spark_args: tuple[str, ...] = ()) -> list[str]:
    """spark-submit (local[2]) of jobs/<job>.py with `args`, `spark_args` before the job."""
    return [SPARK_SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2", *spark_args, os.path.join(REPO, "jobs", f"{job}.py"), *args]


def spark_submit(job: str, *args: str, cwd: str) -> subprocess.CompletedProcess:
    """Run jobs/<job>.py with spark-submit (local[2]); fail the test with its output if it fails."""
    done = subprocess.run(submit_command(job, *args), cwd=cwd, env=SUBMIT_ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{job} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def batch_lines(output: str, query: str) -> list[tuple[int, int]]:
    """The (batch id, rows) of each line run() printed for a micro-batch of `query`; every such line has the
    batch's duration too."""
    lines = [line for line in output.splitlines() if line.startswith(f"[{query}] batch ")]
    parsed = [re.fullmatch(rf"\[{query}\] batch (\d+): ([\d,]+) rows in \d+\.\d\d s", line) for line in lines]
    assert all(parsed), f"malformed batch lines: {lines}"
    return [(int(m[1]), int(m[2].replace(",", ""))) for m in parsed if m]


@pytest.fixture
def clicks(fab, demo_job):
    """A typed `clicks` topic with 3,000 events over 3 partitions (jobs/demo.py's schema and sample events)."""
    fab.create_topic("clicks", partitions=3, schema=demo_job.CLICKS)
    events = demo_job.sample_events(3000, seed=1)
    with fab.producer() as producer:
        producer.send_batch("clicks", events)
    return events


@pytest.mark.parametrize("job", ["transform", "archive", "windowed_counts", "realtime"])
def test_every_job_explains_itself(job, tmp_path):
    """A job parses its arguments before it starts Spark, so its --help is the same under spark-submit (which runs
    each job below) and without it: no JVM is started for it."""
    done = subprocess.run([sys.executable, os.path.join(REPO, "jobs", f"{job}.py"), "--help"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--url" in done.stdout and "--checkpoint" in done.stdout


def test_transform_job_filters_exactly_once(fab, fabric_url, clicks, demo_job, tmp_path):
    fab.create_topic("big", partitions=2, schema=demo_job.CLICKS)
    args = ["--url", fabric_url, "--checkpoint", str(tmp_path / "ckpt"), "--input", "clicks", "--output", "big",
            "--group-id", "transform", "--max-offsets-per-trigger", "1000",
            "--sql", "SELECT key, user, page, amount FROM input WHERE amount > 50"]
    first = batch_lines(spark_submit("transform", *args, cwd=str(tmp_path)).stdout, "transform")
    assert [batch for batch, _ in first] == list(range(len(first))) and len(first) >= 3  # each batch once
    assert sum(rows for _, rows in first) == clicks.num_rows
    expected = clicks.filter(pc.greater(clicks.column("amount"), 50.0))
    got = fab.consumer("big", auto_offset_reset="earliest").poll_batch(5, columns=["user", "amount"])
    assert got.num_rows == expected.num_rows > 0
    key = lambda t: sorted(zip(t.column("user").to_pylist(), t.column("amount").to_pylist(), strict=True))
    assert key(got) == key(expected)
    assert sum(row.lag for row in fab.describe_group("transform")) == 0


def test_archive_job_writes_a_delta_table(fab, fabric_url, clicks, tmp_path):
    table = str(tmp_path / "delta")
    args = ["--url", fabric_url, "--checkpoint", str(tmp_path / "ckpt"), "--topic", "clicks", "--table", table]
    spark_submit("archive", *args, cwd=str(tmp_path))
    archived = DeltaTable(table).to_pyarrow_table(columns=["partition", "offset", "user"])
    assert archived.num_rows == clicks.num_rows
    partitions, offsets = archived.column("partition").to_pylist(), archived.column("offset").to_pylist()
    assert len(set(zip(partitions, offsets, strict=True))) == clicks.num_rows


def test_windowed_counts_job_emits_final_windows(fab, fabric_url, tmp_path):
    fab.create_topic("views", partitions=2)
    minute = 60_000
    start = (time.time_ns() // 1_000_000 // minute - 10) * minute  # 10 whole minutes ago
    with fab.producer() as producer:
        for i in range(60):  # 3 windows x 2 pages x 10 events
            producer.send("views", b"v", key=f"page-{i % 2}", timestamp=start + (i // 20) * minute + i)
        producer.send("views", b"v", key="page-0", timestamp=start + 9 * minute)  # moves the watermark on
    spark_submit("windowed_counts", "--url", fabric_url, "--checkpoint", str(tmp_path / "ckpt"),
                 "--input", "views", "--output", "view-counts", "--window", "1 minute",
                 "--watermark", "30 seconds", cwd=str(tmp_path))
    rows = fab.consumer("view-counts", auto_offset_reset="earliest").poll_batch(
        5, columns=["window_start", "group", "events"]).to_pylist()
    final = sorted((r["window_start"].timestamp() * 1000 - start, r["group"], r["events"]) for r in rows)
    assert final == [(w * minute, f"page-{p}", 10) for w in range(3) for p in range(2)]


@pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")
def test_realtime_job_writes_each_record_on_as_it_comes(shared_cluster, tmp_path):
    """jobs/realtime.py under spark-submit, with the JVM reader's jar: records written before it started and while
    it runs reach the output topic transformed, each partition's in order (at least once: nothing is killed here,
    so once). The job runs until it is stopped, as a real-time query does."""
    with fabric.connect(shared_cluster.url) as fab:
        for topic in ("rt-in", "rt-out"):
            fab.create_topic(topic, partitions=2, replication_factor=3)
        with fab.producer() as producer:
            for i in range(50):
                producer.send("rt-in", b"r-%d" % i, partition=i % 2)
        cmd = submit_command("realtime", "--url", shared_cluster.url, "--checkpoint", str(tmp_path / "checkpoint"),
                             "--input", "rt-in", "--output", "rt-out", "--batch-duration", "5 seconds", "--sql",
                             "SELECT upper(CAST(value AS STRING)) AS value, partition FROM input",
                             spark_args=("--jars", str(jar.path())))
        job = subprocess.Popen(cmd, cwd=str(tmp_path), env=SUBMIT_ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
        received: list = []
        consumer = fab.consumer(auto_offset_reset="earliest")
        consumer.assign([("rt-out", 0), ("rt-out", 1)])

        def arrived(count: int) -> bool:
            assert job.poll() is None, f"the job ended:\n{job.communicate()[0][-5000:]}"
            received.extend(consumer.poll_batch(0.5, columns=["partition", "value"]).to_pylist())
            return len(received) >= count
        try:
            wait_for(lambda: arrived(50), timeout=240, what="the records written before the job")
            with fab.producer() as producer:
                for i in range(50, 100):
                    producer.send("rt-in", b"r-%d" % i, partition=i % 2)
            wait_for(lambda: arrived(100), timeout=240, what="the records written while it runs")
        finally:
            consumer.close()
            os.killpg(job.pid, signal.SIGTERM)
            job.communicate(timeout=120)
    for partition in (0, 1):
        assert [r["value"] for r in received if r["partition"] == partition] == \
            [b"R-%d" % i for i in range(partition, 100, 2)]


def test_demo_runs_end_to_end_twice(tmp_path):
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    cmd = [sys.executable, os.path.join(REPO, "jobs", "demo.py"), "--events", "5000", "--url",
           str(tmp_path / "fabric-data"), "--work", str(tmp_path / "demo")]
    for run in (1, 2):
        done = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"clicks: {5000 * run:,} records" in done.stdout
        for query in ("transform", "archive"):  # one batch of the new events per run, printed once
            assert batch_lines(done.stdout, query) == [(run - 1, 5000)]
        assert done.stdout.splitlines()[-1].startswith("exactly once: yes. Proved:")
    with fabric.connect(str(tmp_path / "fabric-data")) as fab:
        assert sum(row.lag for row in fab.describe_group("demo-archive")) == 0


def test_demo_cluster_runs_end_to_end_through_a_node_killed(tmp_path):
    """`make demo-cluster`, as the Makefile runs it: the demo on a local 3-node cluster, the leader of big-clicks
    partition 0 SIGKILLed while the queries run; it ends by proving that every count agrees (it also makes the
    new cluster's first group requests, from the JVM reader and the Python client)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, os.path.join(REPO, "jobs", "demo_cluster.py"), "--data",
                           str(tmp_path / "demo")], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("Proved: data node ")
