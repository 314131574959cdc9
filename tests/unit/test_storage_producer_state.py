"""Idempotent producers' state in a partition log (fabric/storage/producer_state.py): a retried batch is not
written again and answers its first offset; gaps, fenced epochs and unknown producers are refused with nothing
written; the state is rebuilt from the frame headers after a reopen, and follows a truncation and copied frames; a
producer silent for producer.id.expiration.ms is forgotten, unless its transaction is open."""
from __future__ import annotations

import pytest

from fabric.common.config import TopicConfig
from fabric.common.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from fabric.common.types import ProducerBatch
from fabric.storage.log import Log
from fabric.storage.log_maintenance import LogMaintenance


def values(plog) -> list[bytes]:
    return [v for f in plog.fetch(plog.start_offset, 1 << 30) for v in f.batch.column("value").to_pylist()]


def test_a_retried_batch_answers_its_first_offset_and_gaps_are_refused(tmp_path, replicas, storage) -> None:
    plog = replicas.open(str(tmp_path / "p"))
    assert plog.append(storage.make_batch([b"a", b"b"]), producer=ProducerBatch(7, 0, 0)) == 0
    assert plog.append(storage.make_batch([b"c"]), producer=ProducerBatch(7, 0, 2)) == 2
    assert plog.append(storage.make_batch([b"a", b"b"]), producer=ProducerBatch(7, 0, 0)) == 0  # a retry
    assert plog.append(storage.make_batch([b"x"])) == 3  # not idempotent: never checked
    with pytest.raises(OutOfOrderSequenceError, match="sequence 5 does not follow the last written, so 3 is"):
        plog.append(storage.make_batch([b"d"]), producer=ProducerBatch(7, 0, 5))
    with pytest.raises(UnknownProducerIdError, match="no state of the producer and sequence 4 is not its first"):
        plog.append(storage.make_batch([b"e"]), producer=ProducerBatch(8, 0, 4))
    assert plog.append(storage.make_batch([b"f"]), producer=ProducerBatch(7, 1, 0)) == 4  # a new epoch
    with pytest.raises(InvalidProducerEpochError, match="epoch 0 is older than the producer's latest 1"):
        plog.append(storage.make_batch([b"g"]), producer=ProducerBatch(7, 0, 3))
    assert values(plog) == [b"a", b"b", b"c", b"x", b"f"]  # nothing refused was written


def test_the_state_is_rebuilt_from_the_frames(tmp_path, replicas, storage) -> None:
    leader = replicas.open(str(tmp_path / "leader"))
    leader.append(storage.make_batch([b"a"]), leader_epoch=0, producer=ProducerBatch(3, 0, 0))
    leader.append(storage.make_batch([b"b", b"c"]), leader_epoch=0, producer=ProducerBatch(3, 0, 1))
    follower = replicas.open(str(tmp_path / "follower"))
    replicas.copy(leader, follower)
    # the follower, leading now, recognises the retry of a batch it only copied
    assert follower.append(storage.make_batch([b"b", b"c"]), leader_epoch=1, producer=ProducerBatch(3, 0, 1)) == 1
    reopened = replicas.open(str(tmp_path / "leader"))
    assert reopened.append(storage.make_batch([b"a"]), producer=ProducerBatch(3, 0, 0)) == 0
    reopened.truncate_to(1)  # the batch from sequence 1 is gone: it is new again
    assert reopened.append(storage.make_batch([b"b", b"c"]), producer=ProducerBatch(3, 0, 1)) == 1
    assert values(reopened) == [b"a", b"b", b"c"]


def test_a_producer_silent_for_more_than_the_last_segments_is_forgotten(tmp_path, replicas, storage) -> None:
    plog = replicas.open(str(tmp_path / "p"), segment_bytes=1024)
    plog.append(storage.make_batch([b"a" * 600]), producer=ProducerBatch(5, 0, 0))
    for i in range(4):  # each frame fills a segment of its own
        plog.append(storage.make_batch([b"%d" % i * 600]))
    assert len(plog.segments()) >= 4
    reopened = replicas.open(str(tmp_path / "p"), segment_bytes=1024)
    with pytest.raises(UnknownProducerIdError):
        reopened.append(storage.make_batch([b"b"]), producer=ProducerBatch(5, 0, 1))


