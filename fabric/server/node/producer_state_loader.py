"""Loads the idempotent producer state of the partitions a data node follows, on a thread of its own.

A follower that copies frames into a log whose producer state is not loaded (after the node started, or after a
truncation dropped it) has it loaded in the background (Log.load_producer_state: the segments are read without
the partition lock, so its copies go on meanwhile), and keeps it up to date with every frame it copies, as
Kafka's followers keep theirs. So a follower elected leader answers its first idempotent produce from memory,
instead of reading the headers of its last segments first (seconds for segments of small batches). A leader
whose state is not loaded (a restarted node's) loads it on its first idempotent produce, which is then served on
a worker thread, never on the event loop (append_routing), and reads the segments without the partition lock.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from fabric.common.errors import FabricError
from fabric.common.types import TopicPartition
from fabric.storage.log import Log

log = logging.getLogger(__name__)


class ProducerStateLoader:
    """A daemon thread loading the producer state of the partitions `load` is given, one at a time, each once
    per call (a partition queued twice before its turn loads once)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._queue: queue.SimpleQueue[tuple[TopicPartition, Callable[[], Log]] | None] = queue.SimpleQueue()
        self._queued: set[TopicPartition] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"producer-state-loader-{node_id}", daemon=True)
        self._thread.start()

    def load(self, tp: TopicPartition, opened: Callable[[], Log]) -> None:
        """Load `tp`'s producer state soon (`opened` gives its log), unless it is already waiting its turn."""
        with self._lock:
            if tp in self._queued:
                return
            self._queued.add(tp)
        self._queue.put((tp, opened))

    def stop(self) -> None:
        """Stop after the partition being loaded, if any (the others are loaded by their first idempotent
        append)."""
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            tp, opened = item
            with self._lock:
                self._queued.discard(tp)
            try:
                loaded = opened().load_producer_state()
            except (FabricError, OSError) as exc:  # (deleted meanwhile, or its storage failed: the append says so)
                log.info("node %d: the producer state of %s-%d was not loaded (%s); its first idempotent append "
                         "loads it", self.node_id, *tp, exc)
                continue
            log.debug("node %d: producer state of %s-%d %s", self.node_id, *tp,
                      "loaded" if loaded else "left to the first idempotent append")
