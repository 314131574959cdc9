"""A data node's replicas (fabric/server/node/replica_manager.py) over a real data directory: the controller's
views make it lead, follow or drop partitions; a deposed controller's view is ignored; requests are served only
where it leads; its directory belongs to its node id."""
from __future__ import annotations

import os
import threading
from dataclasses import replace

import pytest

from fabric.common.errors import InvalidConfigError, InvalidRequestError, NotLeaderError, UnknownTopicOrPartitionError
from fabric.common.types import LeaderAndIsr, NodeAssignment, PartitionAssignment, PartitionRegistration, TopicInfo
from fabric.common.waiting import wait_for
from fabric.server.node import partition as partition_module
from fabric.server.node import progress_clock, replica_manager
from fabric.server.node.append_routing import append_waits
from fabric.server.node.replica_manager import ReplicaManager


def view(controller_epoch: int, leaders: dict[int, int | None], epoch: int = 0) -> NodeAssignment:
    """Node 1's view of topic t: partition p led by leaders[p] (None: offline) at leader epoch `epoch`."""
    partitions = {("t", p): PartitionRegistration(PartitionAssignment((1, 2)), LeaderAndIsr(
        leader, epoch, (1, 2) if leader is None else (leader,), epoch, controller_epoch))
        for p, leader in leaders.items()}
    return NodeAssignment(controller_epoch, partitions, {"t": TopicInfo("t", len(leaders))})


def test_it_serves_what_it_leads_and_follows_newer_views_only(tmp_path, storage) -> None:
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    asked = []
    replicas.refresh = lambda: asked.append(True)
    with pytest.raises(NotLeaderError, match="hosts no replica of t-0"):
        replicas.append("t", 0, storage.make_batch([b"x"]))
    assert asked  # an unknown partition asks the controller first
    replicas.apply(view(1, {0: 1, 1: 2}))
    assert replicas.leaders() == [("t", 0)]
    assert replicas.append("t", 0, storage.make_batch([b"a", b"b"]), leader_epoch=0) == 0
    assert replicas.partition_state("t", 0).end_offset == 2
    assert replicas.leader_high_watermarks() == {("t", 0): 2}  # what a heartbeat reports: t-1 is followed here
    with pytest.raises(NotLeaderError, match="does not lead t-1"):
        replicas.fetch("t", 1, 0, 1 << 20)
    replicas.apply(view(0, {0: 2, 1: 2}, epoch=5))  # a deposed controller's view
    assert replicas.leaders() == [("t", 0)]
    replicas.apply(view(2, {0: None, 1: 2}, epoch=1))
    assert replicas.leaders() == []
    replicas.apply(view(2, {0: 1, 1: 2}, epoch=3))
    assert replicas.append("t", 0, storage.make_batch([b"c"])) == 2
    directory = str(tmp_path / "node1" / "t" / "0")
    stamped = [h.leader_epoch for path in storage.data_files(directory) for _, h, _ in storage.scan_frames(path)
               if not h.is_schema]
    assert stamped == [0, 3]  # each frame carries the epoch its leader appended it under


def test_an_append_waits_on_a_worker_only_where_it_may_block(tmp_path, storage) -> None:
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    plain = {"topic": "t", "partition": 0, "leader_epoch": 2, "acks": "all"}
    assert append_waits(replicas, plain)  # not hosted yet: the append refreshes the assignment first
    assigned = view(1, {0: 1, 1: 2}, epoch=2)
    replicas.apply(replace(assigned, partitions={**assigned.partitions, ("f", 0): assigned.partitions[("t", 0)]},
                           topics={"t": TopicInfo("t", 2, topic_id="id-t"),
                                   "f": TopicInfo("f", 1, {"flush.messages": "1"})}))
    assert replicas.leaders() == [("f", 0), ("t", 0)]
    assert replicas.topic_configs() == {"f": {"flush.messages": "1"}, "t": {}}  # as the node applies them (status)
    assert not append_waits(replicas, plain) and not append_waits(replicas, {**plain, "leader_epoch": None})
    assert not append_waits(replicas, {**plain, "topic_id": "id-t"})
    for waits in ({**plain, "leader_epoch": 3},  # newer than the node knows: it asks the controller
                  {**plain, "topic_id": "id-other"},  # the topic was created again: it asks too
                  {**plain, "transactional": True},  # verified with the coordinator
                  {**plain, "topic": "f"},  # fsyncs after each message
                  {**plain, "partition": [0]}, {**plain, "topic": 5}, {**plain, "leader_epoch": "2"}):  # refused there
        assert append_waits(replicas, waits), waits


