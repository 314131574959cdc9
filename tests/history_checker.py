"""Checking a producer/consumer history (tests/history_recorder.py) against what a Kafka-class log promises.

In the spirit of Jepsen's Kafka queue checker: every value is sent once, so a value names a send, and whatever
was seen of it (in polls and final reads) and acknowledged for it must fit one log per partition in which each
offset holds one value and each value one offset. What the checker reports, each with examples:

- lost writes: a write acknowledged, or seen by a poll or read, before a final read of its partition began,
  absent from that read (below the read's start offset it counts as deleted, not lost); an acknowledged write
  with no final read of its partition begun after it is lost too, since nothing shows it survived;
- duplicates: one value at more than one offset (unknown-outcome sends too: present or absent, at most once);
- inconsistent offsets: two values at one offset, across reads, polls and acknowledgements;
- acknowledged at a wrong offset: a value seen somewhere other than where its acknowledgement put it (in another
  partition, for an acknowledgement without an offset);
- phantoms: values seen that no send wrote, or whose send certainly failed;
- non-dense offsets (only when asked, `dense=True`): a read with holes or offsets out of order, or a consumer
  skipping offsets between two polls of a partition;
- non-monotonic polls: a consumer seeing an offset at or below one it saw before in that partition with no seek
  (a recorded seek or new assignment) in between.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

Partition = tuple[str, int]  # (topic, partition); the topic is "" in single-topic histories

EXAMPLES = 5  # examples of each kind in the summary


def where(partition: Partition, offset: int | None = None) -> str:
    """'topic/p@offset' ('p@offset' without a topic), as the messages name a place."""
    name = f"{partition[0]}/{partition[1]}" if partition[0] else str(partition[1])
    return name if offset is None else f"{name}@{offset}"


@dataclass(frozen=True)
class Lost:
    value: str
    partition: Partition
    known: str  # why it must be there: "acknowledged at 0@17 to w1", "seen at 0@17 by poll w2/c"
    missing_from: str  # the read that lacks it

    def __str__(self) -> str:
        return f"{self.value!r} {self.known}, absent from {self.missing_from}"


@dataclass(frozen=True)
class Duplicate:
    value: str
    places: tuple[str, ...]  # "0@3 (read by test)", one per offset

    def __str__(self) -> str:
        return f"{self.value!r} at {len(self.places)} offsets: {', '.join(self.places)}"


@dataclass(frozen=True)
class InconsistentOffset:
    partition: Partition
    offset: int
    values: tuple[tuple[str, str], ...]  # (value, who says so)

    def __str__(self) -> str:
        return f"{where(self.partition, self.offset)} holds " + " and ".join(f"{v!r} ({by})" for v, by in self.values)


@dataclass(frozen=True)
class WrongOffset:
    value: str
    acknowledged: str  # "0@5 to w1"
    seen: tuple[str, ...]  # "0@6 (read by test)"

    def __str__(self) -> str:
        return f"{self.value!r} acknowledged at {self.acknowledged} but seen at {', '.join(self.seen)}"


@dataclass(frozen=True)
class Phantom:
    value: str
    seen: str  # "0@4 (poll by p/c)"
    why: str  # "never sent", "its send failed: ..."

    def __str__(self) -> str:
        return f"{self.value!r} at {self.seen}: {self.why}"


@dataclass(frozen=True)
class Gap:
    partition: Partition
    by: str  # the read or the consumer
    detail: str

    def __str__(self) -> str:
        return f"{where(self.partition)} in {self.by}: {self.detail}"


@dataclass(frozen=True)
class NonMonotonicPoll:
    consumer: str
    partition: Partition
    previous: int
    offset: int

    def __str__(self) -> str:
        return f"{self.consumer} polled {where(self.partition, self.offset)} after offset {self.previous}"


@dataclass
class HistoryResult:
    """The anomalies a history shows (empty lists: it is valid) and what it held."""

    lost: list[Lost] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    inconsistent_offsets: list[InconsistentOffset] = field(default_factory=list)
    wrong_offsets: list[WrongOffset] = field(default_factory=list)
    phantoms: list[Phantom] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    nonmonotonic_polls: list[NonMonotonicPoll] = field(default_factory=list)
    sends: Counter[str] = field(default_factory=Counter)  # by outcome: ok, fail, info, unknown
    polled: int = 0
    reads: int = 0

    def anomalies(self) -> dict[str, list[Any]]:
        return {"lost writes": self.lost, "duplicates": self.duplicates,
                "inconsistent offsets": self.inconsistent_offsets,
                "acknowledged at a wrong offset": self.wrong_offsets, "phantoms": self.phantoms,
                "non-dense offsets": self.gaps, "non-monotonic polls": self.nonmonotonic_polls}

    @property
    def valid(self) -> bool:
        return not any(self.anomalies().values())

    def summary(self) -> str:
        """One line of what was checked, then each kind of anomaly found with up to EXAMPLES examples."""
        s = self.sends
        head = (f"{sum(s.values())} sends ({s['ok']} ok, {s['fail']} failed, {s['info'] + s['unknown']} of unknown "
                f"outcome), {self.polled} polled records, {self.reads} final reads")
        found = {kind: items for kind, items in self.anomalies().items() if items}
        if not found:
            return head + ": valid"
        lines = [f"{head}: {sum(map(len, found.values()))} anomalies"]
        for kind, items in found.items():
            lines.append(f"{kind} ({len(items)}):")
            lines += [f"  - {item}" for item in items[:EXAMPLES]]
            if len(items) > EXAMPLES:
                lines.append(f"  ... and {len(items) - EXAMPLES} more")
        return "\n".join(lines)

    def assert_valid(self) -> HistoryResult:
        if not self.valid:
            raise AssertionError(self.summary())
        return self


@dataclass
class _Send:
    process: str
    outcome: str = "unknown"  # ok, fail, info, or unknown (invoked, never completed: a killed producer)
    partition: Partition | None = None
    offset: int | None = None
    time: int = 0  # of the acknowledgement
    error: str = ""

    def acknowledged(self) -> str:
        return f"{where(self.partition or ('', -1), self.offset)} to {self.process}"


@dataclass(frozen=True)
class _Seen:
    partition: Partition
    offset: int
    value: str
    by: str
    time: int


def _sends(ops: list[dict[str, Any]]) -> dict[str, _Send]:
    sends: dict[str, _Send] = {}
    for op in ops:
        if op["f"] != "send":
            continue
        value = op["value"]
        if op["type"] == "invoke":
            if value in sends:
                raise ValueError(f"{value!r} was sent twice: a history needs unique values")
            sends[value] = _Send(op["process"])
            continue
        send = sends.setdefault(value, _Send(op["process"]))
        send.outcome, send.error = op["type"], op.get("error", "")
        if op["type"] == "ok":
            send.partition, send.offset, send.time = (op["topic"], op["partition"]), op["offset"], op["time"]
    return sends


def _seen(ops: list[dict[str, Any]]) -> list[_Seen]:
    """Every (partition, offset, value) a poll or a read returned."""
    out = []
    for op in ops:
        if op["f"] == "poll":
            by = f"poll by {op['process']}/{op['consumer']}"
            out += [_Seen((op["topic"], p), o, v, by, op["time"]) for p, o, v in op["records"]]
        elif op["f"] == "read":
            out += [_Seen((op["topic"], op["partition"]), o, v, _read_name(op), op["time"]) for o, v in op["records"]]
    return out


def _read_name(op: dict[str, Any]) -> str:
    return f"read{' of ' + op['source'] if op['source'] else ''} by {op['process']}"


def _lost(sends: dict[str, _Send], seen: list[_Seen], reads: list[dict[str, Any]]) -> list[Lost]:
    """Writes known to be in the log (acknowledged, or seen) before a read began, absent from that read."""
    known = [(s.partition, s.offset, value, s.time, f"acknowledged at {s.acknowledged()}")
             for value, s in sends.items() if s.outcome == "ok"]
    known += [(x.partition, x.offset, x.value, x.time, f"seen at {where(x.partition, x.offset)} by {x.by}")
              for x in seen]
    lost: dict[tuple[str, int], Lost] = {}
    for i, read in enumerate(reads):
        partition, values = (read["topic"], read["partition"]), {v for _, v in read["records"]}
        name = f"{_read_name(read)} (offsets {read['start']}..{max((o for o, _ in read['records']), default='')})"
        for part, offset, value, time, why in known:
            if (part == partition and time < read["time"] and (offset is None or offset >= read["start"])
                    and value not in values):
                lost.setdefault((value, i), Lost(value, partition, why, name))
    out = list(lost.values())
    for value, s in sends.items():
        if s.outcome == "ok" and not any((r["topic"], r["partition"]) == s.partition and r["time"] > s.time
                                         for r in reads):
            out.append(Lost(value, s.partition or ("", -1), f"acknowledged at {s.acknowledged()}",
                            "every final read (none of its partition began after the acknowledgement)"))
    return out


def _dense_read(read: dict[str, Any]) -> Gap | None:
    """A read's offsets must run from its start to its end (or its last offset) one by one."""
    offsets = [o for o, _ in read["records"]]
    end = read["end"] if read["end"] is not None else max(offsets, default=read["start"] - 1) + 1
    expected = list(range(read["start"], end))
    if offsets == expected:
        return None
    missing, extra = sorted(set(expected) - set(offsets)), sorted(set(offsets) - set(expected))
    detail = [f"{len(missing)} offsets missing of {read['start']}..{end - 1}: {missing[:10]}"] if missing else []
    detail += [f"offsets beyond {read['start']}..{end - 1}: {extra[:10]}"] if extra else []
    if not missing and not extra:
        detail = ["offsets out of order or repeated"]
    return Gap((read["topic"], read["partition"]), _read_name(read), "; ".join(detail))


