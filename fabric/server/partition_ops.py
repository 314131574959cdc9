"""Data-plane calls on one partition's Log as every server serves them (the coordinator's Broker, a data node's
leader partitions): an append checked by admission and reported by the disk, the partition's offsets and size,
the offset of a time. The caller picks the Log (and refuses partitions it does not serve)."""
from __future__ import annotations

from typing import Any, Callable

from fabric.common import checks
from fabric.common.codecs import CODECS
from fabric.common.config import INT_MAX, LONG_MAX
from fabric.common.errors import InvalidConfigError, InvalidRequestError
from fabric.common.redaction import clip
from fabric.common.types import Fetched, PartitionState, ProducerBatch, TopicInfo
from fabric.server import admission
from fabric.storage.batch_encoding import Rows
from fabric.storage.log import Log
from fabric.storage.producer_state import SEQUENCE_MAX
from fabric.storage.reader import ISOLATION_LEVELS
from fabric.storage.segment import disk_usage

SHORT_MAX = (1 << 15) - 1
ACKS = {"0": "0", "1": "1", "all": "all", "-1": "all"}  # a produce's acks, and what each means


def check_acks(acks: Any) -> str:
    """A produce's acks, checked ("-1" is "all"): a server refuses another, as Kafka's INVALID_REQUIRED_ACKS."""
    if not isinstance(acks, str) or acks not in ACKS:
        raise InvalidRequestError(f"acks must be one of 0, 1, all (-1), got {clip(acks)}")
    return ACKS[acks]


def compacted(info: TopicInfo) -> bool:
    """True if the topic's cleanup.policy compacts (compact, or compact,delete)."""
    return "compact" in info.settings["cleanup.policy"]


def check_compacted(info: TopicInfo) -> None:
    """InvalidConfigError naming the fix unless the topic is compacted (what compact_topic asks of it)."""
    if not compacted(info):
        policy = info.settings["cleanup.policy"]
        raise InvalidConfigError(
            f"topic {info.name!r} is not compacted (cleanup.policy={policy}): there is nothing to compact; make it a "
            f"compacted topic with `fabric topics alter {info.name} --config cleanup.policy=compact` (or "
            "compact,delete), or apply its retention now with `fabric topics retain`")


def delete_records(plog: Log, topic: str, before_offset: Any, high_watermark: int | None = None) -> int:
    """Kafka's DeleteRecords on `plog`, a partition of `topic` (Log.delete_records), checked first:
    `before_offset` is an offset or -1 (the high watermark: `high_watermark` for a leader's replica log, else the
    log end), and InvalidConfigError naming the fix for a topic whose cleanup.policy has no `delete` (Kafka refuses
    DeleteRecords there too, as a compacted topic keeps every key's latest value). Returns the low watermark."""
    checks.integer(before_offset, "before_offset (an offset, or -1 for the high watermark)", -1, LONG_MAX)
    policy = plog.config["cleanup.policy"]
    if "delete" not in policy:
        raise InvalidConfigError(
            f"the records of topic {topic!r} cannot be deleted: its cleanup.policy={policy} keeps every key's "
            f"latest value (Kafka refuses DeleteRecords there too); allow it with `fabric topics alter {topic} "
            "--config cleanup.policy=compact,delete`")
    return plog.delete_records(before_offset, high_watermark=high_watermark)


def check_codec(codec: Any) -> None:
    if codec not in CODECS:
        raise InvalidConfigError(f"unknown codec {clip(codec)}; use one of {', '.join(CODECS)}")


def producer_batch(producer_id: int, producer_epoch: int, base_sequence: int) -> ProducerBatch | None:
    """The idempotent producer fields of an append request (producer id -1: not idempotent), range-checked as
    the frame header stores them."""
    if producer_id == -1:
        return None
    for name, value, hi in (("producer_id", producer_id, LONG_MAX), ("producer_epoch", producer_epoch, SHORT_MAX),
                            ("base_sequence", base_sequence, SEQUENCE_MAX)):
        if not checks.is_integer(value) or not 0 <= value <= hi:
            raise InvalidRequestError(f"{name} must be an int from 0 to {hi} (producer_id -1: not idempotent), got "
                                      f"{clip(value)}; a producer gets its id and epoch from init_producer_id")
    return ProducerBatch(producer_id, producer_epoch, base_sequence)


def check_transactional_id(transactional_id: Any) -> None:
    """InvalidRequestError unless a transactional append names its transactional id (the leader verifies the
    transaction with the coordinator's record of it)."""
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidRequestError(f"a transactional append names its transactional_id (the leader verifies the "
                                  f"transaction with the coordinator), got {clip(transactional_id)}; upgrade the "
                                  "client")


