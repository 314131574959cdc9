"""fabric.notebook on an embedded fabric: records as DataFrames with no Spark (sample, tail, tail with follow),
and a Monitor's throughput and lag over time."""
from __future__ import annotations

import threading
import time

import pandas as pd
import pyarrow as pa
import pytest
from matplotlib.figure import Figure

from fabric.common.errors import InvalidArgumentError, UnknownTopicError
from fabric.notebook import Monitor, sample, tail


@pytest.fixture
def clicks(fab):
    """Topic clicks: 3 partitions, 10 records in each (values p<partition>-<i>), timestamps in send order, a minute
    old (older ones would be past retention.ms, and the fabric's retention could delete them while the test runs)."""
    fab.create_topic("clicks", partitions=3)
    base = time.time_ns() // 1_000_000 - 60_000
    with fab.producer() as producer:
        for i in range(10):
            for p in range(3):
                producer.send("clicks", f"p{p}-{i}".encode(), partition=p, timestamp=base + 3 * i + p)
    return fab


def values(frame: pd.DataFrame) -> list[str]:
    return [v.decode() for v in frame["value"]]


def test_sample_is_the_first_records_oldest_first_with_kafkas_columns(clicks):
    first = sample("clicks", 4, fab=clicks)
    assert values(first) == ["p0-0", "p1-0", "p2-0", "p0-1"]
    assert {"key", "value", "topic", "partition", "offset", "timestamp"} <= set(first.columns)
    assert list(first["offset"]) == [0, 0, 0, 1] and set(first["topic"]) == {"clicks"}
    assert len(sample("clicks", 100, fab=clicks.url)) == 30  # a URL works too; n past the end: everything


def test_tail_is_the_last_records(clicks):
    last = tail("clicks", 4, fab=clicks)  # the newest 4 of all partitions, oldest first
    assert values(last) == ["p2-8", "p0-9", "p1-9", "p2-9"]
    assert list(last["offset"]) == [8, 9, 9, 9]


def test_tail_follow_yields_the_last_records_then_new_ones(clicks):
    follow = tail("clicks", 2, fab=clicks, follow=True, timeout=60)
    assert values(next(follow)) == ["p1-9", "p2-9"]
    sender = threading.Thread(target=lambda: clicks.producer(linger_ms=0).send("clicks", b"new", partition=1).get(30))
    sender.start()
    fresh = next(follow)
    sender.join()
    assert values(fresh) == ["new"] and list(fresh["partition"]) == [1]
    follow.close()  # closes its consumer


def test_a_typed_topic_samples_as_columns(fab):
    fab.create_topic("payments", schema=pa.schema([("user", pa.string()), ("amount", pa.float64())]))
    fab.producer().send_batch("payments", pa.table({"user": ["ann", "bob"], "amount": [9.5, 1.0]}))
    frame = sample("payments", 5, fab=fab)
    assert list(frame["user"]) == ["ann", "bob"] and list(frame["amount"]) == [9.5, 1.0]


def test_bad_arguments_name_the_problem(clicks):
    with pytest.raises(InvalidArgumentError, match="n must be an integer from 1"):
        sample("clicks", 0, fab=clicks)
    with pytest.raises(UnknownTopicError):
        tail("nope", fab=clicks)
    with pytest.raises(UnknownTopicError):
        Monitor("nope", fab=clicks)
    with pytest.raises(InvalidArgumentError, match="at least one topic"):
        Monitor([], fab=clicks)


def test_monitor_reports_throughput_and_lag_over_time(clicks):
    times = iter([100.0, 102.0, 106.0])
    monitor = Monitor("clicks", group="dashboard", fab=clicks, clock=lambda: next(times))
    with clicks.consumer("clicks", group_id="dashboard", auto_offset_reset="earliest") as consumer:
        consumer.commit({("clicks", p): 5 for p in range(3)})
        monitor.read()  # 30 records, lag 15
        with clicks.producer() as producer:
            for _ in range(10):
                producer.send("clicks", b"x", partition=0)
        monitor.read()  # 40 records in 2 s, lag 25
        consumer.commit({("clicks", p): 10 for p in range(3)})
        monitor.read()  # no new records in 4 s, lag 10
    frame = monitor.frame()
    assert list(frame["records"]) == [30, 40, 40] and list(frame["lag"]) == [15, 25, 10]
    assert pd.isna(frame["throughput"].iloc[0]) and list(frame["throughput"].iloc[1:]) == [5.0, 0.0]
    figure = monitor.plot()
    assert isinstance(figure, Figure) and len(figure.axes) == 2
    assert list(figure.axes[1].lines[0].get_ydata()) == [15, 25, 10]


def test_a_plot_needs_two_readings(clicks):
    monitor = Monitor("clicks", fab=clicks)
    monitor.read()
    with pytest.raises(InvalidArgumentError, match="at least 2 readings"):
        monitor.plot()