def _polls(ops: list[dict[str, Any]], dense: bool) -> tuple[list[NonMonotonicPoll], list[Gap]]:
    """Each consumer's offsets per partition must rise (and with `dense`, one by one) between seeks."""
    last: dict[tuple[str, str, Partition], int] = {}
    backwards, gaps = [], []
    for op in ops:
        if op["f"] == "seek":
            last.pop((op["process"], op["consumer"], (op["topic"], op["partition"])), None)
        elif op["f"] == "poll":
            consumer = f"{op['process']}/{op['consumer']}"
            for p, offset, _ in op["records"]:
                key = (op["process"], op["consumer"], (op["topic"], p))
                previous = last.get(key)
                if previous is not None and offset <= previous:
                    backwards.append(NonMonotonicPoll(consumer, key[2], previous, offset))
                elif previous is not None and dense and offset != previous + 1:
                    gaps.append(Gap(key[2], f"polls by {consumer}",
                                    f"offset {offset} after {previous}: {previous + 1}..{offset - 1} skipped"))
                last[key] = offset
    return backwards, gaps


def check(ops: Iterable[dict[str, Any]], dense: bool = False) -> HistoryResult:
    """Check a merged history (`history_recorder.load`, or recorders' `ops`); `dense`: offsets must have no holes
    (a log without compaction, deletions or transaction markers)."""
    ops = list(ops)
    sends, seen = _sends(ops), _seen(ops)
    reads = [op for op in ops if op["f"] == "read"]
    result = HistoryResult(sends=Counter(s.outcome for s in sends.values()), reads=len(reads),
                           polled=sum(len(op["records"]) for op in ops if op["f"] == "poll"))

    places: dict[str, dict[tuple[Partition, int], str]] = defaultdict(dict)  # value → offsets seen → by whom
    values_at: dict[tuple[Partition, int], dict[str, str]] = defaultdict(dict)  # offset → values → by whom
    for x in seen:
        places[x.value].setdefault((x.partition, x.offset), x.by)
        values_at[(x.partition, x.offset)].setdefault(x.value, x.by)
    for value, s in sends.items():
        if s.outcome == "ok" and s.partition is not None and s.offset is not None:
            values_at[(s.partition, s.offset)].setdefault(value, f"ack to {s.process}")

    result.lost = _lost(sends, seen, reads)
    result.duplicates = [Duplicate(value, tuple(f"{where(*pos)} ({by})" for pos, by in at.items()))
                         for value, at in places.items() if len(at) > 1]
    result.inconsistent_offsets = [InconsistentOffset(pos[0], pos[1], tuple(values.items()))
                                   for pos, values in values_at.items() if len(values) > 1]
    for value, s in sends.items():
        if s.outcome == "ok":  # an acknowledgement without an offset still names the partition
            elsewhere = [f"{where(*pos)} ({by})" for pos, by in places.get(value, {}).items()
                         if pos[0] != s.partition or s.offset not in (None, pos[1])]
            if elsewhere:
                result.wrong_offsets.append(WrongOffset(value, s.acknowledged(), tuple(elsewhere)))
    for value, at in places.items():
        send = sends.get(value)
        if send is None or send.outcome == "fail":
            why = "never sent" if send is None else f"its send by {send.process} failed ({send.error})"
            pos, by = next(iter(at.items()))
            result.phantoms.append(Phantom(value, f"{where(*pos)} ({by})", why))
    if dense:
        result.gaps = [gap for gap in map(_dense_read, reads) if gap]
    result.nonmonotonic_polls, poll_gaps = _polls(ops, dense)
    result.gaps += poll_gaps
    return result
