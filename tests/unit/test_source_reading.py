"""A read task's retries (sources/reading.py) on an embedded fabric whose fetches fail on demand (FlakyCluster):
a retriable error (a leader moving or down) is retried within the task with fresh metadata until the plan's
deadline; any other error fails the task at once. (A leader really dying under a task:
tests/integration/test_spark_cluster.py.)"""
from __future__ import annotations

import dataclasses
import time

import pytest

from fabric.common.errors import (
    AuthorizationError,
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotLeaderError,
)
from fabric.sources.fabric_source import read_plan, spark_schema
from fabric.sources.offsets import DataLossError, OffsetRange
from fabric.sources.options import parse_source_options
from fabric.sources.reading import ReadPlan, read_range

VALUES = [f"v-{i}".encode() for i in range(20)]


@pytest.fixture
def plan(fab, fabric_url) -> ReadPlan:
    """Topic t (one partition) holding VALUES; a batch read's plan for it, retrying for up to 30 s."""
    fab.create_topic("t")
    with fab.producer() as producer:
        for value in VALUES:
            producer.send("t", value)
    opts = parse_source_options({"url": fabric_url, "subscribe": "t"}, streaming=False)
    return dataclasses.replace(read_plan(opts, spark_schema(None, False)), retry_timeout_s=30.0)


def values(plan: ReadPlan, cluster) -> list[bytes]:
    return [v for batch in read_range(plan, OffsetRange("t", 0, 0, len(VALUES)), cluster)
            for v in batch.column("value").to_pylist()]


@pytest.mark.parametrize("error", [NotLeaderError("moved"), FencedLeaderEpochError("stale epoch"),
                                   LeaderNotAvailableError("no leader yet")])
def test_a_retriable_error_is_retried_within_the_task(plan, fab, flaky_cluster, error) -> None:
    flaky = flaky_cluster(fab.cluster)
    flaky.fail("fetch", 3, error)
    assert values(plan, flaky) == VALUES
    assert flaky.calls["fetch"] == 4  # three refused, then one read it all


def test_another_error_fails_the_task_at_once(plan, fab, flaky_cluster) -> None:
    flaky = flaky_cluster(fab.cluster)
    flaky.fail("fetch", 1, AuthorizationError("not allowed"))
    with pytest.raises(AuthorizationError, match="not allowed"):
        values(plan, flaky)
    assert flaky.calls["fetch"] == 1


def test_retries_end_at_the_plans_deadline(plan, fab, flaky_cluster) -> None:
    flaky = flaky_cluster(fab.cluster)
    flaky.fail("fetch", 10_000, LeaderNotAvailableError("offline for good"))
    started = time.monotonic()
    with pytest.raises(LeaderNotAvailableError, match="offline for good"):
        values(dataclasses.replace(plan, retry_timeout_s=1.0), flaky)
    assert 1.0 <= time.monotonic() - started < 10.0
    assert 2 <= flaky.calls["fetch"] < 100  # with a backoff between attempts, not a busy loop


@pytest.mark.parametrize("fail", [True, False])
@pytest.mark.parametrize("start", [0, len(VALUES) + 2])
def test_a_range_past_a_shorter_logs_end_is_data_loss_at_once(plan, fab, fail: bool, start: int) -> None:
    """A replayed batch planned before its topic was re-created with fewer records: where no leader can catch up
    (an unreplicated topic), the records past the end are lost now, not after the plan's whole retry time, whether
    the range ends past the log's end or starts there too (the fetch is then refused as out of range)."""
    plan = dataclasses.replace(plan, fail_on_data_loss=fail, retry_timeout_s=600.0)
    past = OffsetRange("t", 0, start, len(VALUES) + 5)
    started = time.monotonic()
    if fail:
        with pytest.raises(DataLossError, match=f"offsets {max(start, len(VALUES))} to {len(VALUES) + 4} of topic 't' "
                                                "partition 0 are no longer in the log"):
            list(read_range(plan, past, fab.cluster))
    else:
        got = [v for batch in read_range(plan, past, fab.cluster) for v in batch.column("value").to_pylist()]
        assert got == VALUES[start:]
    assert time.monotonic() - started < 60  # (it waited the 600 s before)
