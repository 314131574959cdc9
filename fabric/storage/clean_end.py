"""Where a replica log's frames ended when its process closed it cleanly (after Kafka's clean-shutdown marker):
without it, a replica log's recovery walks its whole last segment, checking every frame's CRC, to find where its
frames end (about 9 µs a frame here: a second for 100,000 small frames, for each partition at every node start).

`clean-end` holds the last segment's base offset, the byte position and CRC of its last frame and the offset after
that frame, with a CRC32 of them. It is written under the partition lock as the process closes the log, after the
segment was fsynced, and it describes the file as it is: recovery trusts it only while the last segment still has
that base, its file ends where that frame ends and the header there has that CRC and offset (anything written, cut
or damaged since fails one of these), and otherwise walks the frames as before.
"""
from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

from fabric.storage import cache_file

if TYPE_CHECKING:
    from fabric.storage.scan import Frame
    from fabric.storage.segment import Segment

FILE = "clean-end"
_RECORD = struct.Struct("<4sqqIq")  # magic, segment base, the last frame's position and CRC, the offset after it
MAGIC = b"FCE1"


def write(directory: str, segment: Segment, last: Frame) -> None:
    """Record that `segment`, the log's last, ends with frame `last` (lock held, the segment fsynced); left out
    where it cannot be written."""
    cache_file.write(os.path.join(directory, FILE), _RECORD.pack(MAGIC, segment.base_offset, last.position,
                                                                 last.header.crc, last.header.next_offset))


def end(directory: str, segments: list[Segment]) -> int | None:
    """The offset the log's frames end at, as recorded when it was closed, if the last of `segments` still ends
    as it did then; None otherwise (or with no record)."""
    data = cache_file.read(os.path.join(directory, FILE))
    if data is None or len(data) != _RECORD.size or not segments:
        return None
    magic, base, position, crc, next_offset = _RECORD.unpack(data)
    last = segments[-1]
    if magic != MAGIC or last.base_offset != base:
        return None
    try:
        header = last.header_at(position)
    except OSError:
        return None
    if header is None or position + header.size != last.size or header.crc != crc or header.next_offset != next_offset:
        return None
    return next_offset
