"""Producer ids and their owners (coordinator/producer_ids.py, fabric/server/producer_owners.py): each principal's
ids come from random blocks of its own, in a random order, recorded in the store with their owner; a server
takes an idempotent append only under an id of the appending principal, the coordinator's offsets producer's
only with cluster_action, and learns owners once per block."""
from __future__ import annotations

import pytest

from fabric.common.errors import AuthorizationError, UnknownProducerIdError
from fabric.coordinator import producer_ids
from fabric.coordinator.producer_ids import BLOCK_SIZE, FIRST_ID, OFFSETS_PRODUCER_ID, ProducerIds, block_of
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.server.producer_owners import ProducerOwners


@pytest.fixture
def store(tmp_path):
    coordinator = SqliteCoordinator(str(tmp_path / "metadata.db"))
    yield coordinator
    coordinator.close()


def test_each_principal_gets_unpredictable_ids_from_blocks_of_its_own(store) -> None:
    ids = ProducerIds(store)
    ann = [ids.next("ann").producer_id for _ in range(BLOCK_SIZE + 100)]  # past one block: a second is claimed
    bob = [ids.next("bob").producer_id for _ in range(200)]
    assert len(set(ann + bob)) == len(ann) + len(bob)
    assert all(FIRST_ID <= i < OFFSETS_PRODUCER_ID for i in ann + bob)
    assert len({block_of(i) for i in ann}) == 2 and len({block_of(i) for i in bob}) == 1
    assert not {block_of(i) for i in ann} & {block_of(i) for i in bob}
    assert {ids.owner(i) for i in ann} == {"ann"} and {ids.owner(i) for i in bob} == {"bob"}
    # neither the next id nor the next block follows from the last: within a block ids come in a random order
    steps = [b - a for a, b in zip(ann[:1000], ann[1:1001], strict=True)]
    assert sum(step == 1 for step in steps) < 20
    # a restarted coordinator (a new ProducerIds over the same store) claims new blocks: no id comes twice
    again = [ProducerIds(store).next("ann").producer_id for _ in range(50)]
    assert not set(again) & set(ann)
    assert ids.owner(FIRST_ID - 1) is None and ids.owner(OFFSETS_PRODUCER_ID) is None and ids.owner(0) is None


def test_a_block_someone_holds_is_never_claimed_again(store, monkeypatch) -> None:
    store.claim_producer_id_block(7, "mallory")
    draws = iter([7, 9])
    monkeypatch.setattr(producer_ids.secrets, "randbelow", lambda n: next(draws) if n == producer_ids.BLOCKS else 0)
    identity = ProducerIds(store).next("ann")
    assert block_of(identity.producer_id) == 9 and identity.producer_epoch == 0
    assert store.producer_id_block_owner(7) == "mallory" and store.producer_id_block_owner(9) == "ann"


def test_appends_are_taken_only_under_the_principals_own_ids(store) -> None:
    ids = ProducerIds(store)
    asked: list[int] = []

    def lookup(producer_id: int) -> str | None:
        asked.append(producer_id)
        return ids.owner(producer_id)
    owners = ProducerOwners(lookup)
    mine, theirs = ids.next("ann").producer_id, ids.next("bob").producer_id
    owners.check("ann", mine, lambda: False)
    owners.check("ann", -1, lambda: False)  # not an idempotent append
    with pytest.raises(AuthorizationError, match=f"'ann' may not write as producer id {theirs}.*init_producer_id"):
        owners.check("ann", theirs, lambda: False)
    with pytest.raises(UnknownProducerIdError, match="not handed out"):
        owners.check("ann", FIRST_ID - 5, lambda: False)  # an id from before ids had owners
    unclaimed = mine + BLOCK_SIZE if block_of(mine + BLOCK_SIZE) != block_of(theirs) else mine - BLOCK_SIZE
    with pytest.raises(UnknownProducerIdError):
        owners.check("ann", unclaimed, lambda: False)
    with pytest.raises(AuthorizationError, match="offsets producer, which needs cluster_action"):
        owners.check("ann", OFFSETS_PRODUCER_ID, lambda: False)
    owners.check("coordinator", OFFSETS_PRODUCER_ID, lambda: True)
    # owners are learnt once per block: every later id of a known block costs no lookup
    before = len(asked)
    owners.check("ann", ids.next("ann").producer_id, lambda: False)
    with pytest.raises(AuthorizationError):
        owners.check("ann", ids.next("bob").producer_id, lambda: False)
    assert len(asked) == before


def test_known_says_which_ids_check_answers_without_asking_the_coordinator(store) -> None:
    ids = ProducerIds(store)
    owners = ProducerOwners(ids.owner)
    mine = ids.next("ann").producer_id
    assert owners.known(-1) and owners.known(OFFSETS_PRODUCER_ID) and owners.known(None)  # nothing to ask
    assert not owners.known(mine)  # its block's owner is not cached yet: a data node serves it on a worker thread
    owners.check("ann", mine, lambda: False)
    assert owners.known(mine) and owners.known(ids.next("ann").producer_id)  # the whole block is cached
    assert not owners.known(ids.next("bob").producer_id)
