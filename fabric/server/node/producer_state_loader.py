"""Loads the idempotent producer state of a data node's partitions in the background, on a thread of its own.

A follower that copies frames into a log whose producer state is not loaded (after the node started, or after a
truncation dropped it) has it loaded (Log.load_producer_state: the segments are read without the partition lock,
so its copies go on meanwhile), and keeps it up to date with every frame it copies, as Kafka's followers keep
theirs. So a follower elected leader answers its first idempotent produce from memory, instead of reading the
headers of its last segments first (seconds for segments of small batches). A leader whose state is not loaded
(a restarted node's) has it loaded the same way when it answers its followers' fetches; one with no followers
loads it on its first idempotent produce, served on a worker thread, never on the event loop (append_routing),
without the partition lock.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from fabric.common.errors import FabricError
from fabric.common.types import TopicPartition
from fabric.storage.log import Log

log = logging.getLogger(__name__)
RETRY_S = 10.0  # after a load that failed or could not follow its log's changes, the next try waits this long


class ProducerStateLoader:
    """Loads the producer state of the partitions `load` is given, one at a time, each once per call (a partition
    queued twice before its turn loads once), on a daemon thread that runs while there is something to load. A
    partition whose load failed (its storage) or was overtaken (its log cut or rewritten meanwhile) is tried
    again RETRY_S later at the earliest: every copy of a follower asks, and a scan costs seconds."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._queue: deque[tuple[TopicPartition, Callable[[], Log]]] = deque()
        self._queued: set[TopicPartition] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None  # while the queue has partitions
        self._stopped = False
        self._failed: dict[TopicPartition, float] = {}  # the monotonic time of each partition's last failed load

    def load(self, tp: TopicPartition, opened: Callable[[], Log]) -> None:
        """Load `tp`'s producer state soon (`opened` gives its log), unless it is already waiting its turn."""
        with self._lock:
            if tp in self._queued or self._stopped or time.monotonic() < self._failed.get(tp, -RETRY_S) + RETRY_S:
                return
            self._queued.add(tp)
            self._queue.append((tp, opened))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"producer-state-loader-{self.node_id}",
                                                daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Load nothing more (the node is stopping; a partition being loaded finishes)."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            self._queued.clear()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    due = time.monotonic() - RETRY_S
                    self._failed = {tp: at for tp, at in self._failed.items() if at > due}
                    return
                tp, opened = self._queue.popleft()
                self._queued.discard(tp)
            try:
                loaded = opened().load_producer_state()
            except (FabricError, OSError) as exc:  # (deleted meanwhile, or its storage failed: the append says so)
                log.info("node %d: the producer state of %s-%d was not loaded (%s); tried again in %g s at the "
                         "earliest, or by its first idempotent append", self.node_id, *tp, exc, RETRY_S)
                loaded = False
            with self._lock:
                if loaded:
                    self._failed.pop(tp, None)
                else:
                    self._failed[tp] = time.monotonic()
