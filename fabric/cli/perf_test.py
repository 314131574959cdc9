"""`fabric producer-perf-test` and `fabric consumer-perf-test`: Kafka's kafka-producer-perf-test and
kafka-consumer-perf-test, with their flags, so that a cluster is sized with the lines its operators already type.

The producer test sends `--num-records` records one send() at a time, as Kafka's does, at most `--throughput`
records/s, and prints a line every reporting interval and a summary with latency percentiles. A delivery callback
costs a Python producer several times a send(), so latency is sampled on one record in every few (at most 64),
not on each. The consumer test reads `--messages` records with poll_batch() (no per-record work) and prints
Kafka's CSV line: MB and records consumed, their rates, and the time spent joining the group and fetching.
"""
from __future__ import annotations

import argparse
import random
import string
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.cli import client_properties, perf_plot
from fabric.cli.common import CommandError, add_command, add_subject, bootstrap_url, open_fabric
from fabric.client.client_metrics import Metrics
from fabric.client.consumer import Consumer
from fabric.client.delivery import DeliveryCallback
from fabric.client.producer import Producer

MB = 1024 * 1024
MOST_SAMPLE_STRIDE = 64  # a delivery callback on one record in at most this many
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"  # Kafka's test's
TRANSACTION_DURATION_MS = 3000  # a transactional test's transactions, by default (Kafka's test's)
POLL_S = 0.1  # the consumer test's longest wait per poll, so that its timeout is noticed promptly
NOT_RECORD_BYTES = {"topic", "partition", "offset", "timestamp", "timestampType", "headers"}  # not counted as data
CSV_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


# -- producer-perf-test ------------------------------------------------------------------------------
@dataclass
class _Window:
    """Acknowledged records, their bytes and sampled latencies (ms) since `began` (perf_counter seconds)."""

    began: float
    records: int = 0
    bytes: int = 0
    latencies: list[float] = field(default_factory=list)

    def line(self, now: float) -> str:
        seconds = max(now - self.began, 1e-9)
        lat = self.latencies or [0.0]
        return (f"{self.records} records sent, {self.records / seconds:.1f} records/sec "
                f"({self.bytes / seconds / MB:.2f} MB/sec), {np.mean(lat):.1f} ms avg latency, "
                f"{max(lat):.1f} ms max latency.")

    def point(self, now: float, started: float) -> perf_plot.Point:
        """The window as --plot draws it, ending at `now`, `started` being when the test started."""
        lat = self.latencies or [0.0]
        return perf_plot.Point(now - started, self.records / max(now - self.began, 1e-9), float(np.mean(lat)),
                               max(lat))


class _SendStats:
    """What a producer test prints: a window line every `interval_s`, from the sampled acknowledgements (each
    standing for `stride` records), and the whole run's summary."""

    def __init__(self, stride: int, interval_s: float) -> None:
        self.stride, self.interval_s = stride, interval_s
        self.started = time.perf_counter()
        self.window = _Window(self.started)
        self.latencies: list[float] = []
        self.errors: list[BaseException] = []
        self.points: list[perf_plot.Point] = []  # every window's, for --plot

    def sampled(self, sent_at: float, size: int) -> DeliveryCallback:
        """The delivery callback of a record sent at `sent_at`, `size` bytes."""
        def delivered(error: BaseException | None, _metadata: object) -> None:
            if error is not None:
                self.errors.append(error)
                return
            now = time.perf_counter()
            latency = (now - sent_at) * 1000
            self.latencies.append(latency)
            self.window.records += self.stride
            self.window.bytes += self.stride * size
            self.window.latencies.append(latency)
        return delivered

    def report_due(self) -> None:
        """Print the window's line once it is `interval_s` old (Kafka's five-second lines), and start the next."""
        now = time.perf_counter()
        if now - self.window.began >= self.interval_s:
            print(self.window.line(now), flush=True)
            self.points.append(self.window.point(now, self.started))
            self.window = _Window(now)

    def plotted(self) -> list[perf_plot.Point]:
        """Every window's point, the last one's (cut short by the test's end) among them when it has records."""
        last = [self.window.point(time.perf_counter(), self.started)] if self.window.records else []
        return self.points + last

    def summary(self, records: int, total_bytes: int) -> str:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        lat = np.array(self.latencies or [0.0])
        p50, p95, p99, p999 = np.percentile(lat, [50, 95, 99, 99.9])
        return (f"{records} records sent, {records / seconds:.1f} records/sec ({total_bytes / seconds / MB:.2f} "
                f"MB/sec), {lat.mean():.2f} ms avg latency, {lat.max():.2f} ms max latency, {p50:.2f} ms 50th, "
                f"{p95:.2f} ms 95th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th.")


