"""Log compaction (fabric/storage/cleaner.py, segment_swap.py, cleaner_checkpoint.py): the latest record of each
key survives with its offset, tombstones delete keys and go after delete.retention.ms, keyless records are
refused, readers see compaction's gaps as gaps, followers copy cleaned segments, and the dirty ratio and lags
decide when a pass runs."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from fabric.common.config import TopicConfig
from fabric.common.errors import InvalidConfigError, InvalidProducerEpochError, InvalidRecordError
from fabric.common.records import TIMESTAMP
from fabric.common.types import ProducerBatch
from fabric.storage.cleaner_checkpoint import CleanerCheckpoint
from fabric.storage.log import Log

COMPACT = dict(cleanup_policy="compact", segment_bytes=1200, index_interval_bytes=200, segment_ms=2**62)


class Clock:
    """A clock the test moves (ms)."""

    def __init__(self) -> None:
        self.ms = 10_000_000

    def now_ms(self) -> int:
        return self.ms

    def now_us(self) -> int:
        return self.ms * 1000

    def monotonic_ms(self) -> int:
        return self.ms


def batch(storage, pairs: list[tuple[bytes | None, bytes | None]], ts_ms: int) -> pa.RecordBatch:
    n = len(pairs)
    return pa.RecordBatch.from_arrays(
        [pa.array([ts_ms * 1000] * n, TIMESTAMP), pa.array([k for k, _ in pairs], pa.binary()),
         pa.nulls(n, storage.SCHEMA.field("headers").type), pa.array([v for _, v in pairs], pa.binary())],
        schema=storage.SCHEMA)


def open_log(storage, directory: str, clock: Clock | None = None, replica: bool = False, **config) -> Log:
    overrides = {k.replace("_", "."): v for k, v in {**COMPACT, **config}.items()}
    return Log(directory, storage.SCHEMA, TopicConfig(overrides), clock=clock or Clock(), replica=replica)


def fill(storage, plog: Log, rounds: int, keys: int, ts_ms: int) -> dict[bytes, tuple[int, bytes]]:
    """`rounds` updates of each of `keys` keys, a few per batch; the latest (offset, value) of each key."""
    return latest_below(written(storage, plog, rounds, keys, ts_ms), 2**62)


def written(storage, plog: Log, rounds: int, keys: int, ts_ms: int) -> list[tuple[int, bytes, bytes]]:
    """Append `rounds` updates of each of `keys` keys, a few per batch; every (offset, key, value) written."""
    out = []
    for r in range(rounds):
        for k in range(0, keys, 3):
            pairs = [(f"k{j}".encode(), f"r{r}-k{j}".encode() * 4) for j in range(k, min(k + 3, keys))]
            base = plog.append(batch(storage, pairs, ts_ms))
            out += [(base + i, key, value) for i, (key, value) in enumerate(pairs)]
    return out


def latest_below(writes: list[tuple[int, bytes, bytes]], end: int) -> dict[bytes, tuple[int, bytes]]:
    """The latest (offset, value) of each key among the writes below offset `end`."""
    return {key: (offset, value) for offset, key, value in writes if offset < end}


def test_the_latest_record_of_each_key_survives_at_its_offset(tmp_path, storage) -> None:
    plog = open_log(storage, str(tmp_path / "p"))
    writes = written(storage, plog, rounds=12, keys=7, ts_ms=1_000)
    end = plog.end_offset
    before = len(plog.segments())
    closed_end = plog.segments()[-1].base_offset
    report = plog.clean()
    assert report.cleaned and report.records_removed > 0, report.describe()
    got = storage.keyed_records(plog)
    # the closed segments keep the latest of each key among them, at its original offset; the active one all
    assert got == sorted([(o, k, v) for k, (o, v) in latest_below(writes, closed_end).items()]
                         + [w for w in writes if w[0] >= closed_end])
    # nothing a reader could need was lost: every key reads back as its latest value
    assert {k: v for _, k, v in got} == {k: v for k, (_, v) in latest_below(writes, end).items()}
    assert plog.end_offset == end and len(plog.segments()) == before
    # the next pass merges the small cleaned segments, up to segment.bytes each (as Kafka's cleaner groups them)
    assert plog.clean(force=True).segments_after < len(plog.segments()) < before
    assert storage.keyed_records(plog) == sorted((o, k, v) for k, (o, v) in latest_below(writes, end).items())
    storage.assert_clean(plog.directory, end)
    # a reopened log (another process) reads the same
    assert storage.keyed_records(open_log(storage, plog.directory)) == storage.keyed_records(plog)


def test_a_forced_pass_rolls_the_active_segment_and_compacts_everything(tmp_path, storage) -> None:
    plog = open_log(storage, str(tmp_path / "p"), segment_bytes=1 << 20)
    latest = fill(storage, plog, rounds=5, keys=4, ts_ms=1_000)
    assert len(plog.segments()) == 1
    assert not plog.clean().cleaned  # only the active segment: nothing is due
    report = plog.clean(force=True)
    assert report.cleaned and report.cleaned_to == plog.end_offset
    assert storage.keyed_records(plog) == sorted((o, k, v) for k, (o, v) in latest.items())
    # readers starting inside a gap get the next record, and a read ending in gaps moves them past it
    first_kept = min(o for o, _ in latest.values())
    assert first_kept > 0
    assert plog.fetch(0, 1 << 20)[0].offset == first_kept
    appended = plog.append(batch(storage, [(b"k0", b"new")], 2_000))
    assert appended == plog.end_offset - 1
    assert storage.keyed_records(plog)[-1] == (appended, b"k0", b"new")


def test_tombstones_delete_keys_and_go_after_delete_retention(tmp_path, storage) -> None:
    clock = Clock()
    plog = open_log(storage, str(tmp_path / "p"), clock, delete_retention_ms=60_000, segment_bytes=1 << 20)
    plog.append(batch(storage, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], 1_000))
    tomb = plog.append(batch(storage, [(b"b", None)], 1_000))
    plog.clean(force=True)
    assert [(k, v) for _, k, v in storage.keyed_records(plog)] == [(b"a", b"1"), (b"c", b"1"), (b"b", None)]
    clock.ms += 59_000
    plog.clean(force=True)
    assert (tomb, b"b", None) in storage.keyed_records(plog)  # not yet: readers still get the delete
    clock.ms += 1_000
    report = plog.clean(force=True)
    assert report.tombstones_removed == 1
    assert [(k, v) for _, k, v in storage.keyed_records(plog)] == [(b"a", b"1"), (b"c", b"1")]


def test_keyless_records_are_refused_on_a_compacted_topic(tmp_path, storage) -> None:
    plog = open_log(storage, str(tmp_path / "p"))
    plog.append(batch(storage, [(b"a", b"1")], 1_000))
    with pytest.raises(InvalidRecordError, match=r"record 1 of the batch has none .*cleanup.policy=delete"):
        plog.append(batch(storage, [(b"b", b"2"), (None, b"3")], 1_000))
    assert plog.end_offset == 1


def test_cleanup_policy_and_cleaner_configs_are_validated() -> None:
    assert TopicConfig({"cleanup.policy": "delete,compact"})["cleanup.policy"] == "compact,delete"
    for key, value in [("cleanup.policy", "compress"), ("min.cleanable.dirty.ratio", "1.5"),
                       ("min.compaction.lag.ms", "-1"), ("delete.retention.ms", "soon")]:
        with pytest.raises(InvalidConfigError, match=f"invalid value '{value}' for topic config '{key}'"):
            TopicConfig({key: value})


def test_the_dirty_ratio_and_the_compaction_lags_decide_when_a_pass_runs(tmp_path, storage) -> None:
    clock = Clock()
    plog = open_log(storage, str(tmp_path / "p"), clock, min_compaction_lag_ms=30_000,
                    max_compaction_lag_ms=3_600_000)
    fill(storage, plog, rounds=10, keys=6, ts_ms=clock.ms)
    report = plog.clean()
    assert not report.cleaned and "min.compaction.lag.ms" in report.reason  # too young
    clock.ms += 30_000
    assert plog.clean().cleaned  # all dirty: ratio 1
    assert CleanerCheckpoint.read(plog.directory).first_dirty == plog.segments()[-1].base_offset
    fill(storage, plog, rounds=1, keys=3, ts_ms=clock.ms)
    plog.roll()
    clock.ms += 30_000
    report = plog.clean()
    assert not report.cleaned and "below min.cleanable.dirty.ratio 0.5" in report.reason
    clock.ms += 3_600_000  # the dirty records waited max.compaction.lag.ms: cleaned whatever the ratio
    report = plog.clean()
    assert report.cleaned and "max.compaction.lag.ms" in report.reason


def test_retention_leaves_a_compact_only_topic_alone_and_applies_to_compact_delete(tmp_path, storage) -> None:
    for policy, kept in (("compact", True), ("compact,delete", False)):
        plog = open_log(storage, str(tmp_path / policy), cleanup_policy=policy, retention_ms=1)
        fill(storage, plog, rounds=6, keys=3, ts_ms=1_000)
        deleted = plog.enforce_retention()
        assert (deleted == 0) == kept


def test_transactions_and_producer_state_survive_cleaning(tmp_path, storage) -> None:
    plog = open_log(storage, str(tmp_path / "p"), segment_bytes=1 << 20)
    plog.append(batch(storage, [(b"a", b"1")], 1_000), producer=ProducerBatch(7, 0, 0))
    plog.append(batch(storage, [(b"a", b"aborted")], 1_000), producer=ProducerBatch(8, 0, 0), transactional=True)
    plog.write_marker(8, 1, commit=False)
    plog.append(batch(storage, [(b"b", b"1")], 1_000), producer=ProducerBatch(9, 0, 0), transactional=True)
    plog.write_marker(9, 0, commit=True)
    plog.append(batch(storage, [(b"a", b"2"), (b"b", b"2")], 1_000), producer=ProducerBatch(7, 0, 1))
    plog.append(batch(storage, [(b"a", b"3")], 1_000))
    report = plog.clean(force=True)
    assert report.cleaned, report.describe()
    # each producer's last batch is kept whole (9's b1, and 7's a2 and b2, though newer values exist), the aborted
    # record and producer 7's first batch are gone, the markers stay
    assert [(k, v) for _, k, v in storage.keyed_records(plog)] == [(b"b", b"1"), (b"a", b"2"), (b"b", b"2"),
                                                                    (b"a", b"3")]
    assert plog.last_stable_offset(plog.end_offset) == plog.end_offset
    reopened = open_log(storage, plog.directory)
    # producer 7 continues from sequence 3; a retry of its last batch is still recognised
    assert reopened.append(batch(storage, [(b"a", b"2"), (b"b", b"2")], 1_000),
                           producer=ProducerBatch(7, 0, 1)) == 5
    reopened.append(batch(storage, [(b"c", b"1")], 1_000), producer=ProducerBatch(7, 0, 3))


def test_a_fencing_producer_epoch_outlives_cleaning_of_every_batch_written_under_it(tmp_path, storage) -> None:
    """The offsets topic's case: one producer id whose epoch fences a deposed writer. After many overwrites
    under the newer epoch are cleaned and the log is reopened (producer state rebuilt from the frame headers),
    the older epoch is still refused, because the producer's last batch is kept whole."""
    plog = open_log(storage, str(tmp_path / "p"), segment_bytes=1200)
    producer_id = 2**63 - 1
    plog.append(batch(storage, [(b"leader", b"e1")], 1_000), producer=ProducerBatch(producer_id, 1, 0))
    plog.append(batch(storage, [(b"leader", b"e2")], 1_000), producer=ProducerBatch(producer_id, 2, 0))
    for sequence in range(1, 40):
        plog.append(batch(storage, [(b"g", b"%d" % sequence)], 1_000), producer=ProducerBatch(producer_id, 2, sequence))
    assert plog.clean(force=True).records_removed >= 38
    reopened = open_log(storage, plog.directory, segment_bytes=1200)
    with pytest.raises(InvalidProducerEpochError):
        reopened.append(batch(storage, [(b"g", b"late")], 1_000), producer=ProducerBatch(producer_id, 1, 1))
    assert reopened.append(batch(storage, [(b"g", b"next")], 1_000),
                           producer=ProducerBatch(producer_id, 2, 40)) == reopened.end_offset - 1


