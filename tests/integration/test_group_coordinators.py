"""Group coordination shared out among the coordinator instances (fabric/server/offsets_ownership.py), as real
coordinator, node and ZooKeeper processes: two instances each serve some of `__consumer_offsets`' partitions, a
client's calls about a group go to the instance serving it, listings gather every instance's groups, a producer
transaction's offsets are committed by the group's instance, and a stable group served by the instance that is not
the controller keeps heartbeating and committing while the controller is SIGSTOPped. When the paused controller's
ZooKeeper session ends, the other instance takes its partitions over (an election, new epochs) and the groups it
served before keep their generation."""
from __future__ import annotations

from typing import Any, Callable

import pytest

import fabric
from fabric.client.membership import GroupMetadata
from fabric.common.errors import FabricError, GroupMaxSizeReachedError, InvalidSessionTimeoutError
from fabric.common.types import JoinRequest
from fabric.common.waiting import wait_for

pytestmark = pytest.mark.zookeeper
TOPIC = "events"
SETTLE_S = 60  # instances registering, the topic loaded and shared out on a loaded machine
COMMITS = 20  # commits made while the controller is paused


def served(call: Callable[[], object]) -> None:
    """call(), retried while it fails retriably (the first call to a paused instance times out)."""
    def attempt() -> bool:
        try:
            call()
        except FabricError as exc:
            if not exc.retriable:
                raise
            return False
        return True
    wait_for(attempt, SETTLE_S, "the call to be served")


def stable_member(coordinator: Any, group: str) -> tuple[str, int]:
    """A member that joined `group` alone and fetched its assignment: its id and generation."""
    joined = coordinator.join_group(JoinRequest(group, "", (TOPIC,), session_timeout_ms=30_000))
    coordinator.sync_group(group, joined.member_id, joined.generation)
    return joined.member_id, joined.generation


def test_groups_are_shared_out_and_keep_committing_while_the_controller_is_paused(
        offsets_kit, node_cluster, zk_url, tmp_path, the_active, fabric_cli) -> None:
    ha = offsets_kit.HaOffsetsCluster(node_cluster, zk_url, tmp_path, the_active)
    with fabric.connect(ha.url) as fab:
        controller, other, given = ha.shared(fab)
        shown = fabric_cli("coordinator", "status", "--url", ha.cluster.url)
        assert shown.returncode == 0 and "GROUP-PARTITIONS" in shown.stdout, shown.stderr
        rows = {line.split()[0]: line.split()[4] for line in shown.stdout.splitlines()[1:]}
        assert rows == {address: str(len(ps)) for address, ps in given.items()}
        elsewhere = offsets_kit.group_served_by(given[other.address], "elsewhere")
        here = offsets_kit.group_served_by(given[controller.address], "here")
        fab.create_topic(TOPIC, partitions=2, replication_factor=3)
        coordinator = fab.cluster.coordinator
        members = {group: stable_member(coordinator, group) for group in (elsewhere, here)}
        for group in (elsewhere, here):
            coordinator.commit_offsets(group, {(TOPIC, 0): 1}, "", members[group][1], members[group][0])
        assert {elsewhere, here} <= set(fab.list_groups())  # each instance lists its own groups
        assert coordinator.describe_group(elsewhere).generation == members[elsewhere][1]

        # a producer transaction's offsets for a group of the other instance: committed by that instance
        producer = fab.producer(transactional_id="shared-out")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"in a transaction", partition=0)
        member_id, generation = members[elsewhere]
        producer.send_offsets_to_transaction({(TOPIC, 0): 2}, GroupMetadata(elsewhere, generation, member_id, ""))
        producer.commit_transaction()
        producer.close()
        assert coordinator.committed(elsewhere)[(TOPIC, 0)].offset == 2

        controller.pause()  # SIGSTOP
        try:
            for n in range(3, 3 + COMMITS):  # each a round trip to the other instance and the nodes only
                coordinator.heartbeat(elsewhere, member_id, generation)
                coordinator.commit_offsets(elsewhere, {(TOPIC, 0): n}, "", generation, member_id)
            assert coordinator.committed(elsewhere)[(TOPIC, 0)].offset == 2 + COMMITS
            # the paused controller's session ends: the other instance is elected and takes its partitions over
            wait_for(lambda: (s := the_active(fab)) and s.instance == other.address, SETTLE_S,
                     "the other instance to become the controller")
            wait_for(lambda: offsets_kit.shared_out(fab, [other.address]), SETTLE_S, "every partition served by it")
            served(lambda: coordinator.commit_offsets(here, {(TOPIC, 0): 7}, "", members[here][1], members[here][0]))
        finally:
            controller.resume()
        assert coordinator.committed(here)[(TOPIC, 0)].offset == 7
        assert coordinator.describe_group(elsewhere).generation == generation  # stable all along
        coordinator.commit_offsets(elsewhere, {(TOPIC, 0): 99}, "", generation, member_id)
        assert coordinator.committed(elsewhere)[(TOPIC, 0)].offset == 99


