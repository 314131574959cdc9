"""The offsets topic (coordinator/offsets_topic.py): commits are keyed records, read back through a cache that
catches up with other writers; a deposed instance's commits are refused; compaction keeps the topic small under a
million commits of the same keys; a damaged commit record is skipped (lost, logged), not raised to every group
call."""
from __future__ import annotations

import logging
import os
import threading
from typing import Iterator

import pyarrow as pa
import pytest

from fabric.common.errors import CoordinatorUnavailableError, StorageError
from fabric.common.waiting import wait_for
from fabric.coordinator.offsets_damage import SkippingReader
from fabric.coordinator.offsets_log import PARTITION_COUNT, LocalOffsetsLog
from fabric.coordinator.offsets_records import OFFSETS_PARTITIONS
from fabric.coordinator.offsets_topic import OffsetsTopic, offsets_partition
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.storage import frame
from fabric.storage.scan import CorruptRangeError, Damage, Frame


def test_commits_are_read_back_by_another_writer_and_deletes_are_tombstones(tmp_path) -> None:
    # two processes of one embedded fabric
    a, b = OffsetsTopic.in_directory(str(tmp_path)), OffsetsTopic.in_directory(str(tmp_path))
    a.commit("g1", {("t", 0): 5, ("t", 1): 7}, "meta")
    b.commit("g2", {("u", 0): 1}, "")
    a.commit("g1", {("t", 0): 6}, "")
    assert {tp: c.offset for tp, c in b.committed("g1").items()} == {("t", 0): 6, ("t", 1): 7}
    assert a.groups() == b.groups() == ["g1", "g2"]
    b.forget_topic("u")
    assert a.delete_offsets("g1", [("t", 1), ("v", 0)]) == [("t", 1)]  # only what the group has
    assert {tp: c.offset for tp, c in b.committed("g1").items()} == {("t", 0): 6}
    assert a.delete_offsets("g1", a.committed("g1")) == [("t", 0)]
    assert a.committed("g1") == {} and b.groups() == []
    assert OffsetsTopic.in_directory(str(tmp_path)).groups() == []  # a fresh cache reads the same from the log


def test_a_deposed_instance_cannot_commit_once_a_newer_one_took_over(tmp_path) -> None:
    epochs = {"old": 1, "new": 2}
    old = OffsetsTopic.in_directory(str(tmp_path), epoch=lambda: epochs["old"])
    old.take_leadership(1)
    old.commit("g", {("t", 0): 3}, "")
    new = OffsetsTopic.in_directory(str(tmp_path), epoch=lambda: epochs["new"])
    new.take_leadership(2)
    with pytest.raises(CoordinatorUnavailableError, match="was deposed.*nothing was written"):
        old.commit("g", {("t", 0): 99}, "")
    new.commit("g", {("t", 1): 4}, "")
    assert {tp: c.offset for tp, c in new.committed("g").items()} == {("t", 0): 3, ("t", 1): 4}
    stale, fresh = old.publish_part("g", {("t", 0): 99}, ""), new.publish_part("g", {("t", 0): 5}, "")
    with stale.log(stale.partition).lock:  # a producer transaction's offsets, checked under the publish's lock
        with pytest.raises(CoordinatorUnavailableError, match="was deposed"):
            stale.check()
        fresh.check()


def test_a_million_commits_of_the_same_keys_keep_the_topic_small(tmp_path) -> None:
    local = LocalOffsetsLog(str(tmp_path), segment_bytes=1 << 20)
    topic = OffsetsTopic(local)
    partitions = 1000
    for n in range(1000):  # 1000 commits of one group's 1000 partitions: a million committed offsets
        topic.commit("big", {("t", p): n for p in range(partitions)}, "")
    written = local.end_offset(offsets_partition("big", topic.partitions))
    assert written == 1_000_000
    wait_for(lambda: local.size_bytes() < 3 << 20, 120, "the background cleaner to compact the offsets topic")
    assert not [r for r in local.compact() if "another process" in r]
    assert local.size_bytes() < 2 << 20, local.size_bytes()
    assert {c.offset for c in OffsetsTopic.in_directory(str(tmp_path)).committed("big").values()} == {999}


