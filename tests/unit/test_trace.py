"""fabric.common.trace: events are JSON lines appended to the file $FABRIC_TRACE_FILE names (or `start` gives)
while tracing is on, and nothing is written while it is off; a producer's send(), request and ack are traced with
the offsets the ack names."""
from __future__ import annotations

import importlib
import os

import fabric
from fabric.common import trace


def test_a_producer_traces_send_request_and_ack_only_while_tracing_is_on(tmp_path) -> None:
    path = str(tmp_path / "trace.jsonl")
    with fabric.connect(str(tmp_path / "data")) as fab:
        fab.create_topic("t")
        with fab.producer() as producer:
            trace.start(path)
            try:
                assert trace.ON
                producer.send("t", b"a").get(30)
                producer.send("t", b"b", partition=0).get(30)
            finally:
                trace.stop()
            assert not trace.ON
            producer.send("t", b"c").get(30)  # off: nothing more is written
    events = trace.read(path)
    assert [(e.step, e.topic, e.partition, e.start, e.end) for e in events] == [
        ("send", "t", -1, -1, -1), ("request", "t", 0, -1, -1), ("ack", "t", 0, 0, 1),
        ("send", "t", 0, -1, -1), ("request", "t", 0, -1, -1), ("ack", "t", 0, 1, 2)]
    assert {e.pid for e in events} == {os.getpid()} and [e.ns for e in events] == sorted(e.ns for e in events)


def test_the_variable_turns_tracing_on_when_the_module_loads(tmp_path, monkeypatch) -> None:
    """As in a process started with $FABRIC_TRACE_FILE set, or without it (bench.latency_trace's cluster processes
    are the former)."""
    path = str(tmp_path / "trace.jsonl")
    monkeypatch.setenv(trace.ENV, path)
    importlib.reload(trace)
    try:
        assert trace.ON
        trace.event("step", "t", 1, 2, 3, 4)
        trace.event("produce_read", "t", "0")  # a request's arguments before they are checked
    finally:
        trace.stop()
    monkeypatch.delenv(trace.ENV)
    importlib.reload(trace)
    assert not trace.ON
    trace.event("unseen", "t", 1)
    assert [(e.step, e.topic, e.partition, e.start, e.end, e.node) for e in trace.read(path)] == [
        ("step", "t", 1, 2, 3, 4), ("produce_read", "t", -1, -1, -1, -1)]
