"""Whose producer id an append writes under: every server that takes idempotent or transactional appends (a data
node's leaders, the coordinator service's own partitions) writes one only under a producer id handed to the
appending principal, so no principal can forge another's batches, swallow its records as "duplicates" or fence
it. The coordinator records the owner of each block of ids it hands out (coordinator.producer_ids); the
coordinator's own offsets producer (OFFSETS_PRODUCER_ID, in no block) writes only with cluster_action on the
cluster.

Owners are cached per block, which never changes owner: a producer's appends after its first cost no round
trip to the coordinator. An id in no claimed block is not cached (it may be handed out later) and is refused
with UnknownProducerIdError, on which a producer takes a new id.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from fabric.common.errors import AuthorizationError, UnknownProducerIdError
from fabric.coordinator.producer_ids import OFFSETS_PRODUCER_ID, block_of

BLOCKS_CACHED = 4096


class ProducerOwners:
    """The owner of each producer id as `lookup(producer id)` answers it (the coordinator's record: a principal,
    or None for an id nobody was handed), cached per block; thread-safe."""

    def __init__(self, lookup: Callable[[int], str | None], blocks_cached: int = BLOCKS_CACHED) -> None:
        self.lookup, self.blocks_cached = lookup, blocks_cached
        self._owners: OrderedDict[int, str] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, principal: str, producer_id: int, may_act_for_cluster: Callable[[], bool]) -> None:
        """Nothing if `principal` may append under `producer_id` (negative: not an idempotent append, checked
        elsewhere); else AuthorizationError naming the id and the fix, or UnknownProducerIdError for an id the
        coordinator never handed out."""
        if producer_id < 0:
            return
        if producer_id == OFFSETS_PRODUCER_ID:
            if not may_act_for_cluster():
                raise AuthorizationError(f"principal {principal!r} may not write as producer id {producer_id}: it is "
                                         "the coordinator's offsets producer, which needs cluster_action on "
                                         "cluster:fabric; a producer takes an id of its own with init_producer_id")
            return
        owner = self._owner(producer_id)
        if owner is None:
            raise UnknownProducerIdError(f"producer id {producer_id} was not handed out by this fabric's coordinator "
                                         "(or was before producer ids had owners); take a new one with "
                                         "init_producer_id, as a producer does when it starts")
        if owner != principal:
            raise AuthorizationError(f"principal {principal!r} may not write as producer id {producer_id}: the "
                                     "coordinator handed that id to another principal; take an id of its own with "
                                     "init_producer_id (a producer does when it starts)")

    def known(self, producer_id: object) -> bool:
        """Whether `check` answers for `producer_id` without asking the coordinator: not an idempotent append's
        (not a non-negative int), the offsets producer's, or an id whose block's owner is cached."""
        if not isinstance(producer_id, int) or producer_id < 0 or producer_id == OFFSETS_PRODUCER_ID:
            return True
        block = block_of(producer_id)
        with self._lock:
            return block is not None and block in self._owners

    def _owner(self, producer_id: int) -> str | None:
        block = block_of(producer_id)
        if block is None:
            return None
        with self._lock:
            owner = self._owners.get(block)
            if owner is not None:
                self._owners.move_to_end(block)
                return owner
        owner = self.lookup(producer_id)
        if owner is not None:
            with self._lock:
                self._owners[block] = owner
                while len(self._owners) > self.blocks_cached:
                    self._owners.popitem(last=False)
        return owner
