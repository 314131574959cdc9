"""The history checker (tests/history_checker.py) on hand-made histories: each anomaly it reports is found, with
its example in the summary, and valid histories pass, whatever their unknown-outcome sends did; then the same
on histories of a simulated log (hypothesis), valid as generated and broken in one known way."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture
def rec(histories):
    """A producer, a consumer and the final reader, each recording in memory; `.check(dense)` checks them all."""
    class Recs:
        producer, consumer, reader = (histories.Recorder(None, name) for name in ("w", "c", "test"))

        def check(self, dense: bool = False):
            return histories.check(self.producer.ops + self.consumer.ops + self.reader.ops, dense)

    return Recs()


def sent(recorder, *values: str, partition: int = 0, start: int = 0) -> None:
    """Send and acknowledge `values` at consecutive offsets of `partition` from `start`."""
    for i, value in enumerate(values):
        recorder.invoke(value, partition)
        recorder.ok(value, partition, start + i)


def test_a_valid_history_passes_and_says_what_it_checked(rec):
    sent(rec.producer, "a", "b", "c")
    rec.producer.invoke("d", 1)
    rec.producer.ok("d", 1, 0)
    rec.consumer.poll("c1", [(0, 0, "a"), (0, 1, "b"), (1, 0, "d")])
    rec.consumer.poll("c1", [(0, 2, "c")])
    rec.reader.read(0, [(0, "a"), (1, "b"), (2, "c")], end=3)
    rec.reader.read(1, [(0, "d")], end=1)
    result = rec.check(dense=True).assert_valid()
    assert result.summary() == "4 sends (4 ok, 0 failed, 0 of unknown outcome), 4 polled records, 2 final reads: valid"


@pytest.mark.parametrize("present", [True, False])
@pytest.mark.parametrize("outcome", ["info", "unknown"])
def test_a_send_of_unknown_outcome_may_be_present_or_absent(rec, outcome, present):
    sent(rec.producer, "a")
    rec.producer.invoke("maybe", 0)
    if outcome == "info":
        rec.producer.info("maybe", TimeoutError("no reply"))
    sent(rec.producer, "b", start=2 if present else 1)
    rec.reader.read(0, [(0, "a"), (1, "maybe"), (2, "b")] if present else [(0, "a"), (1, "b")])
    assert rec.check(dense=True).assert_valid().sends == {"ok": 2, outcome: 1}


def test_an_unknown_outcome_send_is_present_at_most_once(rec):
    sent(rec.producer, "a")
    rec.producer.invoke("maybe", 0)  # then killed
    rec.reader.read(0, [(0, "a"), (1, "maybe"), (2, "maybe")])
    result = rec.check()
    assert [d.value for d in result.duplicates] == ["maybe"]
    assert "'maybe' at 2 offsets: 0@1 (read by test), 0@2 (read by test)" in result.summary()


def test_an_acknowledged_write_missing_from_the_final_read_is_lost(rec):
    sent(rec.producer, "a", "b", "c")
    rec.reader.read(0, [(0, "a"), (2, "c")])
    result = rec.check()
    assert [(x.value, x.partition) for x in result.lost] == [("b", ("", 0))]
    assert "'b' acknowledged at 0@1 to w, absent from read by test (offsets 0..2)" in result.summary()
    assert not result.gaps  # holes are only anomalies when offsets must be dense
    assert "0 in read by test: 1 offsets missing of 0..2: [1]" in rec.check(dense=True).summary()


def test_a_write_seen_by_a_poll_must_survive_even_if_its_send_had_no_reply(rec):
    rec.producer.invoke("x", 0)
    rec.producer.info("x", "timed out")
    rec.consumer.poll("c1", [(0, 0, "x")])
    rec.reader.read(0, [])
    assert "'x' seen at 0@0 by poll by c/c1, absent from read by test" in rec.check().summary()


def test_a_read_must_hold_only_what_was_acknowledged_before_it_began(histories, rec):
    began = histories.Recorder.clock()
    sent(rec.producer, "a")
    rec.reader.read(0, [], began=began)  # began before the acknowledgement: no later read shows "a" survived
    assert "every final read (none of its partition began after the acknowledgement)" in str(rec.check().lost[0])
    rec.reader.read(0, [(0, "a")])
    rec.check().assert_valid()


def test_writes_below_the_start_of_a_read_were_deleted_not_lost(rec):
    sent(rec.producer, "a", "b", "c")
    rec.reader.read(0, [(2, "c")], start=2, end=3)
    rec.check(dense=True).assert_valid()


def test_an_acknowledged_write_in_a_partition_nobody_read_is_lost(rec):
    sent(rec.producer, "a")
    sent(rec.producer, "z", partition=1)
    rec.reader.read(0, [(0, "a")])
    assert [x.value for x in rec.check().lost] == ["z"]


def test_two_values_at_one_offset_across_reads_and_acknowledgements(rec):
    sent(rec.producer, "a", "b")
    rec.producer.invoke("c", 0)
    rec.reader.read(0, [(0, "a"), (1, "b")], source="replica 1")
    rec.reader.read(0, [(0, "a"), (1, "c")], source="replica 2")  # a divergent replica
    result = rec.check()
    assert [(x.offset, [v for v, _ in x.values]) for x in result.inconsistent_offsets] == [(1, ["b", "c"])]
    assert ("0@1 holds 'b' (read of replica 1 by test) and 'c' (read of replica 2 by test)" in result.summary())
    assert [x.value for x in result.lost] == ["b"]  # and the second replica lacks an acknowledged write


def test_a_value_seen_elsewhere_than_acknowledged(rec):
    sent(rec.producer, "a", "b")
    rec.reader.read(0, [(0, "b"), (1, "a")])
    result = rec.check()
    assert {x.value for x in result.wrong_offsets} == {"a", "b"}
    assert "'a' acknowledged at 0@0 to w but seen at 0@1 (read by test)" in result.summary()
    assert {x.offset for x in result.inconsistent_offsets} == {0, 1}  # the acknowledgements disagree with the read


def test_an_acknowledgement_without_an_offset_names_the_partition(rec):
    rec.producer.invoke("a", 0)
    rec.producer.ok("a", 0, None)
    rec.reader.read(0, [])
    rec.reader.read(1, [(0, "a")])
    result = rec.check()
    assert [str(x) for x in result.wrong_offsets] == ["'a' acknowledged at 0 to w but seen at 1@0 (read by test)"]
    assert [x.value for x in result.lost] == ["a"]


def test_two_acknowledgements_of_one_offset(rec):
    sent(rec.producer, "a")
    sent(rec.producer, "b")  # acknowledged at 0 as well
    rec.reader.read(0, [(0, "a"), (1, "b")])
    result = rec.check()
    assert str(result.inconsistent_offsets[0]) == "0@0 holds 'a' (read by test) and 'b' (ack to w)"
    assert [x.value for x in result.wrong_offsets] == ["b"]


@pytest.mark.parametrize("failed", [False, True])
def test_values_never_sent_or_certainly_failed_are_phantoms(rec, failed):
    sent(rec.producer, "a")
    if failed:
        rec.producer.invoke("ghost", 0)
        rec.producer.fail("ghost", "not enough replicas")
    rec.consumer.poll("c1", [(0, 0, "a"), (0, 1, "ghost")])
    rec.reader.read(0, [(0, "a"), (1, "ghost")])
    result = rec.check(dense=True)
    assert [x.value for x in result.phantoms] == ["ghost"]
    why = "its send by w failed (not enough replicas)" if failed else "never sent"
    assert f"'ghost' at 0@1 (poll by c/c1): {why}" in result.summary()


def test_a_read_shorter_than_its_end_offset_or_out_of_order_is_not_dense(rec):
    sent(rec.producer, "a", "b")
    rec.reader.read(0, [(0, "a"), (1, "b")], end=3)
    rec.reader.read(0, [(1, "b"), (0, "a")])
    gaps = [x.detail for x in rec.check(dense=True).gaps]
    assert gaps == ["1 offsets missing of 0..2: [2]", "offsets out of order or repeated"]


def test_polls_going_back_without_a_seek_are_non_monotonic(rec):
    sent(rec.producer, "a", "b", "c")
    rec.consumer.poll("c1", [(0, 0, "a"), (0, 1, "b")])
    rec.consumer.poll("c1", [(0, 1, "b"), (0, 2, "c")])  # offset 1 again
    rec.consumer.poll("c2", [(0, 1, "b")])  # another consumer: its own order
    rec.consumer.seek("c1", 0, 0)
    rec.consumer.poll("c1", [(0, 0, "a")])  # back after a seek: fine
    rec.reader.read(0, [(0, "a"), (1, "b"), (2, "c")])
    result = rec.check(dense=True)
    assert [(x.consumer, x.previous, x.offset) for x in result.nonmonotonic_polls] == [("c/c1", 1, 1)]
    assert "c/c1 polled 0@1 after offset 1" in result.summary()
    assert not result.gaps


def test_a_consumer_skipping_offsets_is_not_dense(rec):
    sent(rec.producer, "a", "b", "c")
    rec.consumer.poll("c1", [(0, 0, "a")])
    rec.consumer.poll("c1", [(0, 2, "c")])
    rec.reader.read(0, [(0, "a"), (1, "b"), (2, "c")])
    assert not rec.check().gaps
    assert [str(x) for x in rec.check(dense=True).gaps] == ["0 in polls by c/c1: offset 2 after 0: 1..1 skipped"]


def test_assert_valid_fails_with_the_summary_and_a_few_examples(rec):
    sent(rec.producer, *(f"v{i}" for i in range(8)))
    rec.reader.read(0, [])
    with pytest.raises(AssertionError) as failure:
        rec.check().assert_valid()
    message = str(failure.value)
    assert message.startswith("8 sends (8 ok, 0 failed, 0 of unknown outcome), 0 polled records, 1 final reads: "
                              "8 anomalies\nlost writes (8):\n  - 'v0' acknowledged at 0@0 to w")
    assert message.endswith("  ... and 3 more")


def test_topics_are_told_apart(rec):
    rec.producer.invoke("a", 0, topic="t1")
    rec.producer.ok("a", 0, 0, topic="t1")
    rec.reader.read(0, [(0, "a")], topic="t2")
    assert [str(x) for x in rec.check().lost] == [
        "'a' acknowledged at t1/0@0 to w, absent from every final read (none of its partition began after the "
        "acknowledgement)"]


def test_a_value_sent_twice_is_a_broken_history(rec):
    rec.producer.invoke("a", 0)
    rec.producer.invoke("a", 0)
    with pytest.raises(ValueError, match="sent twice"):
        rec.check()


def test_files_of_several_processes_merge_and_a_torn_last_line_is_ignored(history):
    producer, reader = history.recorder("producer"), history.recorder("reader")
    sent(producer, "a", b"b\xff")
    producer.invoke("c", 0)
    producer.close()
    with open(os.path.join(history.directory, "producer.jsonl"), "a") as torn:
        torn.write('{"process": "producer", "f": "send", "type": "ok", "val')  # killed mid-line
    reader.read(0, [(0, b"a"), (1, b"b\xff")])
    reader.close()
    result = history.check(dense=True).assert_valid()
    assert result.sends == {"ok": 2, "unknown": 1} and result.reads == 1


# -- properties, on histories of a simulated log --------------------------------------------------------------
OUTCOMES = ["ok", "ok", "ok", "fail", "info", "unknown"]


@st.composite
def simulated(draw):
    """(sends, logs): each send (value, partition, outcome, written) and the partitions' logs it produced."""
    count = draw(st.integers(1, 25))
    sends = [(f"v{i}", draw(st.integers(0, 2)), outcome, outcome == "ok" or (outcome != "fail" and draw(st.booleans())))
             for i, outcome in enumerate(draw(st.lists(st.sampled_from(OUTCOMES), min_size=count, max_size=count)))]
    logs: dict[int, list[str]] = {p: [] for p in range(3)}
    for value, partition, _, written in sends:
        if written:
            logs[partition].append(value)
    return sends, logs


