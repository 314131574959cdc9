"""The argument rules of fabric.common.checks: partition counts, offsets, timeouts and (topic, partition) pairs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fabric.common import checks
from fabric.common.errors import InvalidArgumentError, InvalidPartitionsError, InvalidTopicError


@pytest.mark.parametrize("count", [0, -1, True, False, 2**63, "3", 2.0, None])
def test_partition_counts_outside_1_to_max_are_refused(count):
    with pytest.raises(InvalidPartitionsError, match=f"partition count must be an integer from 1 to "
                                                     f"{checks.LONG_MAX}"):
        checks.partition_count(count)


def test_partition_counts_accept_whole_numbers():
    assert checks.partition_count(1) == 1
    assert checks.partition_count(np.int64(checks.LONG_MAX)) == checks.LONG_MAX


def test_offsets_and_timeouts():
    assert checks.offset(0) == 0 and checks.offset(np.int32(7)) == 7
    for bad in (-1, 1.5, "3", True, 2**63):
        with pytest.raises(InvalidArgumentError, match="seek offset must be an integer from 0"):
            checks.offset(bad, "seek offset")
    assert checks.timeout(0) == 0.0 and checks.timeout(math.inf) == math.inf
    for bad in (-0.1, math.nan, "1", None, True):
        with pytest.raises(InvalidArgumentError, match="poll timeout must be a number of seconds >= 0"):
            checks.timeout(bad, "poll timeout")


def test_topic_partition_pairs():
    assert checks.topic_partitions([("a", 0), ["b", np.int64(2)]], "assign()") == [("a", 0), ("b", 2)]
    assert checks.topic_partitions((), "seek()") == []
    for bad in (("a", 0), "a", 5, None):
        with pytest.raises(InvalidArgumentError, match=r"assign\(\) takes a list of \(topic, partition\) pairs"):
            checks.topic_partitions(bad, "assign()")
    for bad in ([("a",)], [("a", 0, 1)], ["a0"]):
        with pytest.raises(InvalidArgumentError, match=r"assign\(\) takes \(topic, partition\) pairs"):
            checks.topic_partitions(bad, "assign()")
    with pytest.raises(InvalidArgumentError, match="partition of 'a' in assign"):
        checks.topic_partitions([("a", "0")], "assign()")
    with pytest.raises(InvalidTopicError):
        checks.topic_partitions([("../x", 0)], "assign()")


def test_values_by_partition():
    assert checks.by_partition({("a", 0): 5}, "commit()", checks.offset) == {("a", 0): 5}
    with pytest.raises(InvalidArgumentError, match=r"commit\(\) takes a dict"):
        checks.by_partition([("a", 0)], "commit()", checks.offset)
    with pytest.raises(InvalidArgumentError, match=r"the value for \('a', 0\) in commit\(\)"):
        checks.by_partition({("a", 0): -5}, "commit()", checks.offset)
