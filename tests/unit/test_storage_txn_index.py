"""Segments' transaction indexes (fabric/storage/txn_index.py): a partition's transaction state rebuilt from them
is the state its frame headers give, whatever was appended, rolled, truncated or reopened; a rebuild walks only
the frames past them; an index that is torn, of a replaced file, or of a truncated segment is walked instead."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric.common.types import ProducerBatch
from fabric.storage import txn_index
from fabric.storage.segment import Segment

OPS = st.lists(st.one_of(st.tuples(st.just("begin")), st.tuples(st.just("more"), st.integers(0, 7)),
                         st.tuples(st.just("end"), st.integers(0, 7), st.booleans()), st.tuples(st.just("plain")),
                         st.tuples(st.just("reopen")), st.tuples(st.just("truncate"), st.integers(1, 4))),
               max_size=40)


@pytest.mark.parametrize("write_after", [txn_index.WRITE_AFTER_BYTES, 200])
@settings(max_examples=40, deadline=None,  # (monkeypatch: the same patch for every example)
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_state_rebuilt_from_the_indexes_is_the_state_of_the_frames(replicas, storage, monkeypatch, write_after,
                                                                        ops) -> None:
    """Random transactions (each producer id one transaction, whose frames may span segments of one or two
    frames), plain appends, reopens and truncations: after each, the log's state, kept as it appends or rebuilt
    from indexes and a walk, is what its headers say."""
    monkeypatch.setattr(txn_index, "WRITE_AFTER_BYTES", write_after)
    directory = tempfile.mkdtemp()
    try:
        plog = replicas.open(directory)
        plog.transactions  # noqa: B018 (loaded from the start: appends keep it as they go)
        sequences: dict[int, int] = {}  # producer id -> next sequence, of transactions that may append more
        ended: list[int] = []
        next_id = 100
        for op in ops:
            if op[0] == "begin":
                sequences[next_id] = 1
                plog.append(storage.make_batch([b"b%d" % next_id]), producer=ProducerBatch(next_id, 0, 0),
                            transactional=True)
                next_id += 1
            elif op[0] == "more" and sequences:
                pid = sorted(sequences)[op[1] % len(sequences)]
                plog.append(storage.make_batch([b"m%d" % pid] * 3), producer=ProducerBatch(pid, 0, sequences[pid]),
                            transactional=True)
                sequences[pid] += 3
            elif op[0] == "end" and (sequences or ended):
                ids = sorted(sequences) + ended
                pid = ids[op[1] % len(ids)]
                plog.write_marker(pid, 0, commit=op[2])
                sequences.pop(pid, None)
                ended.append(pid)
            elif op[0] == "plain":
                plog.append(storage.make_batch([b"p"]))
            elif op[0] == "reopen":
                plog = replicas.open(directory)
            elif op[0] == "truncate":
                bases = [h.base_offset for h in plog.headers(plog.end_offset)]
                if len(bases) >= op[1]:
                    plog.truncate_to(bases[-op[1]])
                    ended += sorted(sequences)  # (their producers' sequences may be cut: they only end now)
                    sequences.clear()
            storage.assert_transactions_agree(plog)
        storage.assert_transactions_agree(replicas.open(directory))
    finally:
        shutil.rmtree(directory)


def transactions_across_segments(replicas, storage, directory: str):
    """A replica log of one- and two-frame segments: producer 1's transaction aborted across three of them,
    producer 2's committed, producer 3's open; its state loaded once (the sealed segments' indexes written)."""
    plog = replicas.open(directory)
    for pid, seq in ((1, 0), (2, 0), (1, 1), (3, 0), (1, 2)):
        plog.append(storage.make_batch([b"t%d-%d" % (pid, seq)]), producer=ProducerBatch(pid, 0, seq),
                    transactional=True)
        plog.append(storage.make_batch([b"plain"]))
    plog.write_marker(1, 0, commit=False)
    plog.write_marker(2, 0, commit=True)
    plog.append(storage.make_batch([b"tail"]))
    assert plog.transactions.open_transactions() == {3: 6}
    return plog


def test_a_rebuild_walks_only_the_frames_past_each_segments_index(tmp_path, replicas, storage,
                                                                  monkeypatch) -> None:
    plog = transactions_across_segments(replicas, storage, str(tmp_path / "p"))
    sealed = plog.segments()[:-1]
    assert len(sealed) >= 4 and all(os.path.exists(seg.txn_index_path) for seg in sealed)
    walked: list[tuple[str, int]] = []
    walk = Segment.walk

    def recorded(self, position, expected, buf=None, **options):
        walked.append((self.path, position))
        return walk(self, position, expected, buf, **options)
    monkeypatch.setattr(Segment, "walk", recorded)
    reopened = replicas.open(str(tmp_path / "p"))
    assert reopened.transactions.open_transactions() == {3: 6}
    assert reopened.transactions.aborted_count() == 1
    starts = dict(walked)
    assert all(starts[seg.path] == seg.size for seg in sealed)  # each walked from its end: nothing
    assert starts[reopened.segments()[-1].path] < reopened.segments()[-1].size  # the active one is walked


def test_a_truncated_segment_loses_its_index_and_the_state_follows_its_frames(tmp_path, replicas,
                                                                              storage) -> None:
    plog = transactions_across_segments(replicas, storage, str(tmp_path / "p"))
    holding = [seg for seg in plog.segments()[:-1] if seg.base_offset <= 11 < seg.base_offset + 4]
    assert holding and os.path.exists(holding[0].txn_index_path)
    marker = [h.base_offset for h in plog.headers(plog.end_offset) if h.is_control][-1]  # producer 2's commit
    plog.truncate_to(marker)
    assert plog.transactions.open_transactions() == {2: 2, 3: 6}
    reopened = replicas.open(str(tmp_path / "p"))
    assert reopened.transactions.open_transactions() == {2: 2, 3: 6}
    storage.assert_transactions_agree(reopened)


@pytest.mark.parametrize("damage", ["torn", "another segment's", "of a replaced data file"])
def test_an_index_that_cannot_be_trusted_is_walked_instead_and_written_again(tmp_path, replicas, storage,
                                                                             damage) -> None:
    plog = transactions_across_segments(replicas, storage, str(tmp_path / "p"))
    first, second = plog.segments()[:2]
    if damage == "torn":
        with open(first.txn_index_path, "r+b") as f:
            f.truncate(os.path.getsize(first.txn_index_path) - 3)
    elif damage == "another segment's":
        shutil.copyfile(second.txn_index_path, first.txn_index_path)
    else:  # the same bytes in a new file (as a cleaner's swap makes): the recorded inode no longer matches
        shutil.copyfile(first.path, first.path + ".copy")
        os.replace(first.path + ".copy", first.path)
    assert txn_index.read(first) is None
    reopened = replicas.open(str(tmp_path / "p"))
    assert reopened.transactions.open_transactions() == {3: 6}
    storage.assert_transactions_agree(reopened)
    assert txn_index.read(first) is not None  # walked, and indexed again
