"""Group states in the replicated `__consumer_offsets` topic on the data nodes (coordinator/topic_group_store.py),
as real coordinator, node and ZooKeeper processes: a group's members keep their generation across a SIGKILL of the
active ZooKeeper-backed instance (the next one loads the group from the topic, not from znodes), heartbeats write
no record, a deleted group is a tombstone that stays deleted across the next failover, the group states of the
store a coordinator kept before move to the nodes once, and calls are refused (retriably) while the topic cannot
be loaded."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

import fabric
from fabric.common.errors import CoordinatorUnavailableError, FabricError, MembershipError
from fabric.common.types import JoinRequest, JoinResult
from fabric.common.waiting import wait_for
from fabric.coordinator import zk_layout
from fabric.coordinator.offsets_records import OFFSETS_TOPIC, group_key, offsets_partition
from fabric.server.launcher import CoordinatorProcess

GROUP, TOPIC, PARTITIONS = "keepers", "events", 2
SETTLE_S = 60  # a failover on a loaded machine: a session timeout, an election, the topic loaded
SESSION_MS = 10_000  # members' sessions
SLACK_S = SESSION_MS / 5 / 1000  # a heartbeat later than this after the last one moves the member's liveness
T = TypeVar("T")


def served(call: Callable[[], T], what: str) -> T:
    """call(), retried while it fails retriably (an instance taking over, the offsets topic loading)."""
    def attempt() -> tuple[T] | None:
        try:
            return (call(),)
        except FabricError as exc:
            if not exc.retriable:
                raise
            return None
    return wait_for(attempt, SETTLE_S, what)[0]


def join(fab: fabric.Fabric, member_id: str = "") -> JoinResult:
    request = JoinRequest(GROUP, member_id, (TOPIC,), session_timeout_ms=SESSION_MS, rebalance_timeout_ms=60_000)
    return served(lambda: fab.cluster.coordinator.join_group(request), f"{member_id or 'a new member'} joined")


def stable_pair(fab: fabric.Fabric) -> tuple[list[str], int]:
    """Two members that joined GROUP and fetched their assignment: their ids and generation."""
    first = join(fab)
    fab.cluster.coordinator.sync_group(GROUP, first.member_id, first.generation)
    second = join(fab)  # starts a rebalance the first member completes by joining again
    first, second = join(fab, first.member_id), join(fab, second.member_id)
    assert first.ready and second.ready and first.generation == second.generation == 2
    for member in (first, second):
        fab.cluster.coordinator.sync_group(GROUP, member.member_id, member.generation)
    return [first.member_id, second.member_id], first.generation


def group_records(fab: fabric.Fabric, group: str = GROUP) -> list[dict[str, Any] | None]:
    """The values of `group`'s metadata records in its offsets partition on the nodes, oldest first (None: a
    tombstone), read up to the high watermark."""
    tp = (OFFSETS_TOPIC, offsets_partition(group))
    records: list[Any] = []
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = served(lambda: consumer.end_offsets([tp])[tp], f"the end of {tp}")
        consumer.seek(*tp, 0)

        def read_to_end() -> bool:
            records.extend(consumer.poll(0.2))
            return bool(records) and records[-1].offset >= end - 1
        wait_for(read_to_end, SETTLE_S, f"{tp} read to its high watermark {end}")
    return [r.value for r in records if r.key == group_key(group)]


class Heartbeats(threading.Thread):
    """Heartbeats of `members` (generation `generation`) every 200 ms through their own client, each retriable
    failure retried; `answered` is when the latest round was answered, `failure` a refusal (e.g. a rebalance)."""

    def __init__(self, url: str, members: list[str], generation: int) -> None:
        super().__init__(daemon=True)
        self.url, self.members, self.generation = url, members, generation
        self.answered, self.failure = 0.0, None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            with fabric.connect(self.url) as fab:
                while not self.halt.wait(0.2):
                    try:
                        for member in self.members:
                            fab.cluster.coordinator.heartbeat(GROUP, member, self.generation)
                    except FabricError as exc:
                        if not exc.retriable or isinstance(exc, MembershipError):  # a rebalance is a failure
                            raise
                        continue
                    self.answered = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 (asserted by the test)
            self.failure = exc

    def answered_after(self, moment: float, what: str) -> None:
        def answered() -> bool:
            assert self.failure is None, f"a heartbeat was refused: {self.failure!r}"
            return self.answered > moment
        wait_for(answered, SETTLE_S, f"heartbeats answered {what}")


def test_members_keep_their_generation_across_a_failover_and_a_deleted_group_stays_deleted(
        offsets_kit, node_cluster, zk_url, tmp_path, the_active, replication, raw, fabric_cli, running) -> None:
    ha = offsets_kit.HaOffsetsCluster(node_cluster, zk_url, tmp_path, the_active)
    cluster, url, active_process = ha.cluster, ha.url, ha.active_process
    with fabric.connect(url) as fab:
        first = active_process(fab)
        fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        members, generation = stable_pair(fab)
        stored = group_records(fab)
        state = json.loads(stored[-1]["metadata"])  # the group is a record in its offsets partition on the nodes
        assert (state["state"], state["generation"], sorted(state["members"])) == ("Stable", 2, sorted(members))
        assert all("last_heartbeat_ms" not in m for m in state["members"].values())
        with replication.zk_client(zk_url) as zk:  # ... and nowhere in ZooKeeper
            assert zk.exists(zk_layout.group_state(GROUP)) is None

        with running(Heartbeats(url, members, generation)) as heartbeats:
            began = time.monotonic()
            heartbeats.answered_after(began + 2 * SLACK_S, "for two heartbeat slacks")  # past the slack
            assert group_records(fab) == stored  # heartbeats moved the members' liveness in memory only
            first.kill()  # SIGKILL: the other instance (its own data directory) takes over and loads the topic
            killed = time.monotonic()
            second = active_process(fab)
            assert second is not first
            heartbeats.answered_after(killed, "by the new active instance, same generation: no rebalance")
            for member in members:  # offset commits with the old generation are accepted
                fab.cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): 5}, generation=generation,
                                                       member_id=member)
            described = fab.cluster.coordinator.describe_group(GROUP)
            assert (described.state, described.generation) == ("Stable", generation)
            assert sorted(m.member_id for m in described.members) == sorted(members)
            shown = fabric_cli("groups", "describe", GROUP, "--members", "--url", url)
            assert shown.returncode == 0 and f"Generation: {generation}" in shown.stdout, shown.stderr
        assert heartbeats.failure is None, repr(heartbeats.failure)
        assert len(group_records(fab)) == len(stored)

        for member in members:
            fab.cluster.coordinator.leave_group(GROUP, member)
        fab.delete_group(GROUP)
        assert group_records(fab)[-1] is None  # a tombstone

        index = cluster.coordinators.index(first)
        cluster.coordinators[index] = first = CoordinatorProcess(first.data_dir, port=first.port,
                                                                 extra=first.extra).start()  # a standby now
        # (a standby that has read who serves the group's offsets partition names that instance; one that has not
        # yet, the active one: either way it refuses and sends the caller on)
        with pytest.raises(FabricError, match="not the active coordinator|is served by coordinator instance"):
            raw.action(first.address, "describe_group", group=GROUP)
        second.kill()
        assert active_process(fab) is first
        described = served(lambda: fab.cluster.coordinator.describe_group(GROUP), "the group described")
        assert described.state == "Dead" and GROUP not in fab.list_groups()


def test_the_group_states_of_the_coordinators_store_move_to_the_nodes_once(node_cluster) -> None:
    cluster = node_cluster()  # no offsets.topic.replication.factor: groups in the coordinator's SQLite store
    old = cluster.coordinator
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        members, generation = stable_pair(fab)

    def restart() -> CoordinatorProcess:
        cluster.coordinator.stop()
        cluster.coordinators[0] = CoordinatorProcess(old.data_dir, port=old.port,
                                                     extra=(*old.extra, "--offsets-topic-replication-factor", "3"))
        return cluster.coordinators[0].start()

    restart()
    with fabric.connect(cluster.url) as fab:
        described = served(lambda: fab.cluster.coordinator.describe_group(GROUP), "the group described")
        assert (described.state, described.generation) == ("Stable", generation)  # moved in, same generation
        assert sorted(m.member_id for m in described.members) == sorted(members)
        assert len(group_records(fab)) == 1
        for member in members:
            fab.cluster.coordinator.leave_group(GROUP, member)
        fab.cluster.coordinator.delete_group(GROUP)  # (an empty group without offsets is not listed)
        deleted = group_records(fab)
        assert deleted[-1] is None
    restart()
    with fabric.connect(cluster.url) as fab:
        described = served(lambda: fab.cluster.coordinator.describe_group(GROUP), "the group described")
        assert described.state == "Dead"  # not moved in again
        assert group_records(fab) == deleted
    database = sqlite3.connect(Path(old.data_dir) / "__fabric" / "metadata.db")
    try:  # the old copy is still there, unread
        assert [row[0] for row in database.execute("SELECT grp FROM groups")] == [GROUP]
    finally:
        database.close()


def test_group_calls_are_refused_retriably_while_the_offsets_topic_cannot_be_loaded(node_cluster, raw) -> None:
    cluster = node_cluster(nodes=2, coordinator_extra=("--offsets-topic-replication-factor", "3"))
    request = JoinRequest(GROUP, "", (TOPIC,))
    for name, args in (("join_group", {"request": request}), ("describe_group", {"group": GROUP}),
                       ("list_groups", {})):
        with pytest.raises(CoordinatorUnavailableError, match="loading from the __consumer_offsets") as refused:
            raw.action(cluster.coordinator.address, name, **args)
        assert refused.value.retriable and "3 live data nodes" in str(refused.value)
