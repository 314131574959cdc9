"""`fabric produce` and `fabric consume`: Kafka's console producer and console consumer (and kcat's -e)."""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from typing import Any, BinaryIO, Iterator

import pyarrow as pa

from fabric.cli import client_properties
from fabric.cli.common import CommandError, add_command, add_subject, open_fabric, parse_config
from fabric.cli.formats import (
    FORMATTER_DEFAULTS,
    READER_DEFAULTS,
    LineFormatter,
    LineReader,
    json_line,
    properties,
)
from fabric.client.admin import Fabric
from fabric.client.consumer import Consumer
from fabric.client.delivery import SendFuture
from fabric.client.producer import Producer
from fabric.client.topic_partition import TopicPartition as NamedPartition
from fabric.common.checks import LONG_MAX
from fabric.common.errors import FabricError
from fabric.common.types import TopicPartition

CHECK_EVERY = 10_000  # lines between flushes that surface append errors while producing
PROGRESS_EVERY = 100_000  # records between progress lines on stderr while producing
POLL_S = 0.1  # longest wait per poll, so Ctrl-C and --timeout-ms are noticed promptly


# -- produce -----------------------------------------------------------------------------------------
def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its end-of-line) for each line of `stream`."""
    for number, line in enumerate(stream, 1):
        yield number, line.rstrip(b"\n").removesuffix(b"\r")


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


def _reader(args: argparse.Namespace) -> LineReader:
    """The line reader of --property k=v (Kafka's names), with --key-separator SEP as parse.key=true and
    key.separator=SEP."""
    if args.key_separator == "":
        raise CommandError("--key-separator cannot be empty; give the text between key and value, e.g. $'\\t'")
    given = parse_config(args.property, "--property", example="parse.headers=true", strip_values=False)
    if args.key_separator is not None:
        if given.get("key.separator", args.key_separator) != args.key_separator:
            raise CommandError(f"--key-separator {args.key_separator!r} and --property key.separator="
                               f"{given['key.separator']!r} disagree; give one of them")
        given.update({"parse.key": "true", "key.separator": args.key_separator})
    return LineReader.of(properties(given, READER_DEFAULTS))


def _check(producer: Producer, futures: list[SendFuture]) -> None:
    """Flush and raise the first append error, if any."""
    producer.flush()
    for future in futures:
        future.result()
    futures.clear()


class _Progress:
    """A line on stderr every PROGRESS_EVERY records sent, with the rate, and a summary at the end if any was
    printed (big inputs only: a few lines stay quiet, as Kafka's console producer)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.sent = 0
        self.reported = 0

    def add(self, sent: int, final: bool = False) -> None:
        self.sent += sent
        if self.sent // PROGRESS_EVERY > self.reported // PROGRESS_EVERY or (final and self.reported):
            elapsed = max(time.monotonic() - self.started, 1e-6)
            print(f"{'Sent a total of' if final else 'Sent'} {self.sent} records in {elapsed:.1f} s "
                  f"({self.sent / elapsed:,.0f} records/s)", file=sys.stderr, flush=True)
            self.reported = self.sent


def produce(args: argparse.Namespace) -> None:
    """Send stdin lines as records, batched by the Producer; flushed and checked before exit."""
    reader = _reader(args)
    progress = _Progress()
    configs = client_properties.given(args, "producer")
    acks = client_properties.take(configs, "acks", "--request-required-acks", args.request_required_acks)
    if acks is not None:
        configs["acks"] = acks
    with open_fabric(args) as fab, fab.producer(configs) as producer:
        topic = fab.describe_topic(args.topic)
        schema = topic.value_schema
        if args.partition is not None and not 0 <= args.partition < len(topic.partitions):
            raise CommandError(f"--partition {args.partition}: topic {args.topic!r} has partitions "
                               f"0..{len(topic.partitions) - 1}")
        futures: list[SendFuture] = []
        for number, line in _lines(sys.stdin.buffer):
            if schema is not None and not line.strip():
                continue
            try:
                headers, key, text = reader.read(line)
                value: Any = text if schema is None else _typed_value(text, schema)
                futures.append(producer.send(args.topic, value, key=key, headers=headers,
                                             partition=args.partition))
            except FabricError as exc:
                raise CommandError(f"line {number}: {exc} (the lines before it were sent)") from None
            if len(futures) >= CHECK_EVERY:
                sent = len(futures)
                _check(producer, futures)
                progress.add(sent)
        sent = len(futures)
        _check(producer, futures)
        progress.add(sent, final=True)


# -- consume -----------------------------------------------------------------------------------------
def _start_offset(text: str) -> int | str:
    """--offset: a non-negative offset, earliest or latest (as Kafka's console consumer)."""
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if not 0 <= offset <= LONG_MAX:
        raise argparse.ArgumentTypeError(f"expected an offset from 0 to {LONG_MAX}, earliest or latest, got {text!r}")
    return offset


def _check_consume_options(args: argparse.Namespace) -> None:
    """The option combinations Kafka's console consumer refuses, and bad numbers."""
    if (args.topic is None) == (args.include is None):
        raise CommandError("name the topic: fabric consume TOPIC (or --topic TOPIC), or every topic matching a "
                           "regular expression with --include REGEX; one of them")
    if args.include is not None and args.partition is not None:
        raise CommandError("--partition reads one partition of one topic; give --topic TOPIC with it, not --include")
    if args.max_messages is not None and args.max_messages < 1:
        raise CommandError(f"--max-messages must be at least 1, got {args.max_messages}")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CommandError(f"--timeout-ms must be 0 or more milliseconds, got {args.timeout_ms}")
    if args.partition is not None and args.group is not None:
        raise CommandError("--partition and --group cannot be used together: --partition reads one partition "
                           "outside any group (nothing is committed), while a group assigns partitions to its "
                           "members; drop --group, or drop --partition and let the group assign")
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset needs --partition P: an offset belongs to one partition (to read every "
                           "partition from its start use --from-beginning)")
    if args.offset is not None and args.from_beginning:
        raise CommandError("--offset and --from-beginning cannot be used together; --offset earliest is "
                           "--from-beginning for one partition")
    if args.property and args.format == "json":
        raise CommandError("--property sets the text format's fields; --format json prints them all")


def _formatter(args: argparse.Namespace) -> LineFormatter:
    """The text format of --property k=v (Kafka's DefaultMessageFormatter), --print-key and --key-separator
    being print.key=true and key.separator=SEP."""
    given = parse_config(args.property, "--property", example="print.offset=true", strip_values=False)
    if args.print_key:
        given["print.key"] = "true"
    if args.key_separator is not None:
        given["key.separator"] = args.key_separator
    return LineFormatter.of(properties(given, FORMATTER_DEFAULTS))


def _consumer_configs(args: argparse.Namespace) -> tuple[dict[str, str], bool]:
    """The consumer's configs from --consumer.config, --consumer-property and the flags that set some of them
    (--group: group.id, which goes to `args.group`; --from-beginning and --offset: auto.offset.reset;
    --isolation-level), and whether to commit what was printed (enable.auto.commit, default true: the command
    commits itself, after each poll's records are printed)."""
    configs = client_properties.given(args, "consumer")
    args.group = client_properties.take(configs, "group.id", "--group", args.group)
    start = "earliest" if args.from_beginning or args.offset == "earliest" else \
        "latest" if args.offset == "latest" else None
    configs["auto.offset.reset"] = client_properties.take(configs, "auto.offset.reset", "--from-beginning/--offset",
                                                          start) or "latest"
    isolation = client_properties.take(configs, "isolation.level", "--isolation-level", args.isolation_level)
    if isolation is not None:
        configs["isolation.level"] = isolation
    return configs, client_properties.flag(configs, "enable.auto.commit", True)


def _open_consumer(fab: Fabric, args: argparse.Namespace, configs: dict[str, str]) -> Consumer:
    """The topic's consumer (with --group, a member of it), or with --partition one assigned that partition
    at --offset (an offset outside the log is moved to its nearest end, saying so on stderr)."""
    if args.partition is None:
        topics = () if args.include is not None else (args.topic,)
        consumer = fab.consumer(configs, *topics, group_id=args.group, enable_auto_commit=False)
    else:
        consumer = fab.consumer(configs, enable_auto_commit=False)
    try:
        if args.include is not None:
            consumer.subscribe(pattern=args.include)
        if args.partition is not None:
            tp = (args.topic, args.partition)
            consumer.assign([tp])
            if isinstance(args.offset, int):
                consumer.seek(*tp, _within_log(consumer, tp, args.offset))
        for tp in consumer.assignment():
            consumer.position(*tp)  # start now, so records produced from here on are not skipped
    except BaseException:
        consumer.close()
        raise
    return consumer


def _within_log(consumer: Consumer, tp: TopicPartition, offset: int) -> int:
    (start,), (end,) = consumer.beginning_offsets([tp]).values(), consumer.end_offsets([tp]).values()
    if start <= offset <= end:
        return offset
    moved = min(max(offset, start), end)
    print(f"Offset {offset} is outside {tp[0]}-{tp[1]}'s log [{start}, {end}]; reading from {moved}",
          file=sys.stderr)
    return moved


def _reached_end(consumer: Consumer, ends: dict[NamedPartition, int]) -> bool:
    """kcat -e: every assigned partition's position has reached its end offset. `ends` caches the end offsets;
    they are read again once every position reached them, so records appended meanwhile are printed too."""
    assigned = consumer.assignment()
    if not assigned or any(consumer.position(*tp) < ends.get(tp, 0) for tp in assigned):
        return False
    ends.update(consumer.end_offsets(assigned))
    return all(consumer.position(*tp) >= ends[tp] for tp in assigned)


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
    """Print records until --max-messages, --timeout-ms, --exit-at-end or a signal; commit what was printed
    (with --group)."""
    configs, commit_printed = _consumer_configs(args)
    _check_consume_options(args)
    formatter = None if args.format == "json" else _formatter(args)
    out = sys.stdout.buffer
    count = 0
    ends: dict[NamedPartition, int] = {}
    with _stop_on_signals() as stop, open_fabric(args) as fab, _open_consumer(fab, args, configs) as consumer:
        typed: dict[str, bool] = {}  # topic -> whether its values are typed, looked up at its first record
        last_record = time.monotonic()
        while not stop.is_set() and count != args.max_messages:
            printed: dict[TopicPartition, int] = {}
            for record in consumer.poll(POLL_S):
                if record.topic not in typed:
                    typed[record.topic] = fab.describe_topic(record.topic).value_schema is not None
                is_typed = typed[record.topic]
                out.write(json_line(record, is_typed) if formatter is None else formatter.line(record, is_typed))
                printed[(record.topic, record.partition)] = record.offset + 1
                count += 1
                if count == args.max_messages:
                    break
            if printed:
                out.flush()
                last_record = time.monotonic()
                if args.group is not None and commit_printed:
                    consumer.commit(printed)
            elif args.exit_at_end and _reached_end(consumer, ends):
                break  # an empty poll: nothing is buffered, so each position is what was printed
            elif args.timeout_ms is not None and time.monotonic() - last_record >= args.timeout_ms / 1000:
                break  # checked after a poll, so a slow start never times out before looking
    print(f"Processed a total of {count} messages", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric produce` and `fabric consume`."""
    p = add_command(subparsers, "produce", produce, "send one record per stdin line to a topic",
                    description="Send one record per line of stdin (like kafka-console-producer). For a typed "
                                "topic each line is a JSON object with the schema's fields (blank lines are "
                                "skipped). Prints progress on stderr every 100000 records.")
    add_subject(p, "topic", "--topic", "topic", "TOPIC", "the topic")
    p.add_argument("--partition", type=int, metavar="P", help="send every record to partition P")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value (Kafka's parse.key=true "
                        "key.separator=SEP)")
    p.add_argument("--request-required-acks", metavar="ACKS", help="the producer's acks: all (-1), 1 or 0")
    client_properties.add_options(p, "producer", "acks=all linger.ms=5")
    p.add_argument("--property", action="extend", nargs="+", metavar="K=V",
                   help="line reader properties, as Kafka's console producer (KIP-798): "
                        "parse.headers=true reads `k:v,k2:v2<TAB>value` (headers.delimiter, default tab; "
                        "headers.separator, default ','; headers.key.separator, default ':'), parse.key=true "
                        "and key.separator (default tab) as --key-separator; repeatable")

    p = add_command(subparsers, "consume", consume, "print a topic's records",
                    description="Print records (like kafka-console-consumer): values as text, or one JSON object "
                                "per record with --format json. Runs until Ctrl-C unless --max-messages, "
                                "--timeout-ms or --exit-at-end stops it; with --group it commits what it printed.")
    add_subject(p, "topic", "--topic", "topic", "TOPIC", "the topic", required=False)
    p.add_argument("--include", "--whitelist", metavar="REGEX",
                   help="every topic whose name matches REGEX instead (kafka-console-consumer's --include; "
                        "--whitelist, its old name), topics created later too")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start when there is no committed offset (default: only new records)")
    p.add_argument("--group", metavar="G", help="consumer group: resume from and commit its offsets")
    p.add_argument("--partition", type=int, metavar="P",
                   help="read only partition P (no group; start with --offset, default latest)")
    p.add_argument("--offset", type=_start_offset, metavar="N|earliest|latest",
                   help="with --partition: the offset to start at (one outside the log starts at its nearest end)")
    p.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                   help="read_committed (the default) leaves out the records of aborted transactions and stops "
                        "at the last stable offset; read_uncommitted reads them as well")
    client_properties.add_options(p, "consumer", "max.poll.records=100 client.id=me")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS milliseconds without a new record")
    p.add_argument("--exit-at-end", action="store_true",
                   help="exit once every assigned partition has been read to its end offset (kcat -e)")
    p.add_argument("--property", action="extend", nargs="+", metavar="K=V",
                   help="text format properties, as Kafka's console consumer: print.timestamp, print.partition, "
                        "print.offset, print.headers, print.key, print.value (true/false), key.separator "
                        "(default tab), line.separator, headers.separator (','), headers.key.separator (':'), "
                        "null.literal ('null'); repeatable")
    p.add_argument("--print-key", action="store_true", help="text format: print key<SEP>value (print.key=true)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="separator between the printed fields (key.separator; default: tab)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the value (typed topics: a JSON object), with the fields --property asks for; "
                        "json: topic, partition, offset, timestamp (ms), key, value, headers per line; a key, "
                        "value or header value that is not utf-8 shows as base64 under key_b64 / value_b64, "
                        "binary fields of typed values as base64, NaN and infinities as the strings \"NaN\", "
                        "\"Infinity\", \"-Infinity\" (as Spark's to_json), so every line is valid JSON")