def replay(histories, sends, logs, chunk: int, mutate=None):
    """The ops of a producer sending `sends`, a consumer polling every log in chunks of `chunk` records, and a
    full read of each partition; `mutate(polls, reads)` breaks the observations first (in place)."""
    producer, consumer, reader = (histories.Recorder(None, name) for name in ("w", "c", "test"))
    for value, partition, outcome, _ in sends:
        producer.invoke(value, partition)
        if outcome == "ok":
            producer.ok(value, partition, logs[partition].index(value))
        elif outcome in ("fail", "info"):
            getattr(producer, outcome)(value, "simulated")
    records = [(p, o, v) for p, log in logs.items() for o, v in enumerate(log)]
    polls = [records[i:i + chunk] for i in range(0, len(records), chunk)]
    reads = {p: list(enumerate(log)) for p, log in logs.items()}
    if mutate:
        mutate(polls, reads)
    for batch in polls:
        consumer.poll("c1", batch)
    for p, records_of_p in reads.items():
        reader.read(p, records_of_p)
    return producer.ops + consumer.ops + reader.ops


@settings(max_examples=150, deadline=None)
@given(simulated(), st.integers(1, 5))
def test_histories_of_a_correct_log_are_valid(histories, history_of_log, chunk):
    result = histories.check(replay(histories, *history_of_log, chunk), dense=True).assert_valid()
    assert sum(result.sends.values()) == len(history_of_log[0])


