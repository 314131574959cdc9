"""A group's offsets are unstable while any producer transaction commits them, and stable again once every one
has finished (or failed)."""
from __future__ import annotations

import pytest

from fabric.common.errors import UnstableOffsetCommitError
from fabric.coordinator.unstable_offsets import UnstableGroups


def test_reads_are_refused_until_every_transaction_committing_the_group_has_finished() -> None:
    groups = UnstableGroups(wait_s=0.01)
    with groups.committing("g"):
        with pytest.raises(RuntimeError), groups.committing("g"):
            raise RuntimeError("a failed commit")  # ends unstable all the same
        with pytest.raises(UnstableOffsetCommitError, match="committing group 'g'"):
            groups.wait_stable("g")  # the first transaction is still committing
        groups.wait_stable("other")  # other groups are not held up
    groups.wait_stable("g")
    assert UnstableOffsetCommitError.retriable
