"""A read hands out each whole, uncompressed stored batch with the IPC message it was decoded from (Fetched.message),
so a server sends a fetch's frames as they lie in the segment: the bytes of the frame's payload, not a copy; a
run cut out of a frame, or a compressed frame, carries none (its batch is encoded again to be sent)."""
from __future__ import annotations

import pyarrow as pa


def _fetched(log, offset):
    return log.fetch(offset, 1 << 20)


def test_whole_uncompressed_frames_carry_their_stored_message(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path))
    log.append(storage.make_batch([b"a", b"b", b"c"]))
    log.append(storage.make_batch([b"d"]))
    whole = _fetched(log, 0)
    assert [f.offset for f in whole] == [0, 3]
    for run in whole:
        assert run.message is not None
        assert pa.ipc.read_record_batch(run.message, run.batch.schema).equals(run.batch)
    seg = log.segments()[-1]
    view = seg.view()
    assert view.address <= whole[0].message.address < view.address + view.size  # the segment's bytes, not a copy
    cut = _fetched(log, 1)  # from inside the first frame: its rows from offset 1 on
    assert [(f.offset, f.batch.num_rows, f.message is None) for f in cut] == [(1, 2, True), (3, 1, False)]


def test_compressed_frames_carry_no_message(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path))
    log.append(storage.make_batch([b"x" * 1000] * 5), codec="lz4")
    (run,) = _fetched(log, 0)
    assert run.message is None and run.batch.column(3).to_pylist() == [b"x" * 1000] * 5
