"""Repairing a partition's segment indexes: an index that is missing, torn, inconsistent with its frames or
stale (an entry naming a frame that is not there) would make lookups skip or misplace records, so it is
rebuilt from the frames under the partition lock; where the directory cannot be written, reads walk the frame
headers without it. Each repair is logged at WARNING."""
from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from fabric.storage.errors import UNWRITABLE
from fabric.storage.segment import Segment, StaleIndexError

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)


class IndexRepair:
    """Checks and rebuilds the indexes of `plog`'s segments (each segment object is checked once)."""

    def __init__(self, plog: Log) -> None:
        self.plog = plog

    def check(self, segs: list[Segment]) -> list[str]:
        """Rebuild any missing or broken index of `segs`, once per segment object. Returns the segments whose
        indexes were rebuilt."""
        rebuilt = []
        for seg in segs:
            if not seg._indexes_checked:
                try:
                    if seg.indexes_consistent():
                        seg._indexes_checked = True
                    elif self.repair(seg, "missing, torn or inconsistent", functools.partial(_inconsistent, seg)):
                        rebuilt.append(seg.path)
                except FileNotFoundError:
                    continue  # deleted by retention meanwhile; reads report that themselves
        return rebuilt

    def repair(self, seg: Segment, reason: str, still_broken: Callable[[], bool]) -> bool:
        """Rebuild `seg`'s indexes under the lock if `still_broken()` once it is held (a writer may have fixed
        them meanwhile); where the directory cannot be written, read without them. True if rebuilt."""
        plog = self.plog
        try:
            with plog.lock:
                if not still_broken():
                    seg._indexes_checked = True
                    return False
                seg.rebuild_indexes(plog.config["index.interval.bytes"])
            log.warning("%s: the indexes of segment %s were rebuilt from its frames (%s)", plog.name, seg.path,
                        reason)
            return True
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            seg.use_index, seg._indexes_checked = False, True
            log.warning("%s: the indexes of segment %s need a rebuild (%s) but cannot be written (%s): reading "
                        "without them, by walking the frame headers", plog.name, seg.path, reason, exc.strerror)
            return False

    def start(self, seg: Segment, offset: int, buf: pa.Buffer | None = None) -> tuple[int, int]:
        """Where to walk from in `seg` to reach `offset`: Segment.start, with a stale index repaired."""
        try:
            return seg.start(offset, buf)
        except StaleIndexError as exc:
            self.repair(seg, str(exc), functools.partial(_stale, seg, offset))
            return seg.start(offset, buf)


def _stale(seg: Segment, offset: int) -> bool:
    """True if the offset index entry for `offset` names a frame that is not there."""
    try:
        seg.start(offset)
    except StaleIndexError:
        return True
    return False


def _inconsistent(seg: Segment) -> bool:
    return not seg.indexes_consistent()