def test_a_restarted_leader_has_its_producers_loaded_once_a_follower_fetches(tmp_path, storage) -> None:
    """After a restart the producers' state is not in memory: an idempotent append would read it first, so it is
    served on a worker thread; a follower's fetch has it loaded in the background, and appends go on the event
    loop again, a retry answered from it."""
    before = ReplicaManager(1, str(tmp_path / "node1"))
    before.apply(view(1, {0: 1}))
    assert before.append("t", 0, storage.make_batch([b"a"]), producer_id=7, producer_epoch=0, base_sequence=0) == 0
    before.stop()
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(2, {0: 1}, epoch=1))
    idempotent = {"topic": "t", "partition": 0, "leader_epoch": 1, "acks": "all", "producer_id": 7}
    assert append_waits(replicas, idempotent) and replicas.producer_ids() == 0
    assert not append_waits(replicas, {**idempotent, "producer_id": -1})
    replicas.replica_fetch(2, [("t", 0, 0, 1, "")], max_wait_ms=0)
    wait_for(lambda: replicas.producer_ids() == 1, 30, "the leader to load its producers' state in the background")
    assert not append_waits(replicas, idempotent)
    assert replicas.append("t", 0, storage.make_batch([b"a"]), producer_id=7, producer_epoch=0, base_sequence=0) == 0


def test_a_deleted_topic_loses_its_logs_and_the_directory_keeps_its_owner(tmp_path, storage) -> None:
    """The logs go; a replica another thread still holds (a fetcher's round as the assignment is applied) reads
    as a refusal naming the deletion, which that thread handles as any other, not as a crash of its round."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(1, {0: 1}))
    replicas.append("t", 0, storage.make_batch([b"a"]))
    held = replicas.hosted_replica(("t", 0))
    assert held is not None and os.path.isdir(tmp_path / "node1" / "t" / "0")
    replicas.apply(NodeAssignment(1, {}, {}))
    assert not os.path.exists(tmp_path / "node1" / "t")
    with pytest.raises(UnknownTopicOrPartitionError, match="no longer hosts topic 't': partition t-0 was deleted"):
        assert held.log.end_offset is None  # (raises first)
    with pytest.raises(InvalidConfigError, match="belongs to node 1, not node 2; start it with --id 1"):
        ReplicaManager(2, str(tmp_path / "node1"))


def test_a_topic_created_again_under_its_name_is_served_without_the_old_logs(tmp_path, storage) -> None:
    def topic_view(topic_id: str, epoch: int = 0) -> NodeAssignment:
        base = view(1, {0: 1}, epoch)
        return replace(base, topics={"t": TopicInfo("t", 1, topic_id=topic_id)})
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(topic_view("first"))
    replicas.append("t", 0, storage.make_batch([b"old", b"old"]))
    replicas.apply(topic_view("second"))  # deleted and created again between two heartbeats
    assert replicas.partition_state("t", 0).end_offset == 0
    assert replicas.append("t", 0, storage.make_batch([b"new"])) == 0
    restarted = ReplicaManager(1, str(tmp_path / "node1"))  # the same topic after a restart keeps its logs
    restarted.apply(topic_view("second"))
    assert restarted.partition_state("t", 0).end_offset == 1
    again = ReplicaManager(1, str(tmp_path / "node1"))  # created again while the node was down
    again.apply(topic_view("third"))
    assert again.partition_state("t", 0).end_offset == 0


def test_a_follower_fetches_every_partition_it_copies_from_this_node_in_one_request(tmp_path, storage) -> None:
    """Kafka's replica FetchRequest: an answer per partition (frames, or the error that concerns it alone), held
    while none has frames until one has; once the response's byte budget is spent, later partitions get none."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(1, {0: 1, 1: 1, 2: 2}))  # node 1 leads t-0 and t-1, and follows t-2
    replicas.append("t", 0, storage.make_batch([b"a", b"b"]))
    answers = replicas.replica_fetch(2, [("t", 0, 0, 0, ""), ("t", 1, 0, 0, ""), ("t", 2, 0, 0, "")], max_wait_ms=0)
    assert answers[0].frames.size and answers[0].log_end == 2
    assert answers[1].frames.size == 0 and answers[1].log_end == 0
    assert isinstance(answers[2], NotLeaderError)  # only that partition's answer is an error
    held: list = []
    fetch = threading.Thread(target=lambda: held.extend(replicas.replica_fetch(
        2, [("t", 0, 2, 0, ""), ("t", 1, 0, 0, "")], max_wait_ms=60_000)))
    fetch.start()
    wait_for(lambda: replicas.replica("t", 1, 0)._fetch_waiters, 30, "the fetch to wait for frames")
    assert not held
    replicas.append("t", 1, storage.make_batch([b"c"]))  # new frames in one partition answer the fetch
    fetch.join(30)
    assert held[0].frames.size == 0 and held[1].frames.size and held[1].log_end == 1
    assert not replicas.replica("t", 1, 0)._fetch_waiters  # the fetch no longer waits there
    spent = replicas.replica_fetch(2, [("t", 0, 0, 0, ""), ("t", 1, 0, 0, "")], response_max_bytes=1, max_wait_ms=0)
    assert spent[0].frames.size and spent[1].frames.size == 0 and spent[1].log_end == 1
    with pytest.raises(InvalidRequestError, match="names a partition twice"):
        replicas.replica_fetch(2, [("t", 0, 0, 0, ""), ("t", 0, 1, 0, "")])
    with pytest.raises(InvalidRequestError, match="must be ints from 0, got 0, -1, 0"):
        replicas.replica_fetch(2, [("t", 0, -1, 0, "")])


