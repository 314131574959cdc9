"""The compression codecs, in one table: the name users give (Kafka's compression.type), the code stored in
a frame's attribute bits, and the Arrow IPC buffer compression that implements it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Codec:
    """One codec: `attribute` is its value in bits 0-1 of a frame's attributes; `ipc` pyarrow's name for it."""

    name: str
    attribute: int
    ipc: str | None


CODECS: dict[str, Codec] = {c.name: c for c in (Codec("none", 0, None), Codec("lz4", 1, "lz4_frame"),
                                                 Codec("zstd", 2, "zstd"))}
CODEC_NAMES = tuple(CODECS)  # "none" first
