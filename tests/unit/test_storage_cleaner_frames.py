"""The cleaner's decision for each frame (fabric/storage/cleaner.py): over frames of one to four records, some keys
written again within a frame and some values null (tombstones), a pass keeps exactly each key's latest record, at its
offset; once delete.retention.ms has passed since that pass, the next one drops the tombstones among them too. Checked
against a model of the writes (hypothesis)."""
from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_storage_compaction import Clock, batch, open_log

KEYS = [b"a", b"b", b"c", b"d", b"e"]
# a frame: 1 to 4 (key, value) records; a None value is a tombstone
frames = st.lists(st.lists(st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=1, max_size=6)),
                           min_size=1, max_size=4), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(written=frames, later=frames)
def test_a_pass_keeps_each_keys_latest_record_and_a_later_one_drops_expired_tombstones(storage, written, later
                                                                                          ) -> None:
    clock = Clock()
    with tempfile.TemporaryDirectory() as directory:
        plog = open_log(storage, directory, clock, delete_retention_ms=60_000)
        latest: dict[bytes, tuple[int, bytes | None]] = {}

        def write(frames_: list[list[tuple[bytes, bytes | None]]]) -> None:
            for pairs in frames_:
                base = plog.append(batch(storage, pairs, 1_000))
                latest.update((key, (base + i, value)) for i, (key, value) in enumerate(pairs))

        def kept() -> list[tuple[int, bytes, bytes | None]]:
            return sorted((offset, key, value) for key, (offset, value) in latest.items())
        write(written)
        cleaned = plog.end_offset
        first = plog.clean(force=True)
        assert storage.keyed_records(plog) == kept(), first.describe()
        assert first.records_removed == cleaned - len(kept()) and first.tombstones_removed == 0

        write(later)  # (some keys written again: tombstones the first pass kept may no longer be the latest)
        clock.ms += 60_000  # the tombstones the first pass cleaned are now old enough to go; the later ones not
        second = plog.clean(force=True)
        expired = [(offset, key) for offset, key, value in kept() if value is None and offset < cleaned]
        assert storage.keyed_records(plog) == [r for r in kept() if (r[0], r[1]) not in expired], second.describe()
        assert second.tombstones_removed == len(expired), second.describe()
        storage.assert_clean(directory, plog.end_offset)
