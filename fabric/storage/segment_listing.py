"""The base offsets of a partition directory's segments, listed again only when the directory's names changed.

Every request that reads a partition asks which segments it has (the log start, the range to read), and any
process may create or delete segments (the `file://` fabric is shared by processes). Listing the directory costs
five system calls and a parse of every name; a `stat` of the directory costs one. A name added, removed or
renamed in a directory moves its modification time, so while that time is the one seen at the last listing, the
listing still holds. Filesystems stamp that time from a coarse clock, so two changes close together can leave the
same time: a listing made too soon after the directory's last change for its time to tell is not kept (git's
"racy" index entries have the same rule), and the next call lists again. How soon is the filesystem's stamp
granularity: a clock tick (FINE_RACY_NS) where the time has a fraction of a second (ext4, xfs, btrfs, tmpfs), else
whole seconds (RACY_NS: ext3, FAT). Within that window every read lists the directory (6 ms over 5,000 segments),
so it is kept as short as the filesystem allows. (The directory is on a local filesystem, as a `file://` fabric's
is: a network filesystem's cached attributes could hide another host's change.)
"""
from __future__ import annotations

import os
import time

from fabric.storage.segment import DATA_SUFFIX

RACY_NS = 1_000_000_000  # a time without a fraction of a second: the filesystem may stamp whole seconds only
FINE_RACY_NS = 50_000_000  # a time with one: from the kernel's coarse clock, a tick (<= 10 ms) behind; five ticks


def racy_ns(mtime_ns: int) -> int:
    """How long after a change stamped `mtime_ns` a listing is too soon for the directory's time to tell."""
    return FINE_RACY_NS if mtime_ns % 1_000_000_000 else RACY_NS


class SegmentListing:
    """The segment base offsets in `directory`, oldest first, as of the call (`bases`)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._kept: tuple[tuple[int, int], tuple[int, ...]] | None = None  # ((inode, mtime ns), bases)

    def bases(self) -> tuple[int, ...]:
        """The base offsets of the segment files there now (FileNotFoundError if the directory is gone)."""
        st = os.stat(self.directory)
        key = (st.st_ino, st.st_mtime_ns)
        kept = self._kept
        if kept is not None and kept[0] == key:
            return kept[1]
        listed_ns = time.time_ns()  # (before the listing: a change after it moves the time past this, less a tick)
        bases = tuple(sorted(int(name[:-len(DATA_SUFFIX)]) for name in os.listdir(self.directory)
                             if name.endswith(DATA_SUFFIX) and name[:-len(DATA_SUFFIX)].isdigit()))
        self._kept = (key, bases) if st.st_mtime_ns < listed_ns - racy_ns(st.st_mtime_ns) else None
        return bases

    def forget(self) -> None:
        """List the directory again next time, whatever its time says: this process changed it, or found a change
        the time did not show (a clock stepped back, a filesystem stamping whole seconds)."""
        self._kept = None
