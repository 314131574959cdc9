"""Truncating a partition's log to an offset: what a follower does when the leader-epoch protocol (KIP-101,
KIP-279) says its tail diverged from its leader's.

Whole frames only: the offset must start a frame (or be the log end). Everything is checked before anything is
changed; then the leader epochs from the offset on are forgotten, the watermark file is lowered to the offset,
later segments are deleted (newest first) and the segment the kept frames end in is cut with its indexes, so
the log is what a replica that copied only the frames below the offset holds. A crash
part-way leaves whole, CRC-valid frames past the watermark, which a replica log's recovery keeps: the follower
asks its leader again and truncates again.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from fabric.common.errors import CorruptRecordError, InvalidArgumentError, OffsetOutOfRangeError
from fabric.common.types import UNDEFINED_EPOCH, EpochEndOffset
from fabric.storage import log_start
from fabric.storage.scan import Frame
from fabric.storage.segment import Segment

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)


def truncate(plog: Log, offset: int, end: int) -> Segment:
    """Remove the frames of `plog` (lock held, its log ending at `end` > `offset`) at and past `offset`; returns
    the new active segment. OffsetOutOfRangeError below the log start, InvalidArgumentError for an offset inside
    a frame (nothing is changed then)."""
    segs = plog.segments()
    start = plog.bounds.start_within(segs, end)
    if offset < start:
        raise OffsetOutOfRangeError(f"partition {plog.name}: cannot truncate to offset {offset}, below the log start "
                                    f"{start}")
    # the segment the kept frames end in: a later one starting at `offset` goes too, as a log that never held
    # the frames from `offset` on has no segment there yet (its next append rolls one as needed)
    kept = [s for i, s in enumerate(segs) if s.base_offset < offset or i == 0]
    target = kept[-1]
    position = _frame_start(plog, target, offset)
    plog.leader_epochs.truncate_from_end(offset)
    plog.hw.write(offset)
    dropped = segs[len(kept):]
    for seg in reversed(dropped):
        seg.delete()
    size = target.size
    with plog.cut_barrier.cutting():  # (no lock-free walk may read the bytes cut: cut_barrier)
        target.truncate(position, offset)
    log.warning("%s: truncated from log end offset %d to offset %d: %d bytes cut at byte %d of %s%s", plog.name, end,
                offset, size - position, position, target.path,
                f", segments deleted: {', '.join(s.path for s in dropped)}" if dropped else "")
    return target


def truncate_fully(plog: Log, offset: int) -> Segment:
    """Remove every frame of `plog` and start it, empty, at `offset` (lock held): Kafka's truncateFullyAndStartAt,
    for a follower whose log ends below its leader's log start (the leader deleted those offsets before this
    replica copied them), or which must truncate below its own log start. The log-start checkpoint is written
    first, then the leader epochs are forgotten, the segments deleted oldest first, a new active segment made at
    `offset` and the watermark moved there; returns that segment. A crash part-way leaves an empty log (at
    `offset`, or at 0 once no segment is left), whose next fetch asks the leader again."""
    log_start.write(plog.directory, offset)
    plog.leader_epochs.truncate_from_end(0)
    segs = plog.segments()
    for seg in segs:
        seg.delete()
    active = plog.create_segment(offset)
    plog.hw.write(offset)
    log.warning("%s: truncated fully (%d segment(s) deleted); the log starts, empty, at offset %d", plog.name,
                len(segs), offset)
    return active


def _frame_start(plog: Log, seg: Segment, offset: int) -> int:
    """The byte of `seg` where the frame of base offset `offset` starts (the end of its frames if none follows)."""
    walk = seg.walk(*plog.indexes.start(seg, offset), stop=offset)
    last = None
    for item in walk:
        last = item
    if walk.expected == offset:
        return walk.position
    if isinstance(last, Frame):
        raise InvalidArgumentError(f"partition {plog.name}: cannot truncate to offset {offset}, inside the frame of "
                                   f"offsets {last.header.base_offset}..{last.header.next_offset - 1} (truncation "
                                   "keeps or removes whole frames)")
    raise CorruptRecordError(f"partition {plog.name}: cannot truncate to offset {offset}: the frames of {seg.path} do "
                             f"not reach it whole (they end at offset {walk.expected})")


MAX_ROUNDS = 64  # each round cuts at least one leader epoch off; a log has far fewer


def reconcile(follower: Log, ask: Callable[[int], EpochEndOffset],
              truncate_to: Callable[[int], object] | None = None) -> int:
    """Truncate `follower` where it diverges from its leader, as Kafka's fetcher does before it fetches (KIP-101
    with KIP-279's rounds): `ask(epoch)` is the leader's OffsetsForLeaderEpoch answer for the follower's latest
    epoch; if the leader answers for an epoch the follower does not have, cut back to the follower's end of the
    epoch below and ask again. `truncate_to` cuts (default follower.truncate_to). Returns the end offset after.
    Never cuts below what the leader holds of the follower's epochs, so acknowledged records are kept."""
    cut = truncate_to or follower.truncate_to
    for _ in range(MAX_ROUNDS):
        end = follower.end_offset
        if not end:
            break
        answer = ask(follower.leader_epochs.latest_epoch)
        if answer.epoch == UNDEFINED_EPOCH:  # the leader has no epochs: it holds answer.end_offset records
            cut(max(min(answer.end_offset, end), 0))
            break
        own = follower.leader_epochs.end_offset_for(answer.epoch, end)
        if own.epoch != answer.epoch:
            cut(min(own.end_offset, end))
            continue
        cut(min(own.end_offset, answer.end_offset, end))
        break
    return follower.end_offset