def test_a_fetch_that_asks_leaves_out_the_partitions_whose_answer_would_repeat(tmp_path, storage, monkeypatch) -> None:
    """omit_unchanged (follower_fetches): a partition this follower was answered at the log end, with nothing
    appended and the same high watermark since, is None in the answer, and the follower counts as caught up then;
    new frames, a high watermark moved by the other follower, the end of the leadership, and ANSWER_FROM_MEMORY_MS
    passing are each answered in full. The leader's clock is the test's."""
    clock = [1_000_000.0]
    monkeypatch.setattr(progress_clock, "now_ms", lambda: clock[0])
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    three = PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(1, 0, (1, 2, 3), 0, 1))
    replicas.apply(NodeAssignment(1, {("t", 0): three, ("t", 1): three}, {"t": TopicInfo("t", 2)}))
    replicas.append("t", 0, storage.make_batch([b"a", b"b"]), acks="1")

    def fetch(follower: int, *offsets: int) -> list:
        return replicas.replica_fetch(follower, [("t", p, offset, 0, "") for p, offset in enumerate(offsets)],
                                      max_wait_ms=0, omit_unchanged=True)
    first = fetch(2, 0, 0)
    assert first[0].frames.size and first[1].log_end == 0  # never answered before: both in full
    copied = fetch(2, 2, 0)  # t-0's frames copied: its offset moved, so it is answered; t-1 repeats
    assert copied[0].log_end == 2 and copied[0].high_watermark == 0 and copied[1] is None
    clock[0] += 10
    assert fetch(2, 2, 0) == [None, None]
    assert [replicas.replica("t", p, 0).leader.followers[2].caught_up_ms for p in (0, 1)] == [clock[0]] * 2
    assert fetch(3, 2, 0)[0].high_watermark == 2  # follower 3 catches up: the high watermark moves
    moved = fetch(2, 2, 0)
    assert moved[0].high_watermark == 2 and moved[1] is None
    replicas.append("t", 1, storage.make_batch([b"c"]), acks="1")
    appended = fetch(2, 2, 0)
    assert appended[0] is None and appended[1].frames.size
    assert fetch(2, 2, 1)[1].log_end == 1  # t-1 copied: answered at its new end once, then left out
    assert fetch(2, 2, 1) == [None, None]
    clock[0] += partition_module.ANSWER_FROM_MEMORY_MS
    assert all(answer is not None and answer.frames.size == 0 for answer in fetch(2, 2, 1))  # read again
    assert fetch(2, 2, 1) == [None, None]
    held: list = []
    waiting = threading.Thread(target=lambda: held.extend(replicas.replica_fetch(
        2, [("t", 0, 2, 0, ""), ("t", 1, 1, 0, "")], max_wait_ms=60_000, omit_unchanged=True)))
    waiting.start()  # every partition unchanged: the fetch is held, not answered at once
    wait_for(lambda: replicas.replica("t", 1, 0)._fetch_waiters, 30, "the fetch to wait for frames")
    replicas.append("t", 1, storage.make_batch([b"d"]), acks="1")
    waiting.join(30)
    assert held[0] is None and held[1].frames.size
    gone = PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(2, 1, (1, 2, 3), 1, 2))
    replicas.apply(NodeAssignment(2, {("t", 0): gone, ("t", 1): three}, {"t": TopicInfo("t", 2)}))
    assert isinstance(fetch(2, 2, 2)[0], NotLeaderError)  # the leadership ended: answered with its error