def test_a_follower_copies_a_compacted_leader_and_compacts_on_its_own(tmp_path, storage, replicas) -> None:
    leader = open_log(storage, str(tmp_path / "leader"), replica=True)
    for epoch in (0, 1):
        for r in range(6):
            pairs = [(f"k{j}".encode(), f"e{epoch}r{r}".encode() * 8) for j in range(4)]
            leader.append(batch(storage, pairs, 1_000), leader_epoch=epoch)
    leader.replication_high_watermark = lambda: leader.end_offset  # every replica has it all
    assert leader.clean(force=True).cleaned
    follower = open_log(storage, str(tmp_path / "follower"), replica=True)
    replicas.copy(leader, follower)
    assert storage.keyed_records(follower) == storage.keyed_records(leader)
    assert follower.leader_epochs.entries == leader.leader_epochs.entries
    follower.replication_high_watermark = lambda: follower.end_offset
    follower.clean(force=True)  # its own pass, on its own segments: the same records
    assert storage.keyed_records(follower) == storage.keyed_records(leader)


def test_a_replica_log_is_cleaned_only_below_its_replication_high_watermark(tmp_path, storage) -> None:
    """Nothing a new leader could truncate is cleaned: the plan stops at the high watermark the node knows, and
    nothing is cleaned while it is unknown."""
    plog = open_log(storage, str(tmp_path / "p"), replica=True)
    writes = written(storage, plog, rounds=10, keys=5, ts_ms=1_000)
    report = plog.clean(force=True)
    assert not report.cleaned and "replication high watermark is not known" in report.reason
    hw = plog.segments()[len(plog.segments()) // 2].base_offset
    plog.replication_high_watermark = lambda: hw
    report = plog.clean(force=True)
    assert report.cleaned and report.cleaned_to <= hw, report.describe()
    kept = [(o, k, v) for o, k, v in storage.keyed_records(plog)]
    # above the high watermark every record is still there; below it, each key's latest (below it) at least
    assert [w for w in writes if w[0] >= report.cleaned_to] == [r for r in kept if r[0] >= report.cleaned_to]
    assert len([r for r in kept if r[0] < report.cleaned_to]) < len([w for w in writes if w[0] < report.cleaned_to])
    latest = latest_below(writes, report.cleaned_to)
    assert {(o, k, v) for k, (o, v) in latest.items()} <= set(kept)


def test_the_swap_refuses_a_copy_past_a_bound_that_moved_back(tmp_path, storage) -> None:
    """The guard where the cleaner writes: a high watermark lower at the swap than at the plan (which only an
    unclean truncation could do) swaps nothing in."""
    plog = open_log(storage, str(tmp_path / "p"), replica=True)
    fill(storage, plog, rounds=10, keys=5, ts_ms=1_000)
    plog.roll()
    asked = []
    plog.replication_high_watermark = lambda: plog.end_offset if not asked.append(1) and len(asked) == 1 else 0
    before = {name: os.path.getsize(os.path.join(plog.directory, name)) for name in os.listdir(plog.directory)
              if name.endswith(".arrows")}
    with pytest.raises(AssertionError, match="reaches past the cleaner's bound 0"):
        plog.clean(force=True)
    after = {name: os.path.getsize(os.path.join(plog.directory, name)) for name in os.listdir(plog.directory)
             if name.endswith(".arrows")}
    assert after == before and not [n for n in os.listdir(plog.directory) if n.endswith(".cleaned")]


def test_a_segment_with_damage_is_not_compacted(tmp_path, storage) -> None:
    plog = open_log(storage, str(tmp_path / "p"))
    fill(storage, plog, rounds=8, keys=5, ts_ms=1_000)
    first = plog.segments()[0]
    with open(first.path, "r+b") as f:
        f.seek(first.data_start + 70)
        f.write(b"\xff\xff\xff")
    size = os.path.getsize(first.path)
    report = plog.clean()
    assert not report.cleaned and "damaged records" in report.reason
    assert os.path.getsize(first.path) == size


def test_a_typed_topic_is_compacted_on_its_record_key_and_a_null_value_is_a_tombstone(tmp_path) -> None:
    from fabric.common.records import storage_schema

    schema = storage_schema(pa.schema([("user", pa.string()), ("amount", pa.int64())]))
    plog = Log(str(tmp_path / "p"), schema, TopicConfig({"cleanup.policy": "compact", "segment.ms": str(2**62)}),
               clock=Clock())

    def typed(pairs: list[tuple[bytes, dict | None]]) -> pa.RecordBatch:
        n = len(pairs)
        return pa.RecordBatch.from_arrays(
            [pa.array([1_000_000] * n, TIMESTAMP), pa.array([k for k, _ in pairs], pa.binary()),
             pa.nulls(n, schema.field("headers").type),
             pa.array([v for _, v in pairs], schema.field("value").type)], schema=schema)

    plog.append(typed([(b"u1", {"user": "ann", "amount": 1}), (b"u2", {"user": "bob", "amount": 2})]))
    plog.append(typed([(b"u1", {"user": "ann", "amount": 5}), (b"u2", None)]))
    assert plog.clean(force=True).records_removed == 2
    rows = [(f.offset, f.batch.column(1).to_pylist(), f.batch.column(3).to_pylist())
            for f in plog.fetch(0, 1 << 20) if f.batch.num_rows]
    assert rows == [(2, [b"u1", b"u2"], [{"user": "ann", "amount": 5}, None])]