def marker_producer(value: Any) -> tuple[int, int]:
    """A transaction marker's [producer id, producer epoch], range-checked as the frame header stores them."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidRequestError(f"a marker names [producer_id, producer_epoch], got {clip(value)}")
    batch = producer_batch(value[0], value[1], 0)
    if batch is None:
        raise InvalidRequestError(f"a marker's producer id must be an int from 0, got {clip(value[0])}")
    return batch.producer_id, batch.producer_epoch


def append(log: Log, topic: str, partition: int, rows: Rows, codec: str, leader_epoch: int = -1,
           producer: ProducerBatch | None = None, transactional: bool = False) -> int:
    """Append stored rows after admission (schema, sizes, timestamps); returns the first row's offset (an
    idempotent producer's retry: the offset it was written at). A leader stamps its `leader_epoch` on the frame
    (-1: an embedded log's, none). A `transactional` append needs an idempotent producer."""
    check_codec(codec)
    if transactional and producer is None:
        raise InvalidRequestError("a transactional append needs producer_id, producer_epoch and base_sequence "
                                  "(a producer gets its id and epoch from init_producer_id)")
    admission.check_rows(topic, rows, log.schema, log.config["max.message.bytes"])
    return log.append(rows, codec, log.timestamp_type, leader_epoch, producer, transactional)


def isolation_level(value: Any) -> str:
    """A fetch's isolation level, checked: read_committed or read_uncommitted (Kafka's isolation.level)."""
    if value not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, got {clip(value)}")
    return str(value)


MAX_WAIT_MS = 300_000  # the longest a request may ask to be held (an acks=all append, a long-polling fetch)


def wait_seconds(name: str, value: int) -> float:
    """A wait a request asks for (ms, checked an int by the service), capped at MAX_WAIT_MS, in seconds."""
    if not 0 <= value <= INT_MAX:
        raise InvalidRequestError(f"{name} must be milliseconds from 0 to {INT_MAX}, got {clip(value)}")
    return min(value, MAX_WAIT_MS) / 1000


def fetch_bytes(max_bytes: int) -> int:
    """A consumer fetch's max_bytes, refused below 0; at least 1, so a fetch of 0 bytes still answers the first
    batch there is whatever its size, as Kafka's (KIP-74): a consumer always makes progress."""
    if max_bytes < 0:
        raise InvalidRequestError(f"max_bytes must be 0 or more (about how many bytes to read; the first batch comes "
                                  f"back whatever its size), got {clip(max_bytes)}")
    return max(max_bytes, 1)


def at_once(fetch: Callable[..., list[Fetched]]) -> Callable[..., list[Fetched]]:
    """`fetch` (called with a fetch request's arguments) without its wait: max_wait_ms checked, then 0. A server
    reading on its event loop holds the fetch there instead (fabric.server.consumer_fetches)."""
    def read(**args: Any) -> list[Fetched]:
        wait_seconds("max_wait_ms", args.get("max_wait_ms", 0))
        return fetch(**{**args, "max_wait_ms": 0})
    return read


def fetch(log: Log, offset: int, max_bytes: int, end_offset: int | None, max_wait_ms: int) -> list[Fetched]:
    """Committed batches from `offset`; at the end of the log, wait up to `max_wait_ms` for some (Kafka's
    fetch.max.wait.ms), so a consumer gets a record as soon as it is appended instead of polling for it."""
    wait_s = wait_seconds("max_wait_ms", max_wait_ms)
    max_bytes = fetch_bytes(max_bytes)
    end = log.end_offset  # (one read of the watermark: the segments are listed only to read from)
    if wait_s and end_offset is None and end == offset:
        if not log.wait_for_records(offset, wait_s):
            return []  # at the log end, and nothing came in time
        return log.fetch(offset, max_bytes)
    return log.fetch(offset, max_bytes, end_offset, within=log.log_range(end))


def state(log: Log, topic: str, partition: int, end_offset: int | None = None, **replication: Any
          ) -> PartitionState:
    """The partition's offsets, segments and bytes (and, for a replicated one, its leader, replicas, ISR and
    leader epoch in `replication`); its end is `end_offset` (a replica's high watermark) or the log's."""
    now = log.log_range()
    segments, size = disk_usage(now.segments)
    end = now.end if end_offset is None else end_offset
    return PartitionState(topic, partition, min(now.start, end), end, segments, size, **replication)


def offset_after_records(log: Log, offset: int, count: int, end_offset: int | None, isolation: str) -> int:
    """Log.offset_after_records, its arguments checked: offsets and the count are ints from 0."""
    for name, value in (("offset", offset), ("count", count), ("end_offset", end_offset)):
        if value is not None and (not checks.is_integer(value) or not 0 <= value <= LONG_MAX):
            raise InvalidRequestError(f"{name} must be an int from 0 to {LONG_MAX}, got {clip(value)}")
    return log.offset_after_records(offset, count, end_offset, isolation_level(isolation))


def offset_for_time(log: Log, timestamp_us: int) -> int | None:
    """The earliest offset with a timestamp >= timestamp_us (µs), or None."""
    if not checks.is_integer(timestamp_us) or abs(timestamp_us) > LONG_MAX:
        raise InvalidRequestError(f"timestamp_us must be a 64-bit int (µs since the epoch), got "
                                  f"{clip(timestamp_us)}")
    return log.offset_for_time(timestamp_us)


def fsyncs(info: TopicInfo) -> bool:
    """Whether an append to topic `info` may fsync (a flush.messages or flush.ms override), so may wait on the
    disk rather than only on the page cache."""
    return "flush.messages" in info.config or "flush.ms" in info.config
