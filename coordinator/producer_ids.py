"""Handing out producer ids (KIP-98's InitProducerId), each owned by the principal it was handed to.

Ids come in blocks of BLOCK_SIZE that the store records with their owner (`claim_producer_id_block`, which
claims a block only if nobody holds it): a principal's ids come from blocks of its own, so an id's owner is its
block's (`owner`). Data nodes ask it, and refuse an idempotent or transactional append under an id that is not
the appending principal's (fabric.server.producer_owners). The store is written once per block.

Ids are unpredictable: blocks lie at random among BLOCKS (2**46) in the ids FIRST_ID to 2**63 - 2, and a block
hands its ids out in a random order, so one's own ids tell nothing of the next ones, anyone's. This also keeps
an id from being handed out twice by a store rebuilt after its metadata was lost (logs keep the ids of the
producers that wrote them, and a new producer's first batch must not be taken for an old one's retry): its
random blocks meet the old store's with a chance of (blocks used) / 2**46 per block.

Ids below FIRST_ID were handed out before ids had owners: they belong to no block, and nodes refuse them (the
producer takes a new id, as after UnknownProducerIdError). Every new id starts at epoch 0.
"""
from __future__ import annotations

import array
import logging
import secrets
import threading

from fabric.common.config import LONG_MAX
from fabric.common.errors import CoordinatorUnavailableError
from fabric.common.types import ProducerIdentity
from fabric.coordinator.interface import Coordinator

log = logging.getLogger(__name__)
BLOCK_SIZE = 1 << 16
FIRST_ID = 1 << 62
OFFSETS_PRODUCER_ID = LONG_MAX  # the coordinator's own offsets producer's (fabric.server.replicated_offsets)
BLOCKS = (OFFSETS_PRODUCER_ID - FIRST_ID) // BLOCK_SIZE  # so the last block ends below it
CLAIM_ATTEMPTS = 16  # random blocks tried before giving up (each is taken with a chance of blocks used / 2**46)


def block_of(producer_id: int) -> int | None:
    """The number of the block holding `producer_id`; None for an id in no block (one handed out before ids had
    owners, or the coordinator's own offsets producer's)."""
    block = (producer_id - FIRST_ID) // BLOCK_SIZE
    return block if producer_id >= FIRST_ID and block < BLOCKS else None


class _Block:
    """The ids of block `number` not handed out yet, in a random order (a Fisher-Yates shuffle drawn one id at a
    time: 2 bytes per id)."""

    def __init__(self, number: int) -> None:
        self.number, self._drawn = number, 0
        self._order = array.array("H", range(BLOCK_SIZE))

    @property
    def exhausted(self) -> bool:
        return self._drawn >= BLOCK_SIZE

    def draw(self) -> int:
        order, drawn = self._order, self._drawn
        pick = drawn + secrets.randbelow(BLOCK_SIZE - drawn)
        order[pick], order[drawn] = order[drawn], order[pick]
        self._drawn += 1
        return FIRST_ID + self.number * BLOCK_SIZE + order[drawn]


class ProducerIds:
    """Producer ids from `store`'s blocks, one block held in memory per principal; thread-safe."""

    def __init__(self, store: Coordinator) -> None:
        self.store = store
        self._blocks: dict[str, _Block] = {}
        self._lock = threading.Lock()

    def next(self, principal: str) -> ProducerIdentity:
        """A new id of `principal`'s, at epoch 0."""
        with self._lock:
            block = self._blocks.get(principal)
            if block is None or block.exhausted:
                block = self._blocks[principal] = self._claim(principal)
            return ProducerIdentity(block.draw(), 0)

    def _claim(self, principal: str) -> _Block:
        for _ in range(CLAIM_ATTEMPTS):
            number = secrets.randbelow(BLOCKS)
            if self.store.claim_producer_id_block(number, principal):
                log.info("producer id block %d claimed for principal %r", number, principal)
                return _Block(number)
        raise CoordinatorUnavailableError(f"no free producer id block found in {CLAIM_ATTEMPTS} random tries; "
                                          "retry init_producer_id")

    def owner(self, producer_id: int) -> str | None:
        """The principal `producer_id` was handed to; None if it was not handed out (or before ids had owners)."""
        block = block_of(producer_id)
        return None if block is None else self.store.producer_id_block_owner(block)
