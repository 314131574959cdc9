"""The group-offsets tests' kit (a plain module, loaded by tests/integration/conftest.py): the HA cluster with a
replicated offsets topic, how its instances share the offsets partitions out (and a group served by a given
share), and the server's refusal of a transaction's group offsets that name a bad generation or member, checked
the same way through every path that submits them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from fabric.common.errors import FabricError, IllegalGenerationError, InvalidRequestError
from fabric.common.types import TransactionalOffsets
from fabric.common.waiting import wait_for
from fabric.coordinator.offsets_records import OFFSETS_PARTITIONS, offsets_partition
from fabric.server.launcher import CoordinatorProcess


class HaOffsetsCluster:
    """Two coordinator instances (each its own directory) elected over ZooKeeper, with the offsets topic
    replicated on 3 data nodes: `url` fails over within 5 s of a frozen instance; `active_process(fab)` waits
    for the one active instance and returns its process."""

    SETTLE_S = 60  # a failover on a loaded machine: a session timeout, an election, the topic loaded

    def __init__(self, start_cluster: Callable[..., Any], zk_url: str, directory: Path,
                 the_active: Callable[[Any], Any]) -> None:
        config = directory / "ha.properties"
        config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms=4000\n"
                          "offsets.topic.replication.factor=3\n")
        self.cluster = start_cluster(coordinator_extra=("--config", str(config)), instances=2, separate_dirs=True)
        self.url = self.cluster.url + "?timeout_ms=5000"
        self._the_active = the_active

    def active_process(self, fab: Any) -> CoordinatorProcess:
        status = wait_for(lambda: self._the_active(fab), self.SETTLE_S, "one active coordinator instance")
        return next(c for c in self.cluster.coordinators if c.address == status.instance)

    def shared(self, fab: Any) -> tuple[CoordinatorProcess, CoordinatorProcess, dict[str, set[int]]]:
        """The active instance's process, the other's, and each one's offsets partitions (by address) once they
        have shared every partition out (shared_out)."""
        active = self.active_process(fab)
        other = next(c for c in self.cluster.coordinators if c is not active)
        given = wait_for(lambda: shared_out(fab, [active.address, other.address]), self.SETTLE_S,
                         "the offsets partitions shared out between the two instances")
        return active, other, given


def group_served_by(partitions: set[int], prefix: str) -> str:
    """A group whose offsets partition is one of `partitions`."""
    return next(g for g in (f"{prefix}-{n}" for n in range(10_000)) if offsets_partition(g) in partitions)


def shared_out(fab: Any, addresses: list[str]) -> dict[str, set[int]] | None:
    """Each of the instances at `addresses`' offsets partitions, once every partition is served by one of them and
    each has some. Each look makes a group request first: the first creates the offsets topic (as Kafka's first
    FindCoordinator does), and until the active instance has loaded it there is nothing to share out."""
    try:
        fab.list_groups()
    except FabricError as exc:
        if not exc.retriable:
            raise
    statuses = fab.cluster.statuses()
    if any(isinstance(statuses.get(address), Exception) for address in addresses):
        return None
    given = {address: set(statuses[address].group_partitions) for address in addresses}
    every = sorted(p for ps in given.values() for p in ps)
    return given if every == list(range(OFFSETS_PARTITIONS)) and all(given.values()) else None


def refuses_bad_group_fields(fab: Any, topic: str, group: str, submit: Callable[[TransactionalOffsets], Any],
                             offset: int) -> None:
    """submit(offsets) is refused for a negative generation and for a generation the live `group` (a member joined
    here, reading `topic`) is not at. (A simple commit while the group has members is a producer transaction's to
    make, as Kafka's TxnOffsetCommit without a member: tests/integration/clients/test_kafka_commit_metadata.py.)"""
    with pytest.raises(InvalidRequestError, match="generation"):
        submit(TransactionalOffsets("g", {(topic, 0): 1}, generation=-7))
    with fab.consumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as member:
        wait_for(lambda: member.poll(0.2) or member.assignment(), what="the member's assignment")
        meta = member.consumer_group_metadata()
        with pytest.raises(IllegalGenerationError):
            submit(TransactionalOffsets(group, {(topic, 0): offset}, generation=meta.generation + 5,
                                        member_id=meta.member_id))