def test_the_digest_of_a_view_is_kept_only_while_every_partition_holds_it(tmp_path) -> None:
    """applied_digest (the heartbeat names it, so an unchanged view is not sent again): set once a view was applied
    whole; cleared by a deposed controller's view, and when the node fences its partitions."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(2, {0: 1}), "d1")
    assert replicas.applied_digest == "d1"
    replicas.apply(view(1, {0: 2}), "d0")  # an older controller's view: ignored, and the next heartbeat asks again
    assert replicas.applied_digest == "" and replicas.leaders() == [("t", 0)]
    replicas.apply(view(2, {0: 1}), "d1")
    replicas.fence_all("its registration lapsed")
    assert replicas.applied_digest == ""


def test_a_partition_that_cannot_take_its_role_holds_up_no_other_and_is_tried_again(tmp_path) -> None:
    """A file where a partition's directory goes (an operator's mistake): the partitions after it in the view
    still take theirs; it is reported offline (so the controller does not wait on it), and applied_digest stays
    empty, so the next heartbeat brings the whole view and the partition is tried again; once the file is gone, it
    takes its role and is healthy."""
    (tmp_path / "node1" / "t").mkdir(parents=True)
    (tmp_path / "node1" / "t" / "1").write_text("not a partition directory")
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(2, {0: 1, 1: 1, 2: 1}), "d1")
    assert replicas.leaders() == [("t", 0), ("t", 2)] and replicas.applied_digest == ""
    assert replicas.health.unhealthy() == [("t", 1)]
    assert "cannot take its role" in replicas.health.condition(("t", 1)).reason
    (tmp_path / "node1" / "t" / "1").unlink()
    replicas.apply(view(2, {0: 1, 1: 1, 2: 1}), "d1")
    assert replicas.leaders() == [("t", 0), ("t", 1), ("t", 2)] and replicas.applied_digest == "d1"
    assert replicas.health.unhealthy() == []


def test_a_topic_whose_id_cannot_be_checked_holds_up_no_other_and_is_checked_again(tmp_path, storage) -> None:
    """A file where a topic's directory goes (an operator's mistake) fails the check of its topic id: the other
    topics of the view still take their roles, and the check is tried again with each view, against what the logs
    belonged to before, so a topic created again under its name still loses the old logs."""
    base = view(1, {0: 1})
    two_topics = lambda u_id: replace(base, partitions={**base.partitions, ("u", 0): base.partitions[("t", 0)]},
                                      topics={"t": TopicInfo("t", 1, topic_id="id-t"),
                                              "u": TopicInfo("u", 1, topic_id=u_id)})
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(two_topics("first"))
    replicas.append("u", 0, storage.make_batch([b"old"]))
    topic_id_file = tmp_path / "node1" / "u" / "topic.id"
    topic_id_file.unlink()
    topic_id_file.mkdir()  # reading the id fails with IsADirectoryError, not a storage failure
    replicas.apply(two_topics("second"), "d2")  # u deleted and created again meanwhile
    assert replicas.applied_digest == "" and replicas.append("t", 0, storage.make_batch([b"t"])) == 0
    assert replicas.health.unhealthy() == [("u", 0)]
    replicas.apply(two_topics("second"), "d2")  # still unchecked: tried again, still refused
    assert replicas.applied_digest == "" and replicas.health.unhealthy() == [("u", 0)]
    topic_id_file.rmdir()
    (tmp_path / "node1" / "u" / "topic.id").write_text("first")
    replicas.apply(two_topics("second"), "d2")
    assert replicas.applied_digest == "d2" and replicas.partition_state("u", 0).end_offset == 0
    assert replicas.health.unhealthy() == []


def test_a_maintenance_round_checkpoints_the_high_watermarks_that_moved_of_leaders_and_followers(tmp_path) -> None:
    """maintain() (every 250 ms on a node) writes each replica's high watermark that moved since its last
    checkpoint, a follower's as a leader's, and passes over the followers with nothing to do; a restarted node's
    replicas start from what it wrote."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(1, {0: 2, 1: 2}))  # node 1 follows both partitions
    replicas.hosted_replica(("t", 0)).restart_at(0, 5, 0)  # its leader deleted offsets 0..4: t-0 starts at 5
    assert [replicas.hosted_replica(("t", p)).checkpoint_due() for p in (0, 1)] == [True, False]
    replicas.maintain()
    assert not replicas.hosted_replica(("t", 0)).checkpoint_due()
    restarted = ReplicaManager(1, str(tmp_path / "node1"))
    restarted.apply(view(1, {0: 2, 1: 2}))
    assert [restarted.hosted_replica(("t", p)).hw for p in (0, 1)] == [5, 0]


