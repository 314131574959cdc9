"""A partition's leader-epoch cache (Kafka's LeaderEpochFileCache, KIP-101 and KIP-279): the offset at which
each leader epoch's records start, kept in the partition's leader-epoch-checkpoint file.

A leader adds its epoch before its first frame of that epoch is written; a follower adds the epochs of the
frames it copies. OffsetsForLeaderEpoch is answered from it (end_offset_for), and a follower truncates its log
to that answer, so the logs of a partition's replicas never diverge.
"""
from __future__ import annotations

import bisect
import logging
import os
from typing import Callable, Iterable

from fabric.common.errors import InvalidLeaderEpochError
from fabric.common.types import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset
from fabric.storage import epoch_checkpoint
from fabric.storage.epoch_checkpoint import CHECKPOINT, CorruptCheckpointError, EpochEntry
from fabric.storage.frame import FrameHeader

__all__ = ["CHECKPOINT", "EpochEntry", "LeaderEpochCache", "entries_from_headers"]

log = logging.getLogger(__name__)


def entries_from_headers(headers: Iterable[FrameHeader]) -> list[EpochEntry]:
    """The entries a log's frame headers (in offset order) imply: each epoch starts at the first frame stamped
    with it. Frames without an epoch (-1), or with an epoch below one seen before, add nothing."""
    entries: list[EpochEntry] = []
    for header in headers:
        if header.leader_epoch >= 0 and (not entries or header.leader_epoch > entries[-1].epoch):
            if entries and entries[-1].start_offset == header.base_offset:
                entries.pop()  # that epoch's frames held no records
            entries.append(EpochEntry(header.leader_epoch, header.base_offset))
    return entries


class LeaderEpochCache:
    """The epochs of partition `partition` (named in messages), mirrored in `directory`'s checkpoint file.

    Invariants: epochs are >= 0 and strictly increase, and so do their start offsets (assign refuses what would
    break this, and the file is checked again when written); once a method returns, the file holds exactly the
    entries in memory. The owner (the Log) calls every method that changes it with the partition lock held,
    and keeps it within the log: no entry starts at or past the log end (truncate_from_end), none before the
    log start (truncate_from_start).
    """

    def __init__(self, directory: str, partition: str, entries: list[EpochEntry] | None = None) -> None:
        self.path = os.path.join(directory, CHECKPOINT)
        self.partition = partition
        self._entries: list[EpochEntry] = list(entries or [])

    @classmethod
    def load(cls, directory: str, partition: str, last_epoch: int,
             headers: Callable[[], Iterable[FrameHeader]]) -> LeaderEpochCache:
        """The cache from `directory`'s checkpoint file. `last_epoch` is the epoch of the log's last frame: if the
        file is damaged, or missing or behind the log (its latest epoch below `last_epoch`), the cache is rebuilt
        from the log's frame `headers()` and the file rewritten (logged at WARNING). A missing file with no
        epoch in the log (an embedded log) stays missing."""
        path = os.path.join(directory, CHECKPOINT)
        try:
            entries = epoch_checkpoint.read(path)
        except CorruptCheckpointError as exc:
            return cls._rebuilt(directory, partition, headers, str(exc))
        cache = cls(directory, partition, entries)
        if entries is None and last_epoch >= 0:
            return cls._rebuilt(directory, partition, headers, f"leader-epoch checkpoint {path} is missing")
        if last_epoch > cache.latest_epoch:
            return cls._rebuilt(directory, partition, headers, f"leader-epoch checkpoint {path} is behind the log: "
                                f"its latest epoch is {cache.latest_epoch}, the last frame's is {last_epoch}")
        return cache

    @classmethod
    def _rebuilt(cls, directory: str, partition: str, headers: Callable[[], Iterable[FrameHeader]],
                 problem: str) -> LeaderEpochCache:
        cache = cls(directory, partition)
        cache._save(entries_from_headers(headers()))
        log.warning("%s: %s; rebuilt from the frame headers of the log: %s", partition, problem,
                    ", ".join(f"epoch {e.epoch} from offset {e.start_offset}" for e in cache.entries) or "no epochs")
        return cache

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch known (UNDEFINED_EPOCH, -1, if none)."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (written to the file before it returns); True if that
        changed the cache. The latest epoch again from a later offset changes nothing; a higher epoch from the
        latest one's start offset replaces it (that epoch wrote no records). InvalidLeaderEpochError for a
        negative value, an epoch below the latest, or a start offset below the latest epoch's."""
        latest = self._entries[-1] if self._entries else None
        where = f"partition {self.partition}: leader epoch {epoch} from offset {start_offset}"
        if epoch < 0 or start_offset < 0:
            raise InvalidLeaderEpochError(f"{where}: epochs and offsets are never negative")
        entries = self._entries
        if latest is not None:
            if epoch < latest.epoch:
                raise InvalidLeaderEpochError(f"{where} is refused: the latest epoch is {latest.epoch} (from offset "
                                              f"{latest.start_offset}) and epochs only increase")
            if start_offset < latest.start_offset:
                raise InvalidLeaderEpochError(f"{where} is refused: the latest epoch {latest.epoch} starts at offset "
                                              f"{latest.start_offset} and start offsets only increase")
            if epoch == latest.epoch:
                return False
            if start_offset == latest.start_offset:
                log.info("%s replaces epoch %d, which wrote no records", where, latest.epoch)
                entries = entries[:-1]
        self._save(entries + [EpochEntry(epoch, start_offset)])
        return True

    def end_offset_for(self, epoch: int, log_end: int) -> EpochEndOffset:
        """The OffsetsForLeaderEpoch answer for a follower whose latest epoch is `epoch`, this log ending at
        `log_end`: for this log's latest epoch, or a later one (as docs/replication.md has the leader answer;
        with no epoch known, the latest is UNDEFINED), (latest epoch, log_end); for an earlier epoch, the largest
        epoch known that is at most `epoch` and the start offset of the next higher one; for an epoch below every
        epoch known, `epoch` and the first known epoch's start offset (as Kafka answers: the records before it
        are gone from this log). (UNDEFINED, UNDEFINED) if `epoch` is undefined (a follower without epochs)."""
        if epoch < 0:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if epoch >= self.latest_epoch:
            return EpochEndOffset(self.latest_epoch, log_end)
        higher = bisect.bisect_right([e.epoch for e in self._entries], epoch)
        floor = self._entries[higher - 1].epoch if higher else epoch
        return EpochEndOffset(floor, self._entries[higher].start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs starting at or past `end_offset` (the log was cut back to it)."""
        keep = [e for e in self._entries if e.start_offset < end_offset]
        if len(keep) != len(self._entries):
            log.info("%s: leader epochs from offset %d on forgotten: %s", self.partition, end_offset,
                     ", ".join(str(e.epoch) for e in self._entries[len(keep):]))
            self._save(keep)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the epochs wholly before `start_offset` (the log start moved up to it); the epoch holding it now
        starts there."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if len(before) > 1 or (before and before[-1].start_offset < start_offset):
            self._save([EpochEntry(before[-1].epoch, start_offset)] + self._entries[len(before):])

    def _save(self, entries: list[EpochEntry]) -> None:
        epoch_checkpoint.write(self.path, entries)
        self._entries = entries
