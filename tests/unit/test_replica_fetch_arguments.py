"""A replica_fetch's arguments at a node's protocol port (fabric/server/node/service.py): `partitions` checked and
made tuples by msgspec, whatever it refuses refused with the signature check's error, the other arguments checked
as before."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidRequestError
from fabric.server.node.service import _checked_fetch_args


def checked(**args):
    _checked_fetch_args(args)
    return args


def test_partitions_are_tuples_once_checked_and_every_other_argument_is_checked_too() -> None:
    args = checked(replica_id=2, partitions=[["t", 0, 5, 1, "id"], ["t", 1, 0, 1, "id"]], max_wait_ms=0)
    assert args["partitions"] == [("t", 0, 5, 1, "id"), ("t", 1, 0, 1, "id")]
    with pytest.raises(InvalidRequestError, match="argument 'max_wait_ms' must be int"):
        checked(replica_id=2, partitions=[], max_wait_ms="soon")
    with pytest.raises(InvalidRequestError, match="unknown argument"):
        checked(replica_id=2, partitions=[["t", 0, 5, 1, "id"]], hurry=True)
    with pytest.raises(InvalidRequestError, match="missing argument"):
        checked(partitions=[["t", 0, 5, 1, "id"]])


@pytest.mark.parametrize("partition", [["t", True, 0, 0, "id"], ["t", 2**63, 0, 0, "id"], ["t", 0, 0, 0],
                                       [1, 0, 0, 0, "id"], ["t", 0.0, 0, 0, "id"], {"topic": "t"}, "t-0"])
def test_a_partition_of_another_shape_is_refused_naming_the_argument(partition) -> None:
    with pytest.raises(InvalidRequestError, match="argument 'partitions' must be list"):
        checked(replica_id=2, partitions=[["t", 0, 0, 0, "id"], partition])