def _print_metrics(metrics: Metrics) -> None:
    """--print-metrics: each of the client's metrics as `group:name: value`, as Kafka's tools print theirs."""
    for group, values in metrics.items():
        for name, value in sorted(values.items()):
            print(f"{group}:{name}: {value}")


def _payloads(args: argparse.Namespace) -> list[bytes]:
    """The records' values: one of --record-size random letters (Kafka's), or the --payload-file's parts split
    at --payload-delimiter, each record taking one at random."""
    if (args.record_size is None) == (args.payload_file is None):
        raise CommandError("give --record-size BYTES or --payload-file FILE (one of them)")
    if args.record_size is not None:
        if args.record_size < 0:
            raise CommandError(f"--record-size must be >= 0 bytes, got {args.record_size}")
        return [bytes(random.choices(string.ascii_uppercase.encode(), k=args.record_size))]
    try:
        with open(args.payload_file, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise CommandError(f"--payload-file {args.payload_file}: {exc.strerror}") from None
    parts = [p for p in text.split(args.payload_delimiter.encode()) if p]
    if not parts:
        raise CommandError(f"--payload-file {args.payload_file} holds no payload between "
                           f"{args.payload_delimiter!r} delimiters; give a file with at least one")
    return parts


def _producer_configs(args: argparse.Namespace) -> dict[str, str]:
    """--producer.config and --producer-props (Kafka's), with bootstrap.servers taken as the fabric to use."""
    configs = client_properties.given(args, "producer")
    servers = configs.pop("bootstrap.servers", None)
    if servers is not None:
        try:
            url = bootstrap_url(servers)
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"bootstrap.servers: {exc}") from None
        if getattr(args, "url", None) not in (None, url):
            raise CommandError(f"bootstrap.servers={servers} and --url/--bootstrap-server {args.url} name two "
                               "fabrics; give one")
        args.url = url
    return configs


def _throttled(sent: int, rate: float, started: float) -> None:
    """Wait until `sent` records are on pace for `rate` records/s from `started` (Kafka's throttler)."""
    ahead = started + sent / rate - time.perf_counter()
    if ahead > 0.001:  # (a sleep per record would cost more than the records)
        time.sleep(ahead)