def lose(polls, reads):
    p = next(p for p, records in reads.items() if records)
    del reads[p][-1]


def duplicate(polls, reads):
    p = next(p for p, records in reads.items() if records)
    reads[p].append((len(reads[p]), reads[p][0][1]))


def diverge(polls, reads):
    p = next(p for p, records in reads.items() if records)
    reads[p][0] = (0, "never-sent")


def go_back(polls, reads):
    polls.append(polls[-1][-1:])


MUTATIONS = {"lost": lose, "duplicates": duplicate, "inconsistent_offsets": diverge, "phantoms": diverge,
             "nonmonotonic_polls": go_back}


@settings(max_examples=100, deadline=None)
@given(simulated(), st.integers(1, 5), st.sampled_from(sorted(MUTATIONS)))
def test_a_broken_history_of_a_log_is_caught(histories, history_of_log, chunk, anomaly):
    sends, logs = history_of_log
    if not any(logs.values()):
        return  # nothing was written: nothing to break
    if anomaly == "lost" and not any(outcome == "ok" for *_, outcome, _ in sends):
        return  # only a lost acknowledged write is an anomaly (the poll saw it: it is lost all the same)
    result = histories.check(replay(histories, sends, logs, chunk, MUTATIONS[anomaly]), dense=True)
    assert getattr(result, anomaly), result.summary()
