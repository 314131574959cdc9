"""The follower's side of a partition replica (partition.py): appending its leader's frames byte for byte, taking
the leader's high watermark and log start from each fetch answer, and the cuts the leader-epoch protocol
(truncate_follower), a leader's deleted records (restart_at) and compaction's moved frame boundaries
(`_realigned`) ask for. Each does nothing once the replica no longer follows the leader epoch it was asked under,
so an answer that arrives after a leadership change never writes into a leader's log."""
from __future__ import annotations

import logging
import threading
from typing import Callable

import pyarrow as pa

from fabric.common import trace
from fabric.common.types import TopicPartition
from fabric.storage import frame
from fabric.storage.log import Log

log = logging.getLogger(__name__)


class FollowerCopy:
    """What PartitionReplica does as a follower, under its lock (`changed`)."""

    tp: TopicPartition
    node_id: int
    hw: int
    changed: threading.Condition
    _leader_start: int  # the leader's log start this follower last took (-1: none since it restarted)
    following: Callable[[int], bool]  # whether the replica follows under the leader epoch given
    _notify: Callable[[], None]  # wakes what waits on the readable end (consumers long-polling this follower)
    # loads the partition's producer state in the background (producer_state_loader), so that it is at hand if
    # this follower is elected leader (or, as a leader, when producers come): asked while it is not loaded, by a
    # follower's copies and a leader's answers to its followers
    wants_producer_state: Callable[[], None]

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def log(self) -> Log:
        raise NotImplementedError

    def append_copied(self, leader_epoch: int, frames: pa.Buffer, leader_hw: int, leader_start: int) -> None:
        """A fetch under `leader_epoch` returned: append its frames, byte for byte, take the leader's high
        watermark (at most the new log end) and its log start (Kafka's FetchResponse logStartOffset: this log's
        start moves up to it, checkpointed, and the whole segments below it are deleted). Nothing is done once the
        replica no longer follows that epoch, so a fetch answered after a leadership change never writes into a
        leader's log."""
        with self.changed:
            if not self.following(leader_epoch):
                return
            plog = self.log
            end = plog.end_offset
            if frames.size:
                cut = self._realigned(plog, frames, end)
                end = plog.append_frames(frames) if cut is None else cut
                if not plog.producer_state_loaded:
                    self.wants_producer_state()
                if trace.ON:
                    trace.event("follower_append", self.tp[0], self.tp[1], frame.unpack_header(frames, 0).base_offset,
                                end, self.node_id)
            hw = min(leader_hw, end)
            if hw != self.hw:
                self.hw = hw
                self._notify()  # consumers long-polling this follower
            if leader_start > self._leader_start:
                plog.delete_records(min(leader_start, end))
                self._leader_start = leader_start

    def restart_at(self, leader_epoch: int, leader_start: int, fetched_from: int) -> None:
        """The leader's log starts at `leader_start`, past `fetched_from`, this log's end: it deleted those offsets
        before this replica copied them. Truncate fully and start, empty, at its log start, as Kafka's follower
        does on OFFSET_OUT_OF_RANGE (nothing once the replica no longer follows `leader_epoch`)."""
        with self.changed:
            if not self.following(leader_epoch):
                return
            log.warning("partition %s: the leader's log starts at offset %d, past this replica's log end %d (offsets "
                        "%d..%d were deleted there before they were copied here): starting again at %d", self.name,
                        leader_start, fetched_from, fetched_from, leader_start - 1, leader_start)
            self._truncate_fully(self.log, leader_start)
            self.hw = leader_start

    def _truncate_fully(self, plog: Log, offset: int) -> None:
        """Empty the log and start it at `offset` (lock held); the leader's log start is taken again after."""
        plog.truncate_fully_and_start_at(offset)
        self._leader_start = -1

    def _realigned(self, plog: Log, frames: pa.Buffer, end: int) -> int | None:
        """If the leader's first frame starts below `end`, this log's end, cut this log back to its own frame
        holding that offset (lock held) and return the new end (else None): the next fetch copies from there.
        Compaction (each replica cleans its own copy) moves frame boundaries: a gap frame of the leader may span
        this log's end, which a follower out of the ISR (restarted, lagging) can hold inside the leader's cleaned
        range. The offsets cut are the same ones the leader sends again, as the leader's copy of them; each round
        cuts at least one frame, so boundaries meet within a few fetches."""
        first = frame.unpack_header(frames, 0).base_offset
        if first >= end:
            return None
        if first <= plog.start_offset:  # none of the leader's frame is held here (its log start may be inside it)
            self._truncate_fully(plog, first)
            return None
        own = frame.unpack_header(plog.read_frames(first, 1), 0).base_offset
        log.info("partition %s: leader's frame at offset %d spans this replica's log end %d (frame boundaries moved "
                 "by compaction): copying again from offset %d", self.name, first, end, own)
        plog.truncate_to(own)
        self.hw = min(self.hw, own)
        return own

    def truncate_follower(self, leader_epoch: int, offset: int) -> None:
        """Cut the log to `offset` as the leader-epoch protocol decided under `leader_epoch` (nothing once it no
        longer follows that epoch); the high watermark is at most the new end."""
        with self.changed:
            if not self.following(leader_epoch):
                return
            plog = self.log
            if offset <= plog.start_offset and offset < plog.end_offset:  # as Kafka's truncateTo below the start
                self._truncate_fully(plog, offset)  # (at the start, which may be inside a frame: nothing is kept)
            else:
                plog.truncate_to(offset)
            self.hw = min(self.hw, plog.end_offset)
