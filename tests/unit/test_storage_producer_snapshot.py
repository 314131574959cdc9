"""Producer state snapshots (fabric/storage/producer_snapshot.py): a process that opens a partition another closed
loads its producers from the snapshot and walks no frame; the state so loaded is the one a rebuild from the frames
makes, however the producers wrote; a snapshot the log no longer matches (a damaged file, a log cut below it and
written again, its segment deleted) is left unused and the state rebuilt from the frames, as before."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import OutOfOrderSequenceError, UnknownProducerIdError
from fabric.common.types import ProducerBatch
from fabric.storage import producer_snapshot, producer_state_load, scan
from fabric.storage.producer_state import ProducerStateTable


@pytest.fixture
def walked(monkeypatch) -> list[int]:
    """The base offsets of the frame headers walked for producer states, one entry a frame."""
    seen: list[int] = []
    walk = scan.frame_headers

    def counted(*args, **kwargs):
        for header in walk(*args, **kwargs):
            seen.append(header.base_offset)
            yield header
    monkeypatch.setattr(producer_snapshot, "frame_headers", counted)
    monkeypatch.setattr(producer_state_load, "frame_headers", counted)
    return seen


def _state(table: ProducerStateTable) -> list[tuple[int, int, int, list[tuple[int, int, int]]]]:
    """What a table knows of each producer, in order (its clock times left out)."""
    return [(pid, e.epoch, e.last_offset, [(b.first_sequence, b.last_sequence, b.base_offset) for b in e.batches])
            for pid, e in table.entries()]


def test_a_partition_closed_with_its_snapshot_is_opened_walking_no_frame(tmp_path, storage, walked) -> None:
    writer = storage.open_log(str(tmp_path / "p"))
    offsets = [writer.append(storage.make_batch([b"v%d" % i]), producer=ProducerBatch(4, 0, i)) for i in range(200)]
    writer.closing()  # (as the fabric closing it does)

    reader = storage.open_log(str(tmp_path / "p"))
    assert reader.append(storage.make_batch([b"v199"]), producer=ProducerBatch(4, 0, 199)) == offsets[-1]  # a retry
    assert walked == []
    with pytest.raises(OutOfOrderSequenceError, match="sequence 300 does not follow the last written"):
        reader.append(storage.make_batch([b"gap"]), producer=ProducerBatch(4, 0, 300))
    assert reader.append(storage.make_batch([b"next"]), producer=ProducerBatch(4, 0, 200)) == 200


def test_after_a_crash_only_the_frames_past_the_last_snapshot_are_walked(tmp_path, storage, walked) -> None:
    """Each process writes a snapshot at its first write to each segment: one that never closed leaves the
    frames of its last segment from there on to walk."""
    writer = storage.open_log(str(tmp_path / "p"), segment_bytes=4096)
    for i in range(100):
        writer.append(storage.make_batch([b"v%d" % i]), producer=ProducerBatch(i % 3, 0, i // 3))
    last_segment = writer.segments()[-1].base_offset
    assert len(writer.segments()) > 3
    reader = storage.open_log(str(tmp_path / "p"), segment_bytes=4096)
    assert reader.append(storage.make_batch([b"v99"]), producer=ProducerBatch(0, 0, 33)) == 99
    assert walked and walked[0] == last_segment + 1 and walked == list(range(walked[0], 100))


@settings(max_examples=40, deadline=None)
@given(writes=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["batch", "batch", "transactional", "abort",
                                                                       "commit", "bump"])), min_size=1, max_size=40),
       snapshot_after=st.integers(0, 39))
def test_a_state_loaded_from_a_snapshot_is_the_rebuilt_one(tmp_path_factory, storage, writes, snapshot_after) -> None:
    directory = str(tmp_path_factory.mktemp("p") / "0")
    plog = storage.open_log(directory, segment_bytes=1200)
    epochs, sequences = [0] * 4, [0] * 4
    for i, (producer, kind) in enumerate(writes):
        if kind in ("abort", "commit", "bump"):
            epochs[producer] += kind == "bump"  # (a marker with a bumped epoch fences the producer's older one)
            sequences[producer] = 0 if kind == "bump" else sequences[producer]
            plog.write_marker(producer, epochs[producer], commit=kind == "commit")
        else:
            plog.append(storage.make_batch([b"p%d-%d" % (producer, i)] * (1 + i % 3)),
                        producer=ProducerBatch(producer, epochs[producer], sequences[producer]),
                        transactional=kind == "transactional")
            sequences[producer] += 1 + i % 3
        if i == snapshot_after:
            plog.closing()
    segments, end = plog.segments(), plog.end_offset
    window = segments[-producer_state_load.PRODUCER_STATE_SEGMENTS:]
    rebuilt = ProducerStateTable.rebuild(plog.name, scan.frame_headers(window, end), 0)
    loaded = producer_snapshot.load(plog.name, directory, segments, end, window[0].base_offset, 0)
    if loaded is None:  # (the snapshot fell before the segments a rebuild reads: not used)
        assert snapshot_after >= len(writes) or _snapshot_offset(directory) < window[0].base_offset
    else:
        assert _state(loaded) == _state(rebuilt)


def _snapshot_offset(directory: str) -> int:
    found = producer_snapshot._read(producer_snapshot.path_of(directory))
    assert found is not None
    return found[0]


@pytest.mark.parametrize("change", ["the file damaged", "the log cut below it and written again",
                                    "its segment deleted"])
def test_a_snapshot_the_log_no_longer_matches_is_not_used(tmp_path, storage, replicas, walked, change) -> None:
    plog = replicas.open(str(tmp_path / "p"), segment_bytes=2048)
    for i in range(40):
        plog.append(storage.make_batch([b"v%d" % i]), leader_epoch=0, producer=ProducerBatch(1, 0, i))
    plog.closing()
    path = producer_snapshot.path_of(plog.directory)
    if change == "the file damaged":
        with open(path, "r+b") as f:
            f.seek(30)
            byte = f.read(1)
            f.seek(30)
            f.write(bytes([byte[0] ^ 0x10]))
    elif change == "the log cut below it and written again":
        plog.truncate_to(39)
        plog.append(storage.make_batch([b"other"]), leader_epoch=1, producer=ProducerBatch(2, 0, 0))
        os.utime(path)  # (the snapshot itself untouched: the file the cut left)
    else:
        plog.delete_records(plog.end_offset, high_watermark=plog.end_offset)  # (every segment goes)
    segments, end = plog.segments(), plog.end_offset
    since = segments[-producer_state_load.PRODUCER_STATE_SEGMENTS:][0].base_offset
    assert producer_snapshot.load(plog.name, plog.directory, segments, end, since, 0) is None
    reopened = replicas.open(str(tmp_path / "p"), segment_bytes=2048)
    if change == "its segment deleted":  # (no frame left to rebuild from: producer 1 is unknown now)
        with pytest.raises(UnknownProducerIdError):
            reopened.append(storage.make_batch([b"n"]), leader_epoch=2, producer=ProducerBatch(1, 0, 40))
        return
    reopened.append(storage.make_batch([b"n"]), leader_epoch=2, producer=ProducerBatch(2, 0, int("cut" in change)))
    assert walked, "the state was rebuilt from the frames"


def test_partitions_another_client_deleted_are_closed_without_a_warning(tmp_path, caplog) -> None:
    """Two fabrics of one process over a directory (confluent-kafka's AdminClient and Producer each connect): the
    producer's wrote a topic the other deleted. Closing it warns of nothing (there is nothing left to keep); it
    warned of each partition's missing lock file."""
    import logging

    import fabric
    url = f"file://{tmp_path}"
    writer, admin = fabric.connect(url), fabric.connect(url)
    writer.create_topic("gone", partitions=2)
    with writer.producer(enable_idempotence=True) as producer:
        for partition in (0, 1):
            producer.send("gone", b"v", partition=partition).get(timeout=30)
    admin.delete_topic("gone")
    with caplog.at_level(logging.DEBUG, logger="fabric.storage.log_manager"):
        writer.close()
        admin.close()
    assert [r.levelno for r in caplog.records if r.name == "fabric.storage.log_manager"] == [logging.DEBUG] * 2
