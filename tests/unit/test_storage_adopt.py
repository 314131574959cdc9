"""Publishing staged segment files by adopting them (rename, no copy): the data and the indexes.
(Crash recovery when the publishing process is SIGKILLed at each step: tests/integration/test_storage_adopt.py.)"""
from __future__ import annotations

import os

import pyarrow as pa

from fabric.storage import frame


def test_adopted_files_become_segments(tmp_path, storage, adoption):
    cluster, parts, expected = adoption.setup(str(tmp_path))
    assert cluster.publish_files("txn-1", parts, adopt_bytes=adoption.ADOPT) is True
    assert all(not os.path.exists(p) for p in parts[("events", 0)] + parts[("events", 1)][:1])  # renamed
    assert os.path.exists(parts[("events", 1)][1])  # the small one was copied
    for p in (0, 1):
        assert adoption.values_of(cluster, p) == expected[p]
    log0, log1 = cluster.log("events", 0), cluster.log("events", 1)
    assert [s.base_offset for s in log0.segments()] == [0, 5, 255]
    assert [s.base_offset for s in log1.segments()] == [0]  # the empty active segment was replaced
    for seg in log0.segments() + log1.segments():
        seg._indexes_checked = False
        assert seg.check_indexes() is False  # the indexes written at adoption are already right
    assert log0.offset_for_time(1_000 + 100) == 5 + 100  # the time index of an adopted segment works
    assert cluster.publish_files("txn-1", parts, adopt_bytes=adoption.ADOPT) is False
    assert cluster.append("events", 1, storage.make_batch([b"after"], [9])) == 203
    reopened = storage.cluster(str(tmp_path))
    assert adoption.values_of(reopened, 0) == expected[0]
    assert adoption.values_of(reopened, 1) == expected[1] + [b"after"]
    adoption.assert_whole(log0.directory)
    adoption.assert_whole(log1.directory)


def test_a_staged_file_of_another_schema_is_copied(tmp_path, storage, adoption):
    cluster, parts, expected = adoption.setup(str(tmp_path))
    path = parts[("events", 0)][0]
    with open(path, "rb") as f:
        data = f.read()
    sealed, payload = frame.schema_frame(storage.make_batch([b"x"]).schema.append(pa.field("extra", pa.int32())))
    with open(path, "wb") as f:  # the same frames after the schema frame of another schema
        f.write(sealed.pack() + payload.to_pybytes() + data[frame.unpack_header(data).size:])
    assert cluster.publish_files("txn-1", parts, adopt_bytes=adoption.ADOPT) is True
    assert os.path.exists(path)  # copied, not adopted
    assert adoption.values_of(cluster, 0) == expected[0]