def test_compact_waits_for_a_background_pass_of_its_own_process(tmp_path, caplog) -> None:
    local = LocalOffsetsLog(str(tmp_path), segment_bytes=1 << 14)
    topic = OffsetsTopic(local)
    last = topic.partitions - 1  # compact() reaches it after every other partition
    group = next(g for g in (f"g{n}" for n in range(1000)) if offsets_partition(g, topic.partitions) == last)
    plog, reports = local.log(last), []
    compacting = threading.Thread(target=lambda: reports.extend(local.compact()))
    with caplog.at_level(logging.DEBUG, logger="fabric.coordinator.offsets_log"):
        with plog.lock:  # the background pass a roll starts waits for this lock (nothing else competes with it)
            n = 0
            while len(plog.segments()) < 2:
                topic.commit(group, {("t", 0): n}, "")
                n += 1
            compacting.start()
            wait_for(lambda: "waiting for this process's background pass" in caplog.text, 60, "compact() to wait")
        compacting.join()
    assert len(reports) == topic.partitions and "another process" not in reports[last], reports[last]
    assert {c.offset for c in topic.committed(group).values()} == {n - 1}


def test_processes_opening_a_new_offsets_directory_together_agree_on_its_partition_count(tmp_path) -> None:
    """Counting partition directories, one opener could count those another was still making, and send a group's
    commits to another partition than the others read (a CI run lost commits so); the count file decides."""
    def open_log(directory: str, barrier: threading.Barrier, counts: list[int]) -> None:
        barrier.wait()
        counts.append(LocalOffsetsLog(directory).partitions)
    for attempt in range(20):
        counts: list[int] = []
        args = (str(tmp_path / str(attempt)), threading.Barrier(3), counts)
        threads = [threading.Thread(target=open_log, args=args) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert counts == [OFFSETS_PARTITIONS] * 3, f"attempt {attempt}: {counts}"


def test_an_offsets_directory_of_an_earlier_version_keeps_its_count_and_a_damaged_count_is_refused(tmp_path) -> None:
    directory = tmp_path / "offsets"
    for p in range(5):  # written before the count file existed
        (directory / str(p)).mkdir(parents=True)
    assert LocalOffsetsLog(str(directory)).partitions == 5
    assert (directory / PARTITION_COUNT).read_text() == "5\n"
    (directory / PARTITION_COUNT).write_text("five")
    with pytest.raises(StorageError, match="holds 'five', not its partition count; write the count"):
        LocalOffsetsLog(str(directory))
    (directory / PARTITION_COUNT).write_text("3\n")  # lowered by hand: groups would map to other partitions
    with pytest.raises(StorageError, match=r"says 3 partitions, but it has partition directories up to 4; write "
                                           r"the count of its partition directories \(5\)"):
        LocalOffsetsLog(str(directory))


def _flip_a_payload_byte(directory: str, partition: int, offset: int) -> None:
    """Bit rot in the frame of the offsets topic's partition that starts at `offset`."""
    seg = LocalOffsetsLog(directory).log(partition).segments()[-1]
    found = next(item for item in seg.walk(seg.data_start, seg.base_offset)
                 if isinstance(item, Frame) and item.header.base_offset == offset)
    with open(seg.path, "r+b") as f:
        f.seek(found.position + frame.HEADER_SIZE + found.header.length // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def _damaged_last_commit(tmp_path) -> tuple[str, str, int, int]:
    """An embedded fabric's store (its metadata database's path) where groups `a` and `b`, of one offsets
    partition, committed three times each in turn, `a`'s last commit (its two records) damaged on disk; the path,
    the other group, the partition and the damaged commit's first offset."""
    path = str(tmp_path / "__fabric" / "metadata.db")
    os.makedirs(os.path.dirname(path))
    store = SqliteCoordinator(path)
    directory = os.path.join(os.path.dirname(path), "__consumer_offsets")
    partition = offsets_partition("a", store.offsets_topic.partitions)
    assert offsets_partition("b", store.offsets_topic.partitions) != partition  # b's commits go elsewhere...
    b = next(g for g in (f"b{n}" for n in range(1000)) if offsets_partition(g, store.offsets_topic.partitions)
             == partition)  # ...so another b, whose commits come before and after a's damaged one
    for n in (1, 2, 3):
        if n == 3:
            damaged = LocalOffsetsLog(directory).end_offset(partition)
        store.commit_offsets("a", {("t", 0): n, ("t", 1): 10 + n}, f"a{n}")
        store.commit_offsets(b, {("t", 0): 20 + n}, f"b{n}")
    store.close()
    _flip_a_payload_byte(directory, partition, damaged)
    return path, b, partition, damaged


def test_a_damaged_commit_record_is_skipped_and_logged_not_raised_to_every_group_call(tmp_path, caplog) -> None:
    """Every group call failed on a damaged record of __consumer_offsets (CorruptRangeError, advising a seek no
    user can make in the internal topic); as Kafka's coordinator, the load skips it: its commits are lost."""
    path, b, partition, damaged = _damaged_last_commit(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fabric.coordinator.offsets_damage"):
        store = SqliteCoordinator(path)
        assert store.list_groups() == sorted(["a", b])
        assert {tp: (c.offset, c.metadata) for tp, c in store.committed(b).items()} == {("t", 0): (23, "b3")}
        assert {tp: (c.offset, c.metadata) for tp, c in store.committed("a").items()} == {
            ("t", 0): (2, "a2"), ("t", 1): (12, "a2")}  # the previous commit, not the damaged one
        store.commit_offsets("a", {("t", 0): 4}, "a4")
        assert {tp: c.offset for tp, c in store.committed("a").items()} == {("t", 0): 4, ("t", 1): 12}
        store.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "fabric.coordinator.offsets_damage"]
    assert len(warnings) == 1 and warnings[0].startswith(f"__consumer_offsets-{partition}: offsets {damaged}.."
                                                         f"{damaged + 1} at byte "), warnings
    assert "CRC check failed" in warnings[0] and "lost" in warnings[0]
    again = SqliteCoordinator(path)  # a fresh cache reads the new commit back, past the damage
    assert {tp: c.offset for tp, c in again.committed("a").items()} == {("t", 0): 4, ("t", 1): 12}
    assert again.delete_offsets(b, [("t", 0)]) == [("t", 0)] and again.list_groups() == ["a"]
    again.close()


def test_an_owned_offsets_log_loads_past_a_damaged_commit_record(tmp_path, caplog) -> None:
    """A coordinator instance taking the leadership of the partitions (a cluster's replicated topic) loads them
    skipping the damage as well."""
    path, b, partition, damaged = _damaged_last_commit(tmp_path)

    class Owned(LocalOffsetsLog):
        shared = False
    topic = OffsetsTopic(Owned(os.path.join(os.path.dirname(path), "__consumer_offsets")))
    with caplog.at_level(logging.WARNING, logger="fabric.coordinator.offsets_damage"):
        topic.take_leadership(1)
    assert topic.groups() == sorted(["a", b])
    assert {tp: c.offset for tp, c in topic.committed("a").items()} == {("t", 0): 2, ("t", 1): 12}
    assert {tp: c.offset for tp, c in topic.committed(b).items()} == {("t", 0): 23}
    assert f"__consumer_offsets-{partition}: offsets {damaged}..{damaged + 1} at byte" in caplog.text


def test_damage_whose_end_is_unknown_is_raised_not_skipped() -> None:
    """Nothing says where to read on after it: skipping to the end would serve no later commit either."""
    def read(partition: int, start: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        raise CorruptRangeError(Damage("seg", 64, 128, start, None, "a torn frame"))
        yield  # (a generator, as OffsetsLog.read)
    skipped: list[int] = []
    with pytest.raises(CorruptRangeError, match="offsets from 5 on"):
        list(SkippingReader(read).read(0, 5, skipped.append))
    assert skipped == []
