"""`fabric produce` and `fabric consume`: Kafka's console producer and console consumer."""
from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import decimal
import json
import math
import signal
import sys
import threading
import time
from typing import Any, BinaryIO, Iterator

import pyarrow as pa

from fabric.cli.common import CommandError, add_command, open_fabric
from fabric.client.producer import Producer, SendFuture
from fabric.common.errors import FabricError
from fabric.common.records import Record

CHECK_EVERY = 10_000  # lines between flushes that surface append errors while producing
POLL_S = 0.1  # longest wait per poll, so Ctrl-C and --timeout-ms are noticed promptly
NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}  # and "NaN": the strings Spark's to_json writes


# -- produce -----------------------------------------------------------------------------------------
def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its end-of-line) for each line of `stream`."""
    for number, line in enumerate(stream, 1):
        yield number, line.rstrip(b"\n").removesuffix(b"\r")


def _split_key(line: bytes, sep: bytes | None) -> tuple[bytes | None, bytes]:
    if sep is None:
        return None, line
    key, found, value = line.partition(sep)
    if not found:
        raise CommandError(f"no key separator {sep.decode()!r} found; write key{sep.decode()}value "
                           "or drop --key-separator")
    return key, value


def _typed_value(text: bytes, schema: pa.Schema) -> dict[str, Any]:
    """One JSON object (send() checks it against the typed topic's schema)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"not valid JSON ({exc}); a typed topic takes one JSON object per line "
                           f"with fields {schema.names}") from None
    if not isinstance(value, dict):
        raise CommandError(f"expected a JSON object with fields {schema.names}, got {type(value).__name__}")
    return value


def _check(producer: Producer, futures: list[SendFuture]) -> None:
    """Flush and raise the first append error, if any."""
    producer.flush()
    for future in futures:
        future.result()
    futures.clear()


def produce(args: argparse.Namespace) -> None:
    """Send stdin lines as records, batched by the Producer; flushed and checked before exit."""
    if args.key_separator == "":
        raise CommandError("--key-separator cannot be empty; give the text between key and value, e.g. $'\\t'")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    with open_fabric(args) as fab, fab.producer() as producer:
        schema = fab.describe_topic(args.topic).value_schema
        futures: list[SendFuture] = []
        for number, line in _lines(sys.stdin.buffer):
            if schema is not None and not line.strip():
                continue
            try:
                key, text = _split_key(line, sep)
                value: Any = text if schema is None else _typed_value(text, schema)
                futures.append(producer.send(args.topic, value, key=key))
            except FabricError as exc:
                raise CommandError(f"line {number}: {exc} (the lines before it were sent)") from None
            if len(futures) >= CHECK_EVERY:
                _check(producer, futures)
        _check(producer, futures)


# -- consume -----------------------------------------------------------------------------------------
def _text(data: bytes | None) -> str | None:
    """utf-8 text if `data` decodes, else base64 (how --format json shows keys and values)."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(data).decode()


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return _text(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, dt.timedelta)):
        return str(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def _finite(value: object) -> object:
    """`value` with NaN and ±infinity (which JSON cannot hold) as the strings Spark's to_json writes."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value: object) -> str:
    """Strict JSON (every line parses with any JSON parser), bytes as text or base64."""
    return json.dumps(_finite(value), default=_json_default, ensure_ascii=False, allow_nan=False)


def _render(record: Record, args: argparse.Namespace, typed: bool) -> bytes:
    """One output line for a record (without the newline)."""
    if args.format == "json":
        return _dumps({"topic": record.topic, "partition": record.partition, "offset": record.offset,
                       "timestamp": record.timestamp, "key": _text(record.key),
                       "value": record.value if typed else _text(record.value),
                       "headers": [{"key": k, "value": _text(v)} for k, v in record.headers]}).encode()
    value = _dumps(record.value).encode() if typed else (b"null" if record.value is None else record.value)
    if not args.print_key:
        return value
    key = b"null" if record.key is None else record.key
    return key + args.key_separator.encode() + value


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM (instead of dying), so consume can commit and exit 0."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def consume(args: argparse.Namespace) -> None:
    """Print records until --max-messages, --timeout-ms or a signal; commit what was printed (with --group)."""
    if args.max_messages is not None and args.max_messages < 1:
        raise CommandError(f"--max-messages must be at least 1, got {args.max_messages}")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CommandError(f"--timeout-ms must be 0 or more milliseconds, got {args.timeout_ms}")
    reset = "earliest" if args.from_beginning else "latest"
    out = sys.stdout.buffer
    count = 0
    with _stop_on_signals() as stop, open_fabric(args) as fab, \
            fab.consumer(args.topic, group_id=args.group, auto_offset_reset=reset,
                         enable_auto_commit=False) as consumer:
        typed = fab.describe_topic(args.topic).value_schema is not None
        for tp in consumer.assignment():
            consumer.position(*tp)  # start now, so records produced from here on are not skipped
        last_record = time.monotonic()
        while not stop.is_set() and count != args.max_messages:
            printed: dict[tuple[str, int], int] = {}
            for record in consumer.poll(POLL_S):
                out.write(_render(record, args, typed) + b"\n")
                printed[(record.topic, record.partition)] = record.offset + 1
                count += 1
                if count == args.max_messages:
                    break
            if printed:
                out.flush()
                last_record = time.monotonic()
                if args.group is not None:
                    consumer.commit(printed)
            elif args.timeout_ms is not None and time.monotonic() - last_record >= args.timeout_ms / 1000:
                break  # checked after a poll, so a slow start never times out before looking
    print(f"Processed a total of {count} messages", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric produce` and `fabric consume`."""
    p = add_command(subparsers, "produce", produce, "send one record per stdin line to a topic",
                    description="Send one record per line of stdin (like kafka-console-producer). For a typed "
                                "topic each line is a JSON object with the schema's fields (blank lines are "
                                "skipped).")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value (Kafka's parse.key=true)")

    p = add_command(subparsers, "consume", consume, "print a topic's records",
                    description="Print records (like kafka-console-consumer): values as text, or one JSON object "
                                "per record with --format json. Runs until Ctrl-C unless --max-messages or "
                                "--timeout-ms stops it; with --group it commits what it printed.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start when there is no committed offset (default: only new records)")
    p.add_argument("--group", metavar="G", help="consumer group: resume from and commit its offsets")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS milliseconds without a new record")
    p.add_argument("--print-key", action="store_true", help="text format: print key<SEP>value")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="separator for --print-key (default: tab)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the value (typed topics: a JSON object); json: topic, partition, offset, "
                        "timestamp (ms), key, value, headers per line; bytes that are not utf-8 show as base64, "
                        "NaN and infinities as the strings \"NaN\", \"Infinity\", \"-Infinity\" (as Spark's "
                        "to_json), so every line is valid JSON")
