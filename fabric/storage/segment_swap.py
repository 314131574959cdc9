"""Replacing a run of segments with one cleaned copy, crash-safe at every step (Kafka's .cleaned/.swap files).

The cleaner writes the copy of segments [B, E) as `<B>.arrows.cleaned` without the partition lock (closed
segments do not change). Then, under the lock:
  1. the swap marker (`cleaner-swap`, JSON: the base B, the end E, the source bases) is written and fsynced;
  2. B's index files are removed (they describe the old B);
  3. `<B>.arrows.cleaned` is renamed over `<B>.arrows` (atomic): from here the copy is the segment B;
  4. the other source segments, all inside [B, E) and now covered by B, are deleted;
  5. B's indexes are written, the directory fsynced and the marker removed.
A process killed anywhere leaves the marker; recovery (under the lock, before anything else) finishes the swap
if the copy was renamed (the `.cleaned` file is gone) and otherwise abandons it (the sources are all still there,
B's indexes are rebuilt from its frames). Between steps 3 and 4 the copy overlaps the sources it replaces;
their records are the same or removed ones, and readers go by offset, so a reader in between sees no change.
"""
from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from fabric.storage import durable, txn_index
from fabric.storage.index_builder import IndexBuilder
from fabric.storage.mapcache import MAPS
from fabric.storage.segment import DATA_SUFFIX, Segment, segment_name

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)

MARKER = "cleaner-swap"
CLEANED_SUFFIX = ".cleaned"
CrashHook = Callable[[str], None]  # called with each step's name (tests kill the process there)


def _no_crash(step: str) -> None:
    """The default step hook: nothing."""


@dataclass(frozen=True)
class Swap:
    """Segments `sources` (bases, the first `base`) replaced by one copy covering offsets [base, end)."""

    base: int
    end: int
    sources: tuple[int, ...]

    def cleaned_path(self, directory: str) -> str:
        return os.path.join(directory, segment_name(self.base) + DATA_SUFFIX + CLEANED_SUFFIX)


def remove_leftovers(directory: str) -> list[str]:
    """Delete cleaned copies no swap will use (a cleaner died writing them; the caller holds the cleaner lock
    and no swap marker is pending). Returns their paths."""
    found = glob.glob(os.path.join(glob.escape(directory), "*" + DATA_SUFFIX + CLEANED_SUFFIX))
    for path in found:
        _unlink(path)
    return found


def swap_in(plog: Log, swap: Swap, builder: IndexBuilder, crash: CrashHook = _no_crash) -> Segment:
    """Steps 1 to 5 above (partition lock held): the copy, indexed by `builder`, becomes segment `swap.base`."""
    directory = plog.directory
    _write_marker(directory, swap)
    crash("marker")
    seg = Segment(directory, swap.base, plog.schema)
    for index in (seg.index, seg.timeindex):
        _unlink(index.path)
        MAPS.forget(index.path)
    txn_index.remove(seg)
    crash("indexes")
    os.replace(swap.cleaned_path(directory), seg.path)
    MAPS.forget(seg.path)
    crash("renamed")
    _finish(plog, swap, lambda copy: builder.write(copy.index, copy.timeindex), crash)
    return seg


def complete(plog: Log) -> str | None:
    """Finish or abandon a swap a dead process left (lock held, before recovery reads the segments); what was
    done, for the recovery report (None if there was no swap pending)."""
    directory = plog.directory
    path = os.path.join(directory, MARKER)
    if not os.path.exists(path):
        return None
    swap = _read_marker(path)
    if swap is None:
        _unlink(path)
        return "a cleaner swap marker that cannot be read was removed (it was torn before the swap began)"
    if os.path.exists(swap.cleaned_path(directory)):
        _unlink(swap.cleaned_path(directory))
        _unlink(path)
        return (f"a compaction of segments {list(swap.sources)} that died before its swap was abandoned (the "
                "segments are unchanged)")
    _finish(plog, swap, lambda copy: copy.rebuild_indexes(plog.config["index.interval.bytes"]), _no_crash)
    return (f"a compaction swap of segments {list(swap.sources)} into {segment_name(swap.base)} that died part-way "
            "was finished")


def _finish(plog: Log, swap: Swap, write_indexes: Callable[[Segment], None], crash: CrashHook) -> None:
    """Steps 4 and 5: delete the replaced sources, index the copy, fsync, drop the marker."""
    directory = plog.directory
    for base in swap.sources:
        if base != swap.base:
            Segment(directory, base, plog.schema).delete()
            crash("deleted")
    write_indexes(Segment(directory, swap.base, plog.schema))
    durable.fsync_dir(directory)
    _unlink(os.path.join(directory, MARKER))
    durable.fsync_dir(directory)
    plog.forget_segments(swap.sources)


def _write_marker(directory: str, swap: Swap) -> None:
    data = json.dumps({"version": 1, "base": swap.base, "end": swap.end, "sources": list(swap.sources)})
    durable.replace_file(os.path.join(directory, MARKER), data.encode("utf-8"))


def _read_marker(path: str) -> Swap | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        swap = Swap(int(data["base"]), int(data["end"]), tuple(int(b) for b in data["sources"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not swap.sources or swap.sources[0] != swap.base or any(not swap.base <= b < swap.end for b in swap.sources):
        return None
    return swap


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