def producer_perf_test(args: argparse.Namespace) -> int:
    """Send --num-records records at most --throughput a second, printing windows and a summary."""
    if args.num_records < 1:
        raise CommandError(f"--num-records must be at least 1, got {args.num_records}")
    if args.throughput == 0 or args.throughput < -1:
        raise CommandError(f"--throughput is records/s > 0, or -1 for no limit; got {args.throughput:g}")
    if args.reporting_interval < 1:
        raise CommandError(f"--reporting-interval is milliseconds >= 1, got {args.reporting_interval}")
    perf_plot.check(args.plot)
    configs = _producer_configs(args)
    duration_ms = _transactions(args, configs)
    stride = max(1, min(MOST_SAMPLE_STRIDE, args.num_records // 1000))
    with open_fabric(args) as fab, fab.producer(configs) as producer:
        most = fab.cluster.coordinator.topic(args.topic).settings["max.message.bytes"]  # (an unknown topic: named)
        if args.record_size is not None and args.record_size > most:
            raise CommandError(f"--record-size {args.record_size} is over max.message.bytes={most} of topic "
                               f"{args.topic!r}: give at most {most}, or raise it (fabric configs --alter)")
        payloads = _payloads(args)
        stats = _SendStats(stride, args.reporting_interval / 1000)
        total_bytes = _send_all(producer, args, payloads, stats, duration_ms)
        producer.flush()
        print(stats.summary(args.num_records, total_bytes), flush=True)
        if args.plot:
            perf_plot.save(args.plot, f"producer-perf-test, {args.topic}: acknowledged records", stats.plotted())
        if args.print_metrics:
            _print_metrics(producer.metrics())
        failed = producer.metrics()["producer-metrics"]["record-error-total"]
    if failed:
        first = f" (the first sampled: {stats.errors[0]})" if stats.errors else ""
        print(f"error: {failed} of {args.num_records} records failed{first}", file=sys.stderr)
        return 1
    return 0


def _transactions(args: argparse.Namespace, configs: dict[str, str]) -> int | None:
    """How long each transaction runs (ms), None unless the test is transactional: --transactional-id,
    --transaction-duration-ms or a transactional.id among the producer's configs (which the first sets), as
    Kafka's test takes them (the id then defaults to DEFAULT_TRANSACTIONAL_ID, the duration to 3000 ms)."""
    duration_ms = args.transaction_duration_ms
    if duration_ms is not None and duration_ms < 1:
        raise CommandError(f"--transaction-duration-ms must be at least 1, got {duration_ms}")
    if args.transactional_id is not None:
        configs["transactional.id"] = args.transactional_id
    elif duration_ms is not None:
        configs.setdefault("transactional.id", DEFAULT_TRANSACTIONAL_ID)
    return (duration_ms or TRANSACTION_DURATION_MS) if configs.get("transactional.id") else None


def _send_all(producer: Producer, args: argparse.Namespace, payloads: list[bytes], stats: _SendStats,
              duration_ms: int | None) -> int:
    """send() each record, a sampled one with its delivery callback, in transactions of `duration_ms` each
    (committed as each ends, the last at the end) unless it is None; the bytes sent."""
    single = payloads[0] if len(payloads) == 1 else None
    total = 0
    if duration_ms is not None:
        producer.init_transactions()
        producer.begin_transaction()
        began = time.perf_counter()
    for i in range(args.num_records):
        if duration_ms is not None and (time.perf_counter() - began) * 1000 >= duration_ms:
            producer.commit_transaction()
            producer.begin_transaction()
            began = time.perf_counter()
        value = single if single is not None else random.choice(payloads)
        total += len(value)
        if i % stats.stride:
            producer.send(args.topic, value)
        else:
            producer.send(args.topic, value).add_done_callback(stats.sampled(time.perf_counter(), len(value)))
            stats.report_due()
        if args.throughput > 0:
            _throttled(i + 1, args.throughput, stats.started)
    if duration_ms is not None:
        producer.commit_transaction()
    return total


# -- consumer-perf-test ------------------------------------------------------------------------------
def _data_bytes(table: pa.Table) -> int:
    """The bytes of the records' keys and values (Kafka's count), typed values by their Arrow size."""
    total = 0
    for name in table.column_names:
        if name in NOT_RECORD_BYTES:
            continue
        column = table.column(name)
        if pa.types.is_binary(column.type) or pa.types.is_string(column.type):
            total += pc.sum(pc.binary_length(column)).as_py() or 0
        else:
            total += column.nbytes
    return total


def _stamp(seconds: float) -> str:
    """Kafka's perf-test time: local time, milliseconds after a colon."""
    moment = datetime.fromtimestamp(seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"


def _csv_row(start: float, end: float, joined_s: float, records: int, data: int) -> str:
    """One of Kafka's consumer perf-test rows, for the span [start, end] (epoch seconds), `joined_s` of it the
    group's join."""
    seconds = max(end - start, 1e-9)
    fetch_s = max(seconds - joined_s, 1e-9)
    mb = data / MB
    return (f"{_stamp(start)}, {_stamp(end)}, {mb:.4f}, {mb / seconds:.4f}, {records}, {records / seconds:.4f}, "
            f"{joined_s * 1000:.0f}, {fetch_s * 1000:.0f}, {mb / fetch_s:.4f}, {records / fetch_s:.4f}")


def consumer_perf_test(args: argparse.Namespace) -> int:
    """Read --messages records of the topic as one group member, printing Kafka's CSV line."""
    if args.messages < 1:
        raise CommandError(f"--messages must be at least 1, got {args.messages}")
    if args.timeout < 1 or args.reporting_interval < 1:
        raise CommandError("--timeout and --reporting-interval are milliseconds >= 1")
    perf_plot.check(args.plot)
    configs = client_properties.given(args, "consumer")
    group = client_properties.take(configs, "group.id", "--group", args.group)
    configs.setdefault("auto.offset.reset", "latest" if args.from_latest else "earliest")
    if not args.hide_header:
        print(CSV_HEADER, flush=True)
    group = group or f"perf-consumer-{random.randrange(100_000)}"  # (Kafka's default: a group of its own)
    with open_fabric(args) as fab:
        started = time.time()  # (a subscribing consumer joins its group as it is made)
        with fab.consumer(configs, args.topic, group_id=group) as consumer:
            return _read_all(consumer, args, started)


def _read_point(started: float, begin: float, end: float, records: int) -> perf_plot.Point:
    """A consumer test's span [begin, end] (epoch seconds) as --plot draws it."""
    return perf_plot.Point(end - started, records / max(end - begin, 1e-9))


def _read_all(consumer: Consumer, args: argparse.Namespace, started: float) -> int:
    """consumer_perf_test's reading, from `started` (epoch seconds), when the consumer was asked for."""
    joined_s = time.time() - started if consumer.assignment() else None
    records = data = 0
    last_data = interval_start = started
    interval_records = interval_data = 0
    points: list[perf_plot.Point] = []
    while records < args.messages:
        table = consumer.poll_batch(POLL_S)
        now = time.time()
        if joined_s is None and consumer.assignment():
            joined_s = now - started
        if table.num_rows:
            last_data = now
            records += table.num_rows
            data += _data_bytes(table)
        elif (now - last_data) * 1000 > args.timeout:
            print(f"warning: stopped after {records} of the {args.messages} records: none came for "
                  f"{args.timeout} ms (--timeout MS waits longer)", file=sys.stderr)
            break
        if (now - interval_start) * 1000 >= args.reporting_interval:
            line = _csv_row(interval_start, now, 0.0, records - interval_records, data - interval_data)
            print(line, flush=True, file=sys.stdout if args.show_detailed_stats else sys.stderr)
            points.append(_read_point(started, interval_start, now, records - interval_records))
            interval_start, interval_records, interval_data = now, records, data
    print(_csv_row(started, time.time(), joined_s or 0.0, records, data), flush=True)
    if args.plot:
        last = [_read_point(started, interval_start, time.time(), records - interval_records)]
        perf_plot.save(args.plot, f"consumer-perf-test, {args.topic}: records read",
                       points + (last if records > interval_records else []))
    if args.print_metrics:
        _print_metrics(consumer.metrics())
    return 0 if records >= args.messages else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric producer-perf-test` and `fabric consumer-perf-test`."""
    p = add_command(subparsers, "producer-perf-test", producer_perf_test,
                    "send records as fast as asked and print the rate and latency (kafka-producer-perf-test)",
                    description="Send --num-records records of --record-size bytes (or from --payload-file), one "
                                "send() at a time, at most --throughput records/s, and print a line every "
                                "--reporting-interval and a summary: records/s, MB/s, average, max and percentile "
                                "latencies from send() to the acknowledgement (sampled on one record in up to 64).")
    add_subject(p, "topic", "--topic", "topic", "TOPIC", "the topic (it must exist)")
    p.add_argument("--num-records", type=int, required=True, metavar="N", help="how many records to send")
    p.add_argument("--record-size", type=int, metavar="BYTES", help="each record's value: BYTES random letters")
    p.add_argument("--payload-file", metavar="FILE",
                   help="values taken at random from FILE's parts between --payload-delimiter (instead of "
                        "--record-size)")
    p.add_argument("--payload-delimiter", default="\n", metavar="TEXT", help="between --payload-file's values "
                                                                              "(default: a line break)")
    p.add_argument("--throughput", type=float, required=True, metavar="N",
                   help="at most N records/s; -1 for no limit")
    client_properties.add_options(p, "producer", "acks=all linger.ms=5")
    p.add_argument("--producer-props", dest="client_properties", action="extend", nargs="+", metavar="K=V",
                   help="as Kafka's: the producer's configs, bootstrap.servers=HOST:PORT naming the fabric")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                   help="a line of the last MS milliseconds' figures every MS (default 5000)")
    p.add_argument("--print-metrics", action="store_true", help="print the producer's metrics at the end")
    p.add_argument("--plot", metavar="FILE.png", help="draw each window's records/s and latencies into FILE.png")
    p.add_argument("--transactional-id", metavar="ID", help="send in transactions of this transactional.id "
                   f"(default with --transaction-duration-ms: {DEFAULT_TRANSACTIONAL_ID})")
    p.add_argument("--transaction-duration-ms", type=int, metavar="MS", help="commit each transaction after MS "
                   f"milliseconds and begin the next (default when transactional: {TRANSACTION_DURATION_MS})")

    p = add_command(subparsers, "consumer-perf-test", consumer_perf_test,
                    "read records as fast as they come and print the rate (kafka-consumer-perf-test)",
                    description="Read --messages records of the topic as a member of --group (default "
                                "perf-consumer-N) from its start (--from-latest: its end) and print Kafka's CSV "
                                "line: MB and records read, their rates, and the time spent joining the group "
                                "and fetching. A line of each --reporting-interval goes to stderr (to stdout "
                                "with --show-detailed-stats).")
    add_subject(p, "topic", "--topic", "topic", "TOPIC", "the topic")
    p.add_argument("--messages", type=int, required=True, metavar="N", help="how many records to read")
    p.add_argument("--group", metavar="G", help="the consumer group (default: perf-consumer-N, N at random)")
    p.add_argument("--from-latest", action="store_true", help="start at the log end when the group has no offset")
    p.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                   help="stop when no record came for MS milliseconds (default 10000); exits 1")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                   help="a line of each MS milliseconds' figures (default 5000)")
    p.add_argument("--show-detailed-stats", action="store_true", help="the interval lines on stdout")
    p.add_argument("--hide-header", action="store_true", help="leave out the CSV header")
    p.add_argument("--broker-list", dest="url", type=bootstrap_url, default=argparse.SUPPRESS, metavar="HOST:PORT",
                   help="Kafka's old name of --bootstrap-server")
    client_properties.add_options(p, "consumer", "fetch.max.bytes=52428800")
    p.add_argument("--print-metrics", action="store_true", help="print the consumer's metrics at the end")
    p.add_argument("--plot", metavar="FILE.png", help="draw each --reporting-interval's records/s into FILE.png")
