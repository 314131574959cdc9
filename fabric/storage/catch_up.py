"""Other processes' appends, for the states a process keeps of a partition it writes (its idempotent producers',
its transactions'): in an embedded fabric, processes writing one partition take turns with its lock, and each
turn found the files changed and dropped both states, so the next idempotent append rebuilt its producers from
the last segments' headers (7 µs a frame here: two processes taking turns on a partition of 20,000 small
batches waited 166 ms an append). Where the log only grew since this process's last view of its tail, the
states take the frames appended past that view instead.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from fabric.storage.frame import FrameHeader
from fabric.storage.scan import Damage, Frame

if TYPE_CHECKING:
    from fabric.storage.log import Log
    from fabric.storage.tail import TailState


def appended_since(plog: Log, view: TailState, end: int) -> list[FrameHeader] | None:
    """The headers of the frames after `view` (this process's view of the tail at its last hold) up to offset
    `end`, if the log only grew since: the segment active then is still there, at least as long, its next frame
    where the view ended, the frames after it whole and contiguous up to `end`. None if anything else may have
    changed: a segment of a compacted topic sealed since may have been rewritten by a cleaner, retention may have
    deleted the segment, damage or a cut makes the frames disagree; the states are then rebuilt."""
    segs = plog.segments()
    at = next((i for i, seg in enumerate(segs) if seg.base_offset == view.base_offset), None)
    if at is None or segs[at].size < view.size or (at + 1 < len(segs)
                                                    and "compact" in plog.config["cleanup.policy"]):
        return None
    headers: list[FrameHeader] = []
    position, expected = view.size, view.end_offset
    for seg in segs[at:]:
        if seg.base_offset != view.base_offset:
            if seg.base_offset != expected:
                return None
            position = seg.data_start
        walk = seg.walk(position, expected, stop=end)
        for item in walk:
            if isinstance(item, Damage):
                return None
            if isinstance(item, Frame):
                headers.append(item.header)
        expected = walk.expected
        if expected >= end:
            break
    return headers if expected == end else None
