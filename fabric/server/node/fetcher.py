"""A follower's replica fetcher (Kafka's ReplicaFetcherThread, one per followed partition): copies the leader's
frames byte for byte into the follower's log, and the leader's high watermark with them.

States: TRUNCATING (new, or after the leader refused an offset or sent frames that do not follow this log) ->
FETCHING -> STOPPED (stop(), or the replica no longer follows this leader epoch). Compaction's gap frames are
copied like any frame; where a compacted leader's frame spans this log's end, the replica cuts back to it
(PartitionReplica.append_copied). Truncating asks the leader
for the end of the follower's latest epoch (OffsetsForLeaderEpoch) and cuts the log there, in rounds
(truncation.reconcile), never to the follower's own high watermark (KIP-101). Fetching asks for frames from the
log end, which tells the leader how far this replica is; the leader long-polls up to replica.fetch.wait.max.ms
when there is nothing new. Every answer carries the leader's log start offset, which the replica takes (its own
start moves up to it, so retention and DeleteRecords at the leader reach every follower); a log end below it
(the leader deleted those offsets before this replica copied them) makes the replica truncate fully and start
again at the leader's log start (Kafka's OFFSET_OUT_OF_RANGE handling), so it never fetches that offset again.
A failed call (the leader unreachable, or not leading yet) is retried after replica.fetch.backoff.ms; a
FencedLeaderEpochError (this node is behind the controller) asks the controller first.
"""
from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common.errors import (
    FabricError,
    FencedLeaderEpochError,
    InvalidFramesError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
)
from fabric.common.types import EpochEndOffset
from fabric.server import wire
from fabric.server.connection import Call, action_call
from fabric.server.node.partition import PartitionReplica
from fabric.storage import truncation

log = logging.getLogger(__name__)
Peer = Callable[[str, Call], Any]  # (address, call) -> the call's result at that node


class FetcherState(str, enum.Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"
    STOPPED = "Stopped"


@dataclass(frozen=True)
class FetchSettings:
    """replica.fetch.max.bytes, replica.fetch.wait.max.ms and replica.fetch.backoff.ms."""

    max_bytes: int = 1 << 20
    max_wait_ms: int = 500
    backoff_ms: int = 200


def replica_fetch_call(topic: str, partition: int, offset: int, leader_epoch: int, replica_id: int,
                       settings: FetchSettings, topic_id: str) -> Call:
    """The replica_fetch action: its first result is the answer's JSON, its second the frames."""
    request = wire.action("replica_fetch", topic=topic, partition=partition, offset=offset, leader_epoch=leader_epoch,
                          replica_id=replica_id, max_bytes=settings.max_bytes, max_wait_ms=settings.max_wait_ms,
                          topic_id=topic_id)

    def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> tuple[dict[str, int], pa.Buffer]:
        results = list(client.do_action(request, options))
        return wire.loads(results[0].body), results[1].body
    return run


class ReplicaFetcher:
    """Copies `replica`'s leader's frames (node `leader_id` at `address`, under `leader_epoch`, of the topic with
    `topic_id`) on a thread; `peer` makes calls to other nodes, `refresh` asks the controller for this node's
    latest states."""

    def __init__(self, replica: PartitionReplica, leader_id: int, address: str, leader_epoch: int, topic_id: str,
                 peer: Peer, refresh: Callable[[], None], settings: FetchSettings) -> None:
        self.replica, self.leader_id, self.address, self.leader_epoch = replica, leader_id, address, leader_epoch
        self.topic_id = topic_id
        self.peer, self.refresh, self.settings = peer, refresh, settings
        self.state = FetcherState.TRUNCATING
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"fetcher-{replica.name}-from-{leader_id}")

    def start(self) -> ReplicaFetcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop fetching; a call in flight finishes, and its frames are not appended (the epoch moved on)."""
        self._stopped.set()
        self.state = FetcherState.STOPPED

    def _active(self) -> bool:
        return not self._stopped.is_set() and self.replica.following(self.leader_epoch)

    def _run(self) -> None:
        log.info("partition %s: following node %d at %s under leader epoch %d", self.replica.name, self.leader_id,
                 self.address, self.leader_epoch)
        while self._active():
            try:
                if self.state is FetcherState.TRUNCATING:
                    self._truncate()
                    self.state = FetcherState.FETCHING
                self._fetch()
            except (OffsetOutOfRangeError, InvalidFramesError) as exc:
                log.warning("partition %s: %s; truncating again", self.replica.name, exc)
                self.state = FetcherState.TRUNCATING
                self._stopped.wait(self.settings.backoff_ms / 1000)
            except FencedLeaderEpochError as exc:
                log.info("partition %s: %s; asking the controller", self.replica.name, exc)
                self.refresh()
                self._stopped.wait(self.settings.backoff_ms / 1000)
            except FabricError as exc:
                log.info("partition %s: fetching from node %d failed (%s); retrying", self.replica.name,
                         self.leader_id, exc)
                self._stopped.wait(self.settings.backoff_ms / 1000)
        self.state = FetcherState.STOPPED

    def _call(self, call: Call) -> Any:
        try:
            return self.peer(self.address, call)
        except (flight.FlightUnavailableError, flight.FlightTimedOutError) as exc:
            raise LeaderNotAvailableError(f"leader node {self.leader_id} at {self.address} did not answer "
                                          f"({wire.error_details(exc).get('message') or exc})") from None
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None

    def _ask(self, epoch: int) -> EpochEndOffset:
        tp = self.replica.tp
        answer: EpochEndOffset = self._call(action_call("offsets_for_leader_epoch", topic=tp[0],
                                                             partition=tp[1], epoch=epoch,
                                                             leader_epoch=self.leader_epoch, topic_id=self.topic_id))
        return answer

    def _truncate(self) -> None:
        """Reconcile with the leader; report what was cut. Records cut below this replica's high watermark were
        committed: only an unclean election (a leader from outside the ISR) loses them, so they are reported at
        WARNING with their offsets; a cut above it removes records never acknowledged to acks=all."""
        plog = self.replica.log
        before, hw = plog.end_offset, self.replica.hw
        end = truncation.reconcile(plog, self._ask,
                                   lambda offset: self.replica.truncate_follower(self.leader_epoch, offset))
        if end < min(before, hw):
            log.warning("partition %s: offsets %d..%d were committed here but are not in leader node %d's log (an "
                        "unclean election): they are lost; offsets %d..%d truncated", self.replica.name, end,
                        min(before, hw) - 1, self.leader_id, end, before - 1)
        elif end < before:
            log.info("partition %s: truncated uncommitted offsets %d..%d, not in leader node %d's log (epoch %d)",
                     self.replica.name, end, before - 1, self.leader_id, self.leader_epoch)
        log.info("partition %s: reconciled with leader node %d (epoch %d): fetching from offset %d",
                 self.replica.name, self.leader_id, self.leader_epoch, end)

    def _fetch(self) -> None:
        tp = self.replica.tp
        offset = self.replica.log.end_offset
        answer, frames = self._call(replica_fetch_call(tp[0], tp[1], offset, self.leader_epoch,
                                                       self.replica.node_id, self.settings, self.topic_id))
        if offset < answer["log_start"]:  # the leader deleted what this replica would copy next
            self.replica.restart_at(self.leader_epoch, answer["log_start"], offset)
            return
        self.replica.append_copied(self.leader_epoch, frames, answer["high_watermark"], answer["log_start"])

