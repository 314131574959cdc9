"""Commits gathered over one turn of a server's loop (coordinator/commit_batch.py), over a real offsets topic in
a directory: the commits of a batch go to each offsets partition in one append, in arrival order, each caller
answered once it is written; a caller whose check fails is answered alone and the others are still written; a
refused append fails every caller of its batch and writes nothing; outside a batch a commit is written at once."""
from __future__ import annotations

import itertools

import pytest

from fabric.common.errors import CoordinatorUnavailableError, IllegalGenerationError
from fabric.coordinator.commit_batch import CommitBatch
from fabric.coordinator.offsets_log import LocalOffsetsLog
from fabric.coordinator.offsets_topic import OffsetsTopic, offsets_partition


def groups_of_one_partition(count: int, partitions: int) -> list[str]:
    """`count` group names whose offsets share one offsets partition."""
    names = (f"g{n}" for n in itertools.count())
    first = next(names)
    return [first, *itertools.islice((g for g in names if offsets_partition(g, partitions)
                                      == offsets_partition(first, partitions)), count - 1)]


def fenced() -> None:
    raise IllegalGenerationError("generation 1 is stale; rejoin")


def test_a_batch_appends_each_partitions_commits_once_and_answers_each(tmp_path) -> None:
    local = LocalOffsetsLog(str(tmp_path))
    topic = OffsetsTopic(local)
    a, b, c = groups_of_one_partition(3, topic.partitions)
    partition = offsets_partition(a, topic.partitions)
    before = local.end_offset(partition)
    batch = CommitBatch()
    with batch.collecting() as first:
        topic.commit(a, {("t", 0): 5, ("t", 1): 6}, "m")
    with batch.collecting() as second:
        topic.commit(b, {("t", 0): 7}, "", fenced)
    with batch.collecting() as third:
        topic.commit(c, {("t", 0): 8}, "")
    assert local.end_offset(partition) == before and topic.committed(a) == {}  # nothing written yet
    assert [len(first), len(second), len(third)] == [1, 1, 1]
    batch.write()
    assert first[0].done.result() is None and third[0].done.result() is None
    with pytest.raises(IllegalGenerationError, match="stale"):
        second[0].done.result()
    assert local.end_offset(partition) == before + 3  # a's two records and c's, not b's
    frames = [fetched.offset for fetched in local._logs[partition].fetch(before, 1 << 20, before + 3)]
    assert frames == [before], frames  # one append
    assert {tp: o.offset for tp, o in topic.committed(a).items()} == {("t", 0): 5, ("t", 1): 6}
    assert topic.committed(b) == {} and topic.committed(c)[("t", 0)].offset == 8
    reread = OffsetsTopic.in_directory(str(tmp_path))  # what the log holds, read afresh
    assert reread.committed(c)[("t", 0)].offset == 8 and reread.committed(b) == {}


def test_a_refused_append_fails_every_commit_of_its_batch(tmp_path) -> None:
    epochs = {"old": 1, "new": 2}
    old = OffsetsTopic.in_directory(str(tmp_path), epoch=lambda: epochs["old"])
    old.take_leadership(1)
    new = OffsetsTopic.in_directory(str(tmp_path), epoch=lambda: epochs["new"])
    new.take_leadership(2)
    a, b = groups_of_one_partition(2, old.partitions)
    batch = CommitBatch()
    with batch.collecting() as queued:
        old.commit(a, {("t", 0): 1}, "")
        old.commit(b, {("t", 0): 2}, "")
    batch.write()
    for one in queued:
        with pytest.raises(CoordinatorUnavailableError, match="was deposed"):
            one.done.result()
    assert new.committed(a) == new.committed(b) == {}


def test_outside_a_batch_a_commit_is_written_at_once(tmp_path) -> None:
    topic = OffsetsTopic.in_directory(str(tmp_path))
    batch = CommitBatch()
    with batch.collecting():
        pass
    topic.commit("g", {("t", 0): 3}, "")
    assert topic.committed("g")[("t", 0)].offset == 3
    batch.write()  # nothing queued: nothing happens
    assert topic.committed("g")[("t", 0)].offset == 3
