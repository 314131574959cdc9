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

# Kafka codecs Arrow IPC cannot compress buffers with, and the one of ours closest to each
KAFKA_ONLY = {"gzip": "zstd (a better ratio than gzip, and faster)", "snappy": "lz4 (as fast as snappy)"}


def unsupported(name: str) -> str | None:
    """Why a Kafka codec name is not available here and what to use instead, or None if it is not one of them."""
    instead = KAFKA_ONLY.get(name.strip().lower())
    return None if instead is None else (f"{name.strip()} is a Kafka codec that Arrow IPC, which the fabric "
                                         f"stores, cannot compress with; use {instead}")