def test_a_fetch_answered_without_the_frames_it_could_have_is_not_held(tmp_path, storage) -> None:
    """A partition answered without frames though it has some past the follower's offset (no byte budget left for
    it) is served again at once rather than held up to max_wait_ms: the hold knows a partition is at the log end
    from the follower's last answer only when nothing was appended since and that answer found it there."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(1, {0: 1}))
    replicas.append("t", 0, storage.make_batch([b"a", b"b"]))
    answered: list = []
    fetch = threading.Thread(target=lambda: answered.extend(replicas.replica_fetch(
        2, [("t", 0, 0, 0, "")], max_bytes=0, max_wait_ms=60_000, omit_unchanged=True)))
    fetch.start()
    fetch.join(30)
    assert not fetch.is_alive() and answered[0].frames.size == 0 and answered[0].log_end == 2
    caught_up = replicas.replica_fetch(2, [("t", 0, 2, 0, "")], max_wait_ms=0, omit_unchanged=True)
    assert caught_up[0].log_end == 2
    held: list = []
    waiting = threading.Thread(target=lambda: held.extend(replicas.replica_fetch(
        2, [("t", 0, 2, 0, "")], max_wait_ms=60_000, omit_unchanged=True)))
    waiting.start()  # at the log end, nothing appended since its answer: held without reading the log
    wait_for(lambda: replicas.replica("t", 0, 0)._fetch_waiters, 30, "the fetch to wait for frames")
    replicas.append("t", 0, storage.make_batch([b"c"]))
    waiting.join(30)
    assert held[0].frames.size and held[0].log_end == 3


def test_a_log_start_moved_by_background_retention_reaches_a_follower_at_the_log_end(tmp_path, storage) -> None:
    """A follower fetching again at the log end is answered from memory (left out with omit_unchanged) while
    nothing changed; a background maintenance pass whose retention moved the log start tells the replica, so the
    next answer carries the new log start at once (not ANSWER_FROM_MEMORY_MS later)."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    three = PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(1, 0, (1, 2, 3), 0, 1))
    replicas.apply(NodeAssignment(1, {("t", 0): three}, {"t": TopicInfo("t", 1, {"retention.ms": "60000"})}))
    old = storage.now_us() - 3_600_000_000  # an hour ago: past retention.ms
    replicas.append("t", 0, storage.make_batch([b"a", b"b"], [old, old]), acks="1")

    def fetch(follower: int) -> list:
        return replicas.replica_fetch(follower, [("t", 0, 2, 0, "")], max_wait_ms=0, omit_unchanged=True)
    fetch(2), fetch(3)  # both followers at the end: the high watermark covers the old records
    assert fetch(2)[0].high_watermark == 2  # (follower 2 hears of it)
    assert fetch(2) == [None]  # nothing changed since: left out
    [(name, open_log)] = replicas.maintained_partitions()
    assert open_log().maintain()[0] == 1 and open_log().start_offset == 2  # the old segment is gone
    [answer] = fetch(2)
    assert answer is not None and answer.log_start == 2


def test_a_read_that_meets_its_topics_deletion_is_no_storage_failure(tmp_path, storage, monkeypatch) -> None:
    """A partition_state whose topic is deleted between finding its replica and reading its files (a stream's
    planning as the topic goes) answers that the node no longer hosts it; the replica is not marked offline,
    so the topic created again under its name is served here at once."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(view(1, {0: 1}))
    replicas.append("t", 0, storage.make_batch([b"a"]))
    state = replica_manager.partition_ops.state

    def deleted_then_read(*args, **kwargs):
        monkeypatch.setattr(replica_manager.partition_ops, "state", state)
        replicas.apply(NodeAssignment(1, {}, {}))
        return state(*args, **kwargs)
    monkeypatch.setattr(replica_manager.partition_ops, "state", deleted_then_read)
    with pytest.raises(UnknownTopicOrPartitionError, match="no longer hosts t-0, deleted or moved away"):
        replicas.partition_state("t", 0)
    assert not replicas.health.offline(("t", 0))
    replicas.apply(view(2, {0: 1}))
    assert replicas.append("t", 0, storage.make_batch([b"b"])) == 0
