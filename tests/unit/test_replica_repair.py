"""Scrubbing and repair on data nodes (fabric/server/node/scrubber.py, repair.py) over three real ReplicaManagers
and their data directories, the followers copying the leader's frames through its replica_fetch and the nodes
asking each other for copies through replica_range (called directly, as their Flight service would): a replica
restarted with a flipped byte is unverified until scrubbed, then finds and repairs it; a leader that meets damage
while serving a fetch repairs it from a follower first; CorruptRecordError reaches a reader only when no copy is
intact; the scrubber keeps to its rate."""
from __future__ import annotations

import logging
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fabric.common.errors import CorruptRecordError, KafkaStorageError, LeaderNotAvailableError
from fabric.common.types import LeaderAndIsr, NodeAssignment, PartitionAssignment, PartitionRegistration, TopicInfo
from fabric.common.waiting import wait_for
from fabric.server.node import repair
from fabric.server.node import scrubber as scrubber_module
from fabric.server.node.metrics import ReplicationCollector
from fabric.server.node.repair import Repairer
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.scrubber import Scrubber
from fabric.storage import frame
from fabric.storage.cut_barrier import CutBarrier, CutPending

TP = ("t", 0)
VIEW = NodeAssignment(1, {TP: PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(1, 0, (1, 2, 3), 0,
                                                                                                  1))},
                      {"t": TopicInfo("t", 1, config={"segment.bytes": "2000"})})
FAST = 1 << 30  # bytes per second: no wait in these tests


def start(tmp_path, node_id: int, nodes: dict[int, ReplicaManager], verify: bool = False) -> ReplicaManager:
    """Node `node_id`'s replicas (again, after a restart), asking `nodes` for copies."""
    replicas = ReplicaManager(node_id, str(tmp_path / f"node{node_id}"), verify_on_start=verify)
    replicas.repairer.copy = lambda n, tp, first, end, topic_id: nodes[n].replica_range(*tp, first, end,
                                                                                         topic_id=topic_id)
    replicas.apply(VIEW)
    nodes[node_id] = replicas
    return replicas


def replicate(nodes: dict[int, ReplicaManager]) -> int:
    """Followers 2 and 3 fetch from leader 1 until all hold its log and its high watermark; that offset."""
    for _ in range(20):
        for follower in (2, 3):
            replica = next(r for r in nodes[follower].hosted() if r.tp == TP)
            [answer] = nodes[1].replica_fetch(follower, [(*TP, replica.log.end_offset, 0, "")], max_wait_ms=0)
            replica.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
        ends = {r.hw for n in nodes.values() for r in n.hosted()}
        if len(ends) == 1 and nodes[1].hosted()[0].log.end_offset in ends:
            return ends.pop()
    raise AssertionError("the followers did not catch up")


@pytest.fixture
def nodes(tmp_path, storage) -> dict[int, ReplicaManager]:
    """Three nodes holding t-0 (leader 1), 20 records in several segments, all replicated and committed."""
    made: dict[int, ReplicaManager] = {}
    for i in (1, 2, 3):
        start(tmp_path, i, made)
    for b in range(10):
        made[1].append("t", 0, storage.make_batch([f"v{b}-{i}".encode() * 20 for i in range(2)]), acks="1")
    assert replicate(made) == 20
    return made


def flip(storage, replicas: ReplicaManager, index: int) -> frame.FrameHeader:
    """Flip a payload byte of the `index`th frame of the node's replica; its header."""
    directory = replicas.hosted()[0].log.directory
    path, pos, header, _ = storage.committed_frames(directory, 20)[index]
    with open(path, "r+b") as f:
        f.seek(pos + frame.HEADER_SIZE + 10)
        old = f.read(1)[0]
        f.seek(pos + frame.HEADER_SIZE + 10)
        f.write(bytes([old ^ 0x20]))
    return header


def values(replicas: ReplicaManager) -> list[bytes]:
    """Every record of the leader's t-0, fetched as a consumer does (from where the last fetch ended)."""
    out: list[bytes] = []
    while len(out) < 20:
        fetched = replicas.fetch("t", 0, len(out), 1 << 30)
        out += [v for f in fetched for v in f.batch.column(3).to_pylist()]
    return out


