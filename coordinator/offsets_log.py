"""The offsets topic kept in a local directory (`LocalOffsetsLog`): one Log per partition, shared by every process
that opens the directory (the processes of an embedded fabric, coordinator instances sharing a data directory).

A write takes the partition's lock (a flock), so a commit checked against a group's generation is never written
after a newer commit of the same partition, whichever process makes them. Appends carry the writer's election
epoch as their leader epoch (none for an embedded fabric), and an instance that becomes active stamps its epoch
on every partition: the Log then refuses appends of older epochs, a deposed instance's. The topic is compacted:
a pass runs in the background each time a partition rolls a segment. Migration from an earlier store runs once,
under a lock file, and a marker file records that it is done.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.config import TopicConfig
from fabric.common.errors import CoordinatorUnavailableError, InvalidLeaderEpochError, StorageError
from fabric.coordinator.commit_batch import Deferrals, Queued
from fabric.coordinator.offsets_records import (
    CONFIG,
    LEADER_KEY,
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    SCHEMA,
    SEGMENT_BYTES,
    batch,
)
from fabric.storage.batch_encoding import Encoded
from fabric.storage.log import Log

log = logging.getLogger(__name__)
MIGRATED = ".migrated"
PARTITION_COUNT = "partition-count"  # how many partitions the topic has (LocalOffsetsLog._partition_count)


@dataclass(frozen=True)
class OffsetsPart:
    """A group's offset commit as one more partition of a publish (a producer transaction's): `rows` go to
    partition `partition` of the offsets topic, whose `partitions` Logs `log` gives, so they become visible at
    the transaction's commit point with its records (and recovery rolls them forward or truncates them alike).
    `check()`, run under the partition's lock, refuses the write if this coordinator instance was deposed."""

    partition: int
    partitions: int
    log: Callable[[int], Log]
    rows: pa.RecordBatch
    check: Callable[[], None]


