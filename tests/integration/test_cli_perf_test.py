"""`fabric producer-perf-test` and `fabric consumer-perf-test`, run as real subprocesses with the lines Kafka's
kafka-producer-perf-test and kafka-consumer-perf-test take: what they print is checked against what the topic
holds afterwards, and bad input is refused naming the fix."""
from __future__ import annotations

import re

import fabric
from fabric.common.waiting import wait_for

SUMMARY = re.compile(r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms "
                     r"max latency, ([\d.]+) ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, ([\d.]+) ms 99.9th\.$")


def test_producer_perf_test_sends_what_it_reports_and_consumer_perf_test_reads_it(fabric_cli, tmp_path) -> None:
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("perf", partitions=3)
    sent = fabric_cli("--url", url, "producer-perf-test", "--topic", "perf", "--num-records", "5000",
                      "--record-size", "100", "--throughput", "-1", "--producer-props", "acks=all", "linger.ms=2",
                      "--print-metrics")
    assert sent.returncode == 0, sent.stderr
    summary = next(line for line in sent.stdout.splitlines() if line.endswith("99.9th."))
    found = SUMMARY.match(summary)
    assert found and found.group(1) == "5000", summary
    assert float(found.group(2)) <= float(found.group(3))
    assert "producer-metrics:record-send-total: 5000" in sent.stdout
    ends = fabric.connect(url).describe_topic("perf").partitions
    assert sum(p.end_offset for p in ends) == 5000
    values = fabric.connect(url).consumer("perf", auto_offset_reset="earliest").poll(10, max_records=1)
    assert len(values[0].value) == 100 and values[0].value.isalpha()

    read = fabric_cli("--url", url, "consumer-perf-test", "--topic", "perf", "--messages", "5000",
                      "--group", "perf-readers")
    assert read.returncode == 0, read.stderr
    header, row = read.stdout.strip().splitlines()
    assert header.split(", ")[:5] == ["start.time", "end.time", "data.consumed.in.MB", "MB.sec",
                                      "data.consumed.in.nMsg"]
    cells = row.split(", ")
    assert cells[4] == "5000" and abs(float(cells[2]) - 5000 * 100 / 2**20) < 0.001, row
    assert "perf-readers" in fabric.connect(url).list_groups()


def test_a_payload_file_a_throughput_cap_and_a_short_topic(fabric_cli, tmp_path) -> None:
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("perf")
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\n\ngamma\n")
    sent = fabric_cli("--url", url, "producer-perf-test", "--topic", "perf", "--num-records", "300",
                      "--payload-file", str(payloads), "--throughput", "100000")
    assert sent.returncode == 0, sent.stderr
    with fabric.connect(url).consumer("perf", auto_offset_reset="earliest") as consumer:
        seen = {r.value for r in consumer.poll(10, max_records=300)}
    assert seen <= {b"alpha", b"beta", b"gamma"} and len(seen) >= 2

    short = fabric_cli("--url", url, "consumer-perf-test", "--topic", "perf", "--messages", "301", "--timeout",
                       "300", "--hide-header")
    assert short.returncode == 1
    assert "stopped after 300 of the 301 records" in short.stderr
    assert short.stdout.strip().split(", ")[4] == "300"


def test_a_transactional_producer_perf_test_commits_every_transaction_duration(fabric_cli, tmp_path) -> None:
    """--transactional-id and --transaction-duration-ms (Kafka's): the records go in transactions committed as each
    duration ends and at the end, so a read_committed consumer reads them all and the id has committed more than
    one; a duration under 1 ms is refused."""
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("perf-tx", partitions=2)
    sent = fabric_cli("--url", url, "producer-perf-test", "--topic", "perf-tx", "--num-records", "400",
                      "--record-size", "10", "--throughput", "2000", "--transactional-id", "perf-tx-id",
                      "--transaction-duration-ms", "50")
    assert sent.returncode == 0, sent.stderr
    assert fabric.connect(url).describe_transaction("perf-tx-id").committed_sequence >= 1  # 0.2 s at 2,000/s
    with fabric.connect(url).consumer("perf-tx", auto_offset_reset="earliest",
                                      isolation_level="read_committed") as consumer:
        read: list = []
        wait_for(lambda: read.extend(consumer.poll(0.2, max_records=400)) or len(read) >= 400, 30,
                 "the committed records")
    assert len(read) == 400
    refused = fabric_cli("--url", url, "producer-perf-test", "--topic", "perf-tx", "--num-records", "1",
                         "--record-size", "1", "--throughput", "-1", "--transaction-duration-ms", "0")
    assert refused.returncode == 1 and "--transaction-duration-ms must be at least 1" in refused.stderr


def test_perf_tests_plot_their_windows_into_a_png(fabric_cli, tmp_path) -> None:
    """--plot FILE.png: the windows' records/s (and the producer's latencies) drawn into a PNG; another file name is
    refused before anything is sent."""
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("perf-plot")
    for tool, line in (("producer-perf-test", ["--num-records", "600", "--record-size", "10", "--throughput", "3000"]),
                       ("consumer-perf-test", ["--messages", "600"])):
        png = tmp_path / f"{tool}.png"
        done = fabric_cli("--url", url, tool, "--topic", "perf-plot", *line, "--reporting-interval", "50",
                          "--plot", str(png))
        assert done.returncode == 0, done.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    refused = fabric_cli("--url", url, "producer-perf-test", "--topic", "perf-plot", "--num-records", "1",
                         "--record-size", "1", "--throughput", "-1", "--plot", str(tmp_path / "plot.txt"))
    assert refused.returncode == 1 and "give a file name ending in .png" in refused.stderr
    assert fabric.connect(url).describe_topic("perf-plot").partitions[0].end_offset == 600


def test_bad_perf_test_lines_are_refused_naming_the_fix(fabric_cli, tmp_path) -> None:
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("perf")
    cases = [
        (["--topic", "nope", "--num-records", "1", "--record-size", "1", "--throughput", "-1"],
         "topic 'nope' does not exist"),
        (["--topic", "perf", "--num-records", "1", "--throughput", "-1"], "give --record-size BYTES or --payload-file"),
        (["--topic", "perf", "--num-records", "0", "--record-size", "1", "--throughput", "-1"],
         "--num-records must be at least 1"),
        (["--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput", "0"], "or -1 for no limit"),
        (["--topic", "perf", "--num-records", "1", "--record-size", "-3", "--throughput", "-1"],
         "--record-size must be >= 0"),
        (["--topic", "perf", "--num-records", "1", "--record-size", str(10**12), "--throughput", "-1"],
         "is over max.message.bytes=1048588 of topic 'perf'"),
        (["--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput", "-1",
          "--reporting-interval", "0"], "--reporting-interval is milliseconds >= 1"),
        (["--topic", "perf", "--num-records", "1", "--payload-file", str(tmp_path / "missing"), "--throughput", "-1"],
         "No such file"),
        (["--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput", "-1", "--producer-props",
          "bootstrap.servers=localhost:9"], "name two fabrics"),
        (["--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput", "-1", "--producer-props",
          "acks"], "expects key=value"),
    ]
    for line, message in cases:
        done = fabric_cli("--url", url, "producer-perf-test", *line)
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, (line, done.stderr)
    done = fabric_cli("--url", url, "consumer-perf-test", "--topic", "perf", "--messages", "0")
    assert done.returncode == 1 and "--messages must be at least 1" in done.stderr
    assert fabric.connect(url).describe_topic("perf").partitions[0].end_offset == 0  # nothing was sent
