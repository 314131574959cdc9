"""Exactly-once of the fabric stream sink under SIGKILL: a real Spark process killed at random moments
(several times while publishing), restarted from its checkpoint, and a reader that never sees a partial batch.

The Spark process runs JOB, a script importing only the installed package (and pyspark)."""
from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fabric.client.partitioner import partitions_for_keys
from fabric.server.publish import DEBUG_PAUSE_ENV

FILES, PER_FILE, PARTITIONS, TOPIC = 24, 300, 2, "out"

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# argv: url, source, checkpoint. Stream the parquet files (one per micro-batch) into the output topic, then stop.
JOB = r"""
import sys
from pyspark.sql import SparkSession
url, source, checkpoint, topic = sys.argv[1:5]
spark = (SparkSession.builder.master("local[2]").appName("sink-eos")
         .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
query = (spark.readStream.schema("key binary, value binary").option("maxFilesPerTrigger", 1)
         .parquet(source).repartition(2)
         .writeStream.format("fabric").option("url", url).option("topic", topic)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination()
spark.stop()
"""


def _value(f: int, i: int) -> bytes:
    return f"{f:03d}:{i:05d}".encode()


def _write_input(source: str) -> dict[bytes, int]:
    """One parquet file per batch; returns the partition of each value (its key)."""
    os.makedirs(source)
    partition_of: dict[bytes, int] = {}
    for f in range(FILES):
        values = pa.array([_value(f, i) for i in range(PER_FILE)], pa.binary())
        pq.write_table(pa.table({"key": values, "value": values}), os.path.join(source, f"part-{f:03d}.parquet"))
        partition_of.update(zip(values.to_pylist(), partitions_for_keys(values, PARTITIONS).tolist(), strict=True))
    return partition_of


class Reader(threading.Thread):
    """Reads the output topic while the job runs, recording its polls in the history; whenever it has read
    everything visible, every (batch, partition) it saw must be complete: visible records are whole committed
    batches, once."""

    def __init__(self, fab, expected: dict[tuple[int, int], int], history) -> None:
        super().__init__(daemon=True)
        self.fab, self.expected, self.history = fab, expected, history
        self.seen: collections.Counter = collections.Counter()
        self.checks, self.errors = 0, []
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = self.fab.consumer(TOPIC, auto_offset_reset="earliest", enable_auto_commit=False)
        position = dict.fromkeys(range(PARTITIONS), 0)
        while not self.stop.is_set() or any(position[p] < self._end(p) for p in position):
            table = consumer.poll_batch(0.2, columns=["value", "partition", "offset"])
            columns = [table.column(c).to_pylist() for c in ("value", "partition", "offset")]
            self.history.poll("reader", zip(columns[1], columns[2], columns[0], strict=True), topic=TOPIC)
            for value, p, offset in zip(*columns, strict=True):
                self.seen[(int(value[:3]), p)] += 1
                position[p] = offset + 1
            if all(position[p] == self._end(p) for p in position):
                self.checks += 1
                partial = {k: (n, self.expected[k]) for k, n in self.seen.items() if n != self.expected[k]}
                if partial:
                    self.errors.append(partial)
        consumer.close()

    def _end(self, p: int) -> int:
        return self.fab.cluster.partition_state(TOPIC, p).end_offset


def _start(url: str, source: str, checkpoint: str, log, pause: float) -> subprocess.Popen:
    """The job in a process (group) of its own, run from the test's directory, outside the checkout."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, **{DEBUG_PAUSE_ENV: str(pause)})
    return subprocess.Popen([sys.executable, "-c", JOB, url, source, checkpoint, TOPIC],
                            cwd=os.path.dirname(checkpoint), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for(condition, proc: subprocess.Popen, timeout: float) -> bool:
    """Poll `condition` until it holds (True) or the process ends or the deadline passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_killed_and_restarted_query_writes_every_record_once(fab, fabric_url, fabric_dir, tmp_path, history,
                                                             storage):
    """The history: the job sends every input value (unknown outcome while runs are killed, acknowledged once
    the last run succeeded), the reader's polls, and a final read of each partition's log."""
    fab.create_topic(TOPIC, partitions=PARTITIONS)
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "chk")
    partition_of = _write_input(source)
    job = history.recorder("job")
    for value, p in partition_of.items():
        job.invoke(value, p, topic=TOPIC)
    reader = Reader(fab, collections.Counter((int(v[:3]), p) for v, p in partition_of.items()),
                    history.recorder("test"))
    reader.start()
    rng = random.Random(7)
    visible = lambda: sum(reader._end(p) for p in range(PARTITIONS))
    markers = [os.path.join(fabric_dir, TOPIC, str(p), "pending-publish") for p in range(PARTITIONS)]
    publishing = lambda: any(os.path.exists(m) for m in markers)
    # (pause inside publish, when to kill): while a publish is under way, or at a random moment after progress.
    rounds = [(0.0, "progress"), (0.4, "publish"), (0.4, "publish"), (0.4, "publish")]
    killed = collections.Counter()
    with open(tmp_path / "job.log", "ab") as log:
        for pause, moment in rounds:
            before = visible()
            proc = _start(fabric_url, source, checkpoint, log, pause)
            if moment == "publish":
                hit = _wait_for(publishing, proc, 120)
                time.sleep(rng.uniform(0, 2 * pause))  # before, between or after the txn commit
            else:
                hit = _wait_for(lambda before=before: visible() > before, proc, 120)
                time.sleep(rng.uniform(0, 1.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                killed[moment] += hit
            proc.wait()
            assert hit or proc.returncode == 0, f"the job failed early; see {tmp_path / 'job.log'}"
        proc = _start(fabric_url, source, checkpoint, log, 0.0)
        assert proc.wait(timeout=180) == 0, f"the final run failed; see {tmp_path / 'job.log'}"
    reader.stop.set()
    reader.join(timeout=60)
    assert killed["publish"] >= 2 and killed["progress"] >= 1, f"too few kills landed: {killed}"
    assert not reader.errors, f"a reader saw partial or duplicated batches: {reader.errors[:3]}"
    assert reader.checks > 1
    for value, p in partition_of.items():
        job.ok(value, p, None, topic=TOPIC)  # the last run succeeded: everything it was given is acknowledged
    final = history.recorder("test-final")
    for p in range(PARTITIONS):
        log = fab.cluster.log(TOPIC, p)
        final.read(p, [(o, v) for o, v, _ in storage.read_all(log)], log.start_offset, reader._end(p), topic=TOPIC)
    # every value once, in the log and in the reader's polls (in order, none twice, none invented), densely
    result = history.check(dense=True).assert_valid()
    assert result.polled == visible() == FILES * PER_FILE
    assert not os.listdir(os.path.join(fabric_dir, "__fabric", "staging"))