def test_a_follower_restarted_with_a_flipped_byte_is_unverified_until_scrubbed_then_repairs_it(
        tmp_path, storage, nodes, replicas, caplog) -> None:
    for node in nodes.values():
        node.maintain()  # high watermarks checkpointed, as a node does every 250 ms
    header = flip(storage, nodes[2], 7)
    restarted = start(tmp_path, 2, nodes, verify=True)
    assert restarted.health.unhealthy() == []  # not reported: a restart costs no ISR membership, the scrub comes first
    assert restarted.describe()[0]["health"] == "Unverified"
    scrubber = Scrubber(restarted, FAST)
    with caplog.at_level(logging.INFO):
        assert scrubber.run_once() > 0
    [finding] = [r.message for r in caplog.records if "found damage" in r.message]
    assert finding.startswith(f"node 2: scrubbing partition t-0 found damage: offsets {header.base_offset}.."
                              f"{header.next_offset - 1} at byte ") and finding.endswith("(its CRC check failed)")
    assert "with node 1's copy" in caplog.text  # the first in-sync replica asked
    assert restarted.health.unhealthy() == [] and restarted.repairer.repaired == 1
    assert replicas.files(nodes[2].hosted()[0].log.directory) == replicas.files(nodes[1].hosted()[0].log.directory)
    registry = CollectorRegistry()
    registry.register(ReplicationCollector(restarted, scrubber))
    scraped = generate_latest(registry).decode()
    assert "fabric_log_damaged_ranges_total 1.0" in scraped and "fabric_log_repaired_ranges_total 1.0" in scraped
    caplog.clear()
    scrubber.run_once()  # a later pass finds nothing and logs nothing at WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_leader_meeting_damage_while_serving_repairs_it_from_a_follower_before_answering(storage, nodes) -> None:
    expected = values(nodes[1])
    flip(storage, nodes[1], 3)
    assert values(nodes[1]) == expected  # a consumer's fetch: repaired from node 2's copy first
    assert (nodes[1].repairer.repaired, nodes[1].health.damage_found, nodes[1].health.unhealthy()) == (1, 1, [])
    flip(storage, nodes[1], 5)
    follower = next(r for r in nodes[3].hosted())
    follower.log.truncate_to(0)  # a follower copying everything again (a replaced disk)
    assert replicate(nodes) == 20  # its fetches are served, the damage repaired on the way
    assert nodes[1].repairer.repaired == 2


def test_corrupt_record_error_reaches_a_reader_only_when_no_copy_is_intact(storage, nodes) -> None:
    header = flip(storage, nodes[1], 4)
    flip(storage, nodes[2], 4)
    copies = nodes[1].repairer.copy

    def unreachable(node_id, *args):
        if node_id == 3:
            raise LeaderNotAvailableError("node 3 at 127.0.0.1:1 did not answer")
        return copies(node_id, *args)
    nodes[1].repairer.copy = unreachable
    with pytest.raises(KafkaStorageError, match=r"node 1 cannot read partition t-0: its copy of offsets "
                                                f"{header.base_offset}.* is damaged") as moving:
        nodes[1].fetch("t", 0, header.base_offset, 1 << 20)
    assert moving.value.retriable and nodes[1].health.condition(TP).health.value == "Damaged"
    flip(storage, nodes[3], 4)  # now no copy anywhere is intact
    nodes[1].repairer = Repairer(1, nodes[1].health, copies, lambda tp: (), lambda topic: "")  # (no backoff)
    with pytest.raises(CorruptRecordError, match=f"offsets {header.base_offset}"):
        nodes[1].fetch("t", 0, header.base_offset, 1 << 20)
    assert nodes[1].fetch("t", 0, header.next_offset, 1 << 20)  # everything else is still served


class CutOnce(CutBarrier):
    """A log's cut barrier whose walk meets a pending cut at its `at`th check, once (a truncation arriving
    mid-walk)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.checks, self.at = 0, at

    def check(self) -> None:
        self.checks += 1
        if self.checks == self.at:
            raise CutPending()
        super().check()


def test_a_scrub_stopped_by_a_truncation_walks_the_replica_again(tmp_path, storage, nodes, caplog) -> None:
    """A walk that a pending cut stops (cut_barrier) starts again, so the pass still finds the damage."""
    for node in nodes.values():
        node.maintain()
    header = flip(storage, nodes[2], 7)
    restarted = start(tmp_path, 2, nodes, verify=True)
    [replica] = restarted.hosted()
    barrier = replica.log.cut_barrier = CutOnce(at=3)
    with caplog.at_level(logging.INFO):
        assert Scrubber(restarted, FAST).run_once() > 0
    assert barrier.checks > barrier.at  # stopped at its third frame, then walked again to the end
    assert f"found damage: offsets {header.base_offset}..{header.next_offset - 1}" in caplog.text
    assert restarted.repairer.repaired == 1 and restarted.describe()[0]["health"] == "Healthy"


def test_the_scrubber_keeps_to_its_rate(nodes) -> None:
    walked = Scrubber(nodes[1], FAST).run_once()
    rate = walked * 2  # half a second's worth
    began = time.monotonic()
    assert Scrubber(nodes[1], rate).run_once() == walked
    assert time.monotonic() - began >= 0.45


def test_the_scrubber_keeps_to_its_share_of_the_cpu(nodes) -> None:
    """A pass sleeps after each replica so that its thread's CPU time stays BUSY_SHARE of the pass's time, which
    leaves the interpreter lock free for the node's requests most of the time; stopped during a sleep, it ends."""
    scrubber, [replica] = Scrubber(nodes[1], FAST), nodes[1].hosted()
    began, cpu_began = time.monotonic(), time.thread_time()
    for _ in range(10):
        scrubber._scrub_paced(replica)
    wall, cpu = time.monotonic() - began, time.thread_time() - cpu_began
    assert wall >= 0.8 * cpu / scrubber_module.BUSY_SHARE  # (0.8: the sleeps' own CPU)
    stopping = Scrubber(nodes[1], FAST)
    stopping.stop()
    with pytest.raises(scrubber_module.Stopped):
        stopping.run_once()