def test_a_session_over_group_max_session_timeout_ms_is_refused_by_the_coordinator_process(coordinators) -> None:
    """A careless consumer asking for a huge session (a dead member would keep its partitions that long) hears
    InvalidSessionTimeoutError naming the coordinator's key as the consumer subscribes; one within it joins."""
    instance = coordinators(extra=("--group-max-session-timeout-ms", "60000"))
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("sessions", partitions=2)
        with pytest.raises(InvalidSessionTimeoutError, match=r"session_timeout_ms 3600000 is over "
                           r"this coordinator's group.max.session.timeout.ms \(60000\)"):
            fab.consumer("sessions", group_id="careless", session_timeout_ms=3_600_000, heartbeat_interval_ms=1000)
        with fab.consumer("sessions", group_id="careful", session_timeout_ms=45_000) as careful:
            wait_for(lambda: careful.poll(0.2) is not None and len(careful.assignment()) == 2, 60,
                     "the careful consumer's assignment")
        assert fab.describe_consumer_group("careless").state == "Dead"  # the refused join stored nothing


def test_a_member_past_group_max_size_is_refused_by_the_coordinator_process(coordinators) -> None:
    """A coordinator started with --group-max-size 1: a second consumer of a group hears GroupMaxSizeReachedError
    naming the key as it subscribes, and the first keeps every partition, in the same generation."""
    instance = coordinators(extra=("--group-max-size", "1"))
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("crowded", partitions=2)
        with fab.consumer("crowded", group_id="small", session_timeout_ms=45_000) as first:
            wait_for(lambda: first.poll(0.2) is not None and len(first.assignment()) == 2, 60,
                     "the first consumer's assignment")
            before = fab.describe_consumer_group("small")
            with pytest.raises(GroupMaxSizeReachedError, match=r"group 'small' is full: this "
                                                               r"coordinator's group.max.size is 1 and it has 1"):
                fab.consumer("crowded", group_id="small", session_timeout_ms=45_000)
            first.poll(0.2)
            after = fab.describe_consumer_group("small")
            assert (after.state, after.generation, len(after.members)) == ("Stable", before.generation, 1)
            assert len(first.assignment()) == 2


def test_a_group_over_a_lowered_group_max_size_keeps_one_member_when_its_coordinator_restarts(coordinators) -> None:
    """The coordinator restarted with --group-max-size 1 under a group of two consumers (Kafka's rolling restart
    with a lower group.max.size): the group rebalances at the next heartbeat, the first member to rejoin keeps
    every partition, and the other hears GroupMaxSizeReachedError naming the key from its poll()."""
    instance = coordinators()
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("shrunk", partitions=2)
        members = [fab.consumer("shrunk", group_id="shrinking", session_timeout_ms=45_000,
                                heartbeat_interval_ms=500) for _ in range(2)]
        try:
            def spread() -> bool:
                for member in members:
                    member.poll(0.1)
                return [len(member.assignment()) for member in members] == [1, 1]
            wait_for(spread, SETTLE_S, "a partition each")
            instance.stop()
            instance.extra = ("--group-max-size", "1")
            instance.start()
            refused: dict[int, GroupMaxSizeReachedError] = {}

            def shrunk() -> bool:
                for number, member in enumerate(members):
                    if number not in refused:
                        try:
                            member.poll(0.1)
                        except GroupMaxSizeReachedError as exc:
                            refused[number] = exc
                kept = [member for number, member in enumerate(members) if number not in refused]
                return len(kept) == 1 and len(kept[0].assignment()) == 2
            wait_for(shrunk, SETTLE_S, "one member keeping both partitions, the other refused")
            assert "group.max.size is 1 and it has 1" in str(next(iter(refused.values())))
            group = fab.describe_consumer_group("shrinking")
            assert (group.state, len(group.members)) == ("Stable", 1)
        finally:
            for member in members:
                member.close()