class LocalOffsetsLog:
    """The offsets topic's partitions in `directory` (subdirectories 0..N-1); `epoch` gives the election epoch to
    stamp on appends (None: none, an embedded or single-instance store). A publish may write a partition too
    (a producer transaction's offsets): `resolve_pending` says whether its transaction committed, so recovery
    rolls its frames forward or truncates them as a data partition's."""

    shared = True  # other processes append too: readers catch up from the logs before every answer

    def __init__(self, directory: str, epoch: Callable[[], int] | None = None, clock: Clock = SYSTEM_CLOCK,
                 segment_bytes: int = SEGMENT_BYTES, resolve_pending: Callable[[str], bool] | None = None) -> None:
        self.directory, self.clock, self._epoch = directory, clock, epoch
        os.makedirs(directory, exist_ok=True)
        self.partitions = self._partition_count()
        config = TopicConfig({**CONFIG, "segment.bytes": str(segment_bytes)})
        self._logs = [Log(os.path.join(directory, str(p)), SCHEMA, config, resolve_pending, clock=clock)
                      for p in range(self.partitions)]
        self._cleaning: set[int] = set()  # partitions a pass of this process is cleaning
        self._rolled: set[int] = set()  # of those, the ones that rolled meanwhile: another pass follows
        self._guard = threading.Condition()
        self._deferrals = Deferrals(f"{OFFSETS_TOPIC}-deferred")

    def _partition_count(self) -> int:
        """The count the topic was created with, which maps groups to partitions: what its PARTITION_COUNT file
        says. The first process to open the directory writes it, whole (a hard link of a file written aside, which
        fails where one is there already), before any partition directory, so processes opening it together agree
        (counting directories, one could count those another was still making, and send a group's commits to
        another partition than the others read). A directory of an earlier version, without the file, keeps the
        count of its partition directories."""
        path = os.path.join(self.directory, PARTITION_COUNT)
        if not os.path.exists(path):
            found = [int(n) for n in os.listdir(self.directory) if n.isdigit()]
            aside = f"{path}.{os.getpid()}-{threading.get_ident()}"
            with open(aside, "w") as f:
                f.write(f"{max(found) + 1 if found else OFFSETS_PARTITIONS}\n")
            try:
                os.link(aside, path)
            except FileExistsError:
                pass  # another process's count, written first
            finally:
                os.unlink(aside)
        with open(path) as f:
            text = f.read()
        if not text.strip().isdigit() or int(text) < 1:
            raise StorageError(f"the offsets topic's {path} holds {text[:40]!r}, not its partition count; write the "
                               "count of its partition directories (0..N-1) into it, one number")
        count = int(text)
        beyond = max((int(n) for n in os.listdir(self.directory) if n.isdigit()), default=-1)
        if beyond >= count:  # a count lowered by hand would map groups to other partitions: their offsets lost
            raise StorageError(f"the offsets topic's {path} says {count} partitions, but it has partition "
                               f"directories up to {beyond}; write the count of its partition directories "
                               f"({beyond + 1}) into it, one number")
        return count

    def log(self, partition: int) -> Log:
        """The Log of one partition (what a publish writes a transaction's offsets to)."""
        return self._logs[partition]

    def check_epoch(self, partition: int) -> None:
        """CoordinatorUnavailableError if a newer instance stamped its epoch on the partition (its lock held), as
        append refuses: a publish writes the offsets without an epoch of its own."""
        if self._epoch is None:
            return
        plog, epoch = self._logs[partition], self._epoch()
        plog.sync_tail()
        if plog.leader_epochs.latest_epoch > epoch:
            raise CoordinatorUnavailableError(
                f"this coordinator instance (epoch {epoch}) was deposed: a newer one stamped {OFFSETS_TOPIC}-"
                f"{partition}; nothing was written, retry on the active instance")

    def end_offset(self, partition: int) -> int:
        return self._logs[partition].end_offset

    def read(self, partition: int, start: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(offset, batch) of what the partition holds from `start` to its end now."""
        plog = self._logs[partition]
        end, position = plog.end_offset, start
        while position < end:
            for fetched in plog.fetch(max(position, plog.start_offset), 4 << 20, end):
                yield fetched.offset, fetched.batch
                position = fetched.offset + fetched.batch.num_rows

    def append(self, partition: int, rows: Encoded, validate: Callable[[], None],
               written: Callable[[int], None]) -> None:
        """`validate()`, then append `rows` and tell `written` their offset, all under the partition's flock;
        CoordinatorUnavailableError (nothing written) if a newer instance stamped its epoch."""
        plog = self._logs[partition]
        epoch = self._epoch() if self._epoch is not None else -1
        try:
            with plog.appending():
                validate()
                active = plog.active_base
                written(plog.append(rows, leader_epoch=epoch))
                rolled = active is None or plog.active_base != active  # (unknown: the first append of this process)
        except InvalidLeaderEpochError:
            raise CoordinatorUnavailableError(
                f"this coordinator instance (epoch {epoch}) was deposed: a newer one stamped {OFFSETS_TOPIC}-"
                f"{partition}; nothing was written, retry on the active instance") from None
        if rolled and len(plog.segments()) > 1:
            self._clean_soon(partition)

    def write_queued(self, partition: int, queued: list[Queued]) -> None:
        """Append the rows of the commits `queued` (coordinator.commit_batch) as one batch: now, or (on an event
        loop, where another holds the partition's lock) on a thread that waits for it (commit_batch.Deferrals)."""
        self._deferrals.write(partition, functools.partial(self.append, partition), queued)

    def take_leadership(self, epoch: int, partitions: Sequence[int]) -> None:
        """Stamp `epoch` on each of `partitions`: appends of older epochs to them are refused from here on."""
        for p in partitions:  # a record, so other processes see the log change and reload
            self._logs[p].append(batch([(LEADER_KEY, None)], self.clock.now_us()), leader_epoch=epoch)

    def demand(self) -> None:
        """Nothing is created on first need: the partitions' logs exist from the start."""

    def exists(self) -> bool:
        """Always: the partitions' logs exist from the start."""
        return True

    @contextlib.contextmanager
    def migrating(self, what: str = "offsets") -> Iterator[bool]:
        """Whether an earlier store's `what` (its offsets) are still to be moved here (under a lock file, so one
        process does it); once the block ends without an error, a marker file records that they were."""
        marker = os.path.join(self.directory, MIGRATED if what == "offsets" else f"{MIGRATED}-{what}")
        if os.path.exists(marker):
            yield False
            return
        fd = os.open(os.path.join(self.directory, ".migration-lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            pending = not os.path.exists(marker)
            yield pending
            if pending:
                for plog in self._logs:
                    plog.flush()
                with open(marker, "w") as f:
                    f.write(json.dumps({"migrated": True}))
                    f.flush()
                    os.fsync(f.fileno())
        finally:
            os.close(fd)

    # -- compaction ----------------------------------------------------------------------------------------
    def _clean_soon(self, partition: int) -> None:
        """Run a cleaner pass on the partition in the background, unless one is running: then another follows it
        (the segments rolled meanwhile may be past the pass's view, and no roll may come to clean them)."""
        with self._guard:
            if partition in self._cleaning:
                self._rolled.add(partition)
                return
            self._cleaning.add(partition)
        self._start_pass(partition)

    def _start_pass(self, partition: int) -> None:
        """Clean the partition (marked as being cleaned) on a thread of its own, again while it rolled meanwhile."""
        def run() -> None:
            while True:
                try:
                    report = self._logs[partition].clean()
                    if report.cleaned:
                        log.info("%s", report.describe())
                except Exception:  # noqa: BLE001 (a failed pass is retried at the next roll)
                    log.exception("compacting %s-%d failed; the next segment roll retries", OFFSETS_TOPIC, partition)
                if not self._done_cleaning(partition):
                    return
        threading.Thread(target=run, name=f"offsets-cleaner-{partition}", daemon=True).start()

    def _done_cleaning(self, partition: int) -> bool:
        """A pass ended: True if the partition rolled meanwhile (it stays marked: the caller passes again), else
        it is no longer marked."""
        with self._guard:
            if partition in self._rolled:
                self._rolled.discard(partition)
                return True
            self._cleaning.discard(partition)
            self._guard.notify_all()
            return False

    def compact(self) -> list[str]:
        """Compact every partition now (rolling the active segments); what each pass did. A background pass of this
        process on a partition is waited for, not reported as "another process is cleaning it"."""
        reports = []
        for partition, plog in enumerate(self._logs):
            with self._guard:
                if partition in self._cleaning:
                    log.debug("%s-%d: waiting for this process's background pass", OFFSETS_TOPIC, partition)
                while partition in self._cleaning:
                    self._guard.wait()
                self._cleaning.add(partition)
            try:
                reports.append(plog.clean(force=True).describe())
            finally:
                if self._done_cleaning(partition):
                    self._start_pass(partition)
        return reports

    def size_bytes(self) -> int:
        return sum(plog.size_bytes() for plog in self._logs)
