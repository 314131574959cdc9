"""Exactly-once of the fabric stream sink under SIGKILL: a real Spark process killed at random moments
(several times while publishing), restarted from its checkpoint, and a reader that never sees a partial batch.

The Spark process runs JOB, a script importing only the installed package (and pyspark). Waits follow the job's
progress (anything it writes under the test's directory: its log, its checkpoint, the output topic), however slow
a loaded machine makes it, and fail only once it has written nothing for STALL_S; the reader thread and the job
stop with the test, also when it fails."""
from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fabric.client.partitioner import partitions_for_keys
from fabric.common.waiting import files_progress, wait_progressing
from fabric.server.publish import DEBUG_PAUSE_ENV

FILES, PER_FILE, PARTITIONS, TOPIC = 24, 300, 2, "out"
STALL_S = 240.0  # a Spark job that wrote nothing (log, checkpoint, output) for this long is stuck, not slow
HANG_GUARD_S = 2400  # pytest-timeout's, above the suite's 900 s: five Spark runs may take longer on a loaded machine

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
    batches, once. `stop` ends it once it has read everything visible, `halt` at once; an exception it raised
    is in `failure`."""

    def __init__(self, fab, expected: dict[tuple[int, int], int], history) -> None:
        super().__init__(daemon=True)
        self.fab, self.expected, self.history = fab, expected, history
        self.seen: collections.Counter = collections.Counter()
        self.checks, self.errors = 0, []
        self.stop, self.halt = threading.Event(), threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.failure = exc

    def _read(self) -> None:
        consumer = self.fab.consumer(TOPIC, auto_offset_reset="earliest", enable_auto_commit=False)
        position = dict.fromkeys(range(PARTITIONS), 0)
        while not self.halt.is_set() and (not self.stop.is_set() or any(position[p] < self._end(p)
                                                                           for p in position)):
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
        return _end(self.fab, p)


def _end(fab, p: int) -> int:
    return fab.cluster.partition_state(TOPIC, p).end_offset


def _visible(fab) -> int:
    """Records in the output topic, all partitions."""
    return sum(_end(fab, p) for p in range(PARTITIONS))


def _start(url: str, source: str, checkpoint: str, log, pause: float) -> subprocess.Popen:
    """The job in a process (group) of its own, run from the test's directory, outside the checkout."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, **{DEBUG_PAUSE_ENV: str(pause)})
    return subprocess.Popen([sys.executable, "-c", JOB, url, source, checkpoint, TOPIC],
                            cwd=os.path.dirname(checkpoint), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@contextlib.contextmanager
def jobs() -> Iterator[list[subprocess.Popen]]:
    """A list for the job processes the block starts; any still running when it ends is SIGKILLed with its
    process group and reaped."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _until(condition: Callable[[], Any], proc: subprocess.Popen, progress: Callable[[], Any], what: str) -> bool:
    """Poll `condition` until it holds (True) or the job ends (False), as long as the job makes progress."""
    return wait_progressing(lambda: "hit" if condition() else ("ended" if proc.poll() is not None else None),
                            progress, STALL_S, what, interval=0.02) == "hit"


@pytest.mark.timeout(HANG_GUARD_S)
def test_killed_and_restarted_query_writes_every_record_once(fab, fabric_url, fabric_dir, tmp_path, history,
                                                             storage, running):
    """The history: the job sends every input value (unknown outcome while runs are killed, acknowledged once
    the last run succeeded), the reader's polls, and a final read of each partition's log."""
    fab.create_topic(TOPIC, partitions=PARTITIONS)
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "chk")
    partition_of = _write_input(source)
    job = history.recorder("job")
    for value, p in partition_of.items():
        job.invoke(value, p, topic=TOPIC)
    expected = collections.Counter((int(v[:3]), p) for v, p in partition_of.items())
    with running(Reader(fab, expected, history.recorder("test"))) as reader, jobs() as started:
        progress = lambda: files_progress(tmp_path)  # the job's log and checkpoint, the output topic's segments
        markers = [os.path.join(fabric_dir, TOPIC, str(p), "pending-publish") for p in range(PARTITIONS)]
        publishing = lambda: any(os.path.exists(m) for m in markers)
        _run_killed_and_restarted(fabric_url, source, checkpoint, tmp_path, started, lambda: _visible(fab),
                                  publishing, progress)
        reader.stop.set()
        wait_progressing(lambda: not reader.is_alive(), lambda: sum(reader.seen.values()), STALL_S,
                         "the reader to read everything visible")
        assert reader.failure is None, reader.failure
        assert not reader.errors, f"a reader saw partial or duplicated batches: {reader.errors[:3]}"
        assert reader.checks > 1
    for value, p in partition_of.items():
        job.ok(value, p, None, topic=TOPIC)  # the last run succeeded: everything it was given is acknowledged
    final = history.recorder("test-final")
    for p in range(PARTITIONS):
        log = fab.cluster.log(TOPIC, p)
        final.read(p, [(o, v) for o, v, _ in storage.read_all(log)], log.start_offset, _end(fab, p), topic=TOPIC)
    # every value once, in the log and in the reader's polls (in order, none twice, none invented), densely
    result = history.check(dense=True).assert_valid()
    assert result.polled == _visible(fab) == FILES * PER_FILE
    assert not os.listdir(os.path.join(fabric_dir, "__fabric", "staging"))


def _run_killed_and_restarted(url: str, source: str, checkpoint: str, tmp_path, started: list[subprocess.Popen],
                              visible: Callable[[], int], publishing: Callable[[], bool],
                              progress: Callable[[], Any]) -> None:
    """Start the job and SIGKILL it at each round's moment (while a publish is under way, or at a random moment
    after progress), then run it to the end from its checkpoint; the job's output goes to job.log."""
    rng = random.Random(7)
    # (pause inside publish, when to kill)
    rounds = [(0.0, "progress"), (0.4, "publish"), (0.4, "publish"), (0.4, "publish")]
    killed = collections.Counter()
    with open(tmp_path / "job.log", "ab") as log:
        for pause, moment in rounds:
            before = visible()
            proc = _start(url, source, checkpoint, log, pause)
            started.append(proc)
            if moment == "publish":
                hit = _until(publishing, proc, progress, "the job to publish a batch")
                time.sleep(rng.uniform(0, 2 * pause))  # before, between or after the txn commit
            else:
                hit = _until(lambda before=before: visible() > before, proc, progress, "the job's first output")
                time.sleep(rng.uniform(0, 1.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                killed[moment] += hit
            proc.wait()
            assert hit or proc.returncode == 0, f"the job failed early; see {tmp_path / 'job.log'}"
        proc = _start(url, source, checkpoint, log, 0.0)
        started.append(proc)
        wait_progressing(lambda: proc.poll() is not None, progress, STALL_S, "the final run to finish")
        assert proc.returncode == 0, f"the final run failed; see {tmp_path / 'job.log'}"
    assert killed["publish"] >= 2 and killed["progress"] >= 1, f"too few kills landed: {killed}"