def clocked_log(storage, directory: str, clock) -> Log:
    return Log(directory, storage.SCHEMA, TopicConfig({}), clock=clock)


def test_producers_silent_for_the_expiration_are_forgotten_from_their_last_write_on(tmp_path, storage, clock
                                                                                   ) -> None:
    plog = clocked_log(storage, str(tmp_path / "p"), clock)
    plog.append(storage.make_batch([b"a0"]), producer=ProducerBatch(7, 0, 0))
    clock.ms += 10
    plog.append(storage.make_batch([b"b0"]), producer=ProducerBatch(8, 0, 0))
    clock.ms += 10
    assert plog.append(storage.make_batch([b"a1"]), producer=ProducerBatch(7, 0, 1)) == 2  # 7 wrote last
    clock.ms += 995  # 8 silent for 1,005 ms, 7 for 995
    assert plog.expire_producers(1000) == 1
    assert plog.producer_ids == 1
    with pytest.raises(UnknownProducerIdError, match="producer 8 .* no state of the producer and sequence 1"):
        plog.append(storage.make_batch([b"b1"]), producer=ProducerBatch(8, 0, 1))
    assert plog.append(storage.make_batch([b"a1"]), producer=ProducerBatch(7, 0, 1)) == 2  # 7's retry: known
    clock.ms += 6
    assert plog.expire_producers(1000) == 1 and plog.producer_ids == 0
    assert values(plog) == [b"a0", b"b0", b"a1"]


def test_an_open_transaction_keeps_its_producer_until_it_ends(tmp_path, storage, clock) -> None:
    plog = clocked_log(storage, str(tmp_path / "p"), clock)
    assert plog.append(storage.make_batch([b"t"]), producer=ProducerBatch(9, 0, 0), transactional=True) == 0
    clock.ms += 5000
    assert plog.expire_producers(1000) == 0  # its transaction is open: still known
    assert plog.append(storage.make_batch([b"t"]), producer=ProducerBatch(9, 0, 0), transactional=True) == 0
    plog.write_marker(9, 0, commit=True)
    clock.ms += 1001
    assert plog.expire_producers(1000) == 1


def test_a_rebuilt_producer_counts_from_the_rebuild(tmp_path, storage, clock) -> None:
    clocked_log(storage, str(tmp_path / "p"), clock).append(storage.make_batch([b"a"]), producer=ProducerBatch(
        3, 0, 0))
    clock.ms += 5000  # longer than the expiration, but this process has not seen the producer yet
    reopened = clocked_log(storage, str(tmp_path / "p"), clock)
    assert reopened.append(storage.make_batch([b"a"]), producer=ProducerBatch(3, 0, 0)) == 0  # rebuilt: a retry
    clock.ms += 1000
    assert reopened.expire_producers(1001) == 0
    assert reopened.expire_producers(1000) == 1


def test_the_background_maintenance_forgets_producers_in_the_partitions_it_is_given(tmp_path, storage, clock
                                                                                   ) -> None:
    maintained, followed = (clocked_log(storage, str(tmp_path / name), clock) for name in ("led", "followed"))
    for plog in (maintained, followed):
        plog.append(storage.make_batch([b"a"]), producer=ProducerBatch(3, 0, 0))
    clock.ms += 2000
    LogMaintenance(lambda: [("led", lambda: maintained)], 60_000, producer_id_expiration_ms=1000).run_once()
    assert (maintained.producer_ids, followed.producer_ids) == (0, 1)
    LogMaintenance(lambda: [], 60_000, producer_id_expiration_ms=1000,
                   expiring=lambda: [("followed", lambda: followed)]).run_once()
    assert followed.producer_ids == 0
