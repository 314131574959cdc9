"""Handing out idempotent producers' ids (KIP-98's InitProducerId): ids come from blocks the store reserves
(`allocate_producer_ids`, a compare-and-set in ZooKeeper), so instances that hand them out never give one id
twice, and the store is written once per BLOCK_SIZE producers. Every new id starts at epoch 0.

A store that has handed out no id starts at a random point of a 2**62 range, not at 0: logs keep the ids of the
producers that wrote them, so a store rebuilt after its metadata was lost must not hand out an id again (a new
producer's first batch would be taken for the old one's retry and dropped)."""
from __future__ import annotations

import logging
import random
import threading

from fabric.common.types import ProducerIdentity
from fabric.coordinator.interface import Coordinator

log = logging.getLogger(__name__)
BLOCK_SIZE = 1000
FIRST_IDS = 1 << 62  # where a store's first block may start: ids stay below 2**63 for 2**62 more producers


class ProducerIds:
    """Producer ids from `store`'s blocks, one block held in memory at a time; thread-safe."""

    def __init__(self, store: Coordinator) -> None:
        self.store = store
        self._next = self._end = 0
        self._lock = threading.Lock()

    def next(self) -> ProducerIdentity:
        with self._lock:
            if self._next >= self._end:
                self._next = self.store.allocate_producer_ids(BLOCK_SIZE, random.randrange(FIRST_IDS))
                self._end = self._next + BLOCK_SIZE
                log.info("producer ids %d..%d reserved", self._next, self._end - 1)
            identity = ProducerIdentity(self._next, 0)
            self._next += 1
        return identity
