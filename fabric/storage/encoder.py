"""A topic's frame encoder: stored rows to sealed frames outside any log, for writers that stage frames
and publish them later (the Spark sink's tasks). The topic's schema and timestamp type are fixed when it
is made, so encoding many frames reads no metadata."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.storage import batch_encoding, frame


@dataclass(frozen=True)
class FrameEncoder:
    """Encodes one topic's stored rows (`schema`) as frames, stamped per `timestamp_type` (LogAppendTime from
    `clock`), in `codec`."""

    schema: pa.Schema
    timestamp_type: int
    codec: str = "none"
    clock: Clock = SYSTEM_CLOCK

    def schema_frame(self) -> bytes:
        """The frame a segment starts with: a staged file that starts with it, followed by frames based
        from 0, is a whole segment that publish_files can adopt without copying."""
        header, payload = frame.schema_frame(self.schema)
        return header.pack() + payload.to_pybytes()

    def encode(self, rows: pa.RecordBatch, base_offset: int = 0) -> tuple[bytes, pa.Buffer]:
        """One sealed frame at `base_offset`: (header bytes, payload), to be written one after the other."""
        template, payload = batch_encoding.encode(rows, self.codec, self.timestamp_type, self.clock)
        return frame.seal(template, payload, base_offset).pack(), payload
