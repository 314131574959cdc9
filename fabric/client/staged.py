"""Reading back a staged segment file (a schema frame, then sealed frames from a frame encoder) as the stored
rows it holds, each frame CRC-checked: how a Spark sink task sends what it staged to a cluster's leaders."""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from fabric.storage import frame


def staged_rows(path: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The stored rows of each data frame of the staged file at `path`, in order (schema frames skipped)."""
    with pa.memory_map(path, "r") as mapped:
        for header, payload in frame.split_frames(mapped.read_buffer()):
            if not header.is_schema and header.record_count:
                yield frame.decode_batch(payload, schema)
