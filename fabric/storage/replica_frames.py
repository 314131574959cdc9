"""Frames a follower copied from its leader, checked whole before any of them is written.

A batch of copied frames is the leader's bytes unchanged (so their CRCs are kept): data frames laid end to
end, each whole, of a readable magic and version, passing its CRC check, the first starting at the follower's
log end offset and each at the offset the one before it ended, their leader epochs never going backwards.
"""
from __future__ import annotations

import pyarrow as pa

from fabric.common.errors import InvalidFramesError, UnexpectedOffsetError
from fabric.storage import frame
from fabric.storage.frame import FrameError, FrameHeader


def check_copied(data: pa.Buffer, log_end: int, latest_epoch: int, partition: str
                 ) -> list[tuple[FrameHeader, pa.Buffer]]:
    """The (header, payload) of each frame in `data`, copied to partition `partition` whose log ends at
    `log_end` and whose latest leader epoch is `latest_epoch`; InvalidFramesError (UnexpectedOffsetError for
    an offset that does not follow on) naming the byte and the offsets if any frame breaks the rules above."""
    out: list[tuple[FrameHeader, pa.Buffer]] = []
    pos, expected, epoch = 0, log_end, latest_epoch
    while pos < data.size:
        where = f"partition {partition}: the copied frame at byte {pos} of {data.size}"
        try:
            header = frame.unpack_header(data, pos)
        except FrameError as exc:
            raise InvalidFramesError(f"{where} has no valid frame header ({exc}); nothing was written") from None
        if pos + header.size > data.size:
            raise InvalidFramesError(f"{where} is torn: {data.size - pos} of its {header.size} bytes; nothing was "
                                     "written")
        if not frame.verify(data, pos, header):
            raise InvalidFramesError(f"{where} (offset {header.base_offset}) fails its CRC check; nothing was "
                                     "written")
        if header.is_schema:
            raise InvalidFramesError(f"{where} is a schema frame, which is never copied; nothing was written")
        if header.base_offset != expected:
            raise UnexpectedOffsetError(f"{where} does not follow on: expected offset {expected}, got a frame at "
                                        f"offset {header.base_offset}; nothing was written")
        if header.leader_epoch < epoch:
            raise InvalidFramesError(f"{where} (offset {header.base_offset}) has leader epoch "
                                     f"{header.leader_epoch}, below epoch {epoch} before it; nothing was written")
        out.append((header, data.slice(pos + frame.HEADER_SIZE, header.length)))
        pos, expected, epoch = pos + header.size, header.next_offset, header.leader_epoch
    return out