def test_a_replica_of_many_frames_is_paced_within_its_walk(nodes, monkeypatch) -> None:
    """A walk sleeps for its share every SLICE_S of CPU, inside a replica too: one of many small frames costs more
    CPU than the byte rate bounds, and would hold the interpreter lock for its whole walk (here every frame's
    slice is spent, so the walk sleeps after each one: the sleeps are recorded, not slept)."""
    monkeypatch.setattr(scrubber_module, "SLICE_S", 0.0)
    scrubber, [replica] = Scrubber(nodes[1], FAST), nodes[1].hosted()
    slept: list[float] = []

    def wait(timeout: float | None = None) -> bool:
        slept.append(timeout or 0.0)
        return False
    monkeypatch.setattr(scrubber._stopped, "wait", wait)
    scrubber.scrub(replica)
    frames = sum(1 for seg in replica.log.segments() for _ in seg.walk(seg.data_start, seg.base_offset))
    assert frames > 1 and len(slept) >= frames  # a sleep per frame walked, not one after the replica


def test_damage_a_pass_could_not_repair_is_repaired_between_passes(tmp_path, storage, nodes, monkeypatch) -> None:
    """No reader meets a follower's damage: when the other replicas do not answer during the pass that found it,
    the scrubber tries the repair again between passes (as often as the repairer allows), not a whole backoff
    later."""
    monkeypatch.setattr(repair, "REPAIR_BACKOFF_S", 0.05)
    for node in nodes.values():
        node.maintain()
    flip(storage, nodes[2], 7)
    restarted = start(tmp_path, 2, nodes, verify=True)
    answering = {"now": False}
    copy = restarted.repairer.copy

    def unreachable_at_first(*args):
        if not answering["now"]:
            raise LeaderNotAvailableError("the node did not answer")
        return copy(*args)
    restarted.repairer.copy = unreachable_at_first
    scrubber = Scrubber(restarted, FAST, backoff_ms=600_000).start()
    try:
        wait_for(lambda: restarted.health.damage(TP), 30, "the pass to find the damage")
        assert restarted.repairer.repaired == 0
        answering["now"] = True
        wait_for(lambda: restarted.repairer.repaired == 1, 30, "the repair, well before the next pass")
    finally:
        scrubber.stop()
    assert restarted.health.damage(TP) == [] and restarted.health.unhealthy() == []


def test_a_restarted_follower_is_verified_only_once_its_high_watermark_passed_what_was_on_disk(
        tmp_path, storage, nodes, replicas) -> None:
    """A node checkpoints high watermarks only now and then: one restarted before the checkpoint caught up starts
    with a high watermark below frames that were on disk all along. A walk below it cannot verify the replica (the
    damage above is not reached); the replica stays unverified until a walk below a high watermark past them
    (once it fetched from its leader) finds the damage and repairs it."""
    header = flip(storage, nodes[2], 7)  # no maintain(): no high watermark checkpointed, the restart starts at 0
    restarted = start(tmp_path, 2, nodes, verify=True)
    replica = restarted.hosted()[0]
    assert replica.hw < header.base_offset < replica.log.end_offset
    scrubber = Scrubber(restarted, FAST)
    scrubber.run_once()
    assert restarted.describe()[0]["health"] == "Unverified" and restarted.health.damage_found == 0
    assert scrubber._due_unverified() == []  # (nothing new to walk until its high watermark moves)
    assert replicate(nodes) == 20
    assert scrubber._due_unverified() == [replica]
    scrubber.run_once()
    assert restarted.health.damage_found == 1 and restarted.repairer.repaired == 1
    assert restarted.describe()[0]["health"] == "Healthy"
    assert replicas.files(replica.log.directory) == replicas.files(nodes[1].hosted()[0].log.directory)
