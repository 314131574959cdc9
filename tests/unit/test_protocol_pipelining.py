"""The pipelining rules of the fabric protocol, on a real ProtocolServer and ProtocolConnection in this process:
requests of one order (a partition's produces) are served one at a time in the order they came, others beside
them and answered as they finish; a request that cannot be ordered is refused alone; a client that half-closes
still gets its answers; answers find their waiters whichever thread reads the socket; a handler's future is
answered when done, holding up nothing meanwhile."""
from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from fabric.common.errors import InvalidRequestError
from fabric.common.protocol import frames, messages
from fabric.common.protocol.connection import ProtocolClients, ProtocolConnection
from fabric.server import wire
from fabric.server.protocol_server import Handler, ProtocolServer


class Log:
    """A stand-in partition log: appends take the time asked for and record their order."""

    def __init__(self) -> None:
        self.appended: dict[Any, list[int]] = {}
        self.lock = threading.Lock()

    def append(self, principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        if not isinstance(args.get("partition"), int):
            raise InvalidRequestError(f"argument 'partition' must be int, got {args.get('partition')!r}")
        time.sleep(args.get("sleep_s", 0))
        with self.lock:
            written = self.appended.setdefault(args["partition"], [])
            written.append(args["n"])
            return len(written) - 1, payload


@pytest.fixture
def served():
    log = Log()
    handlers = {"produce": Handler(log.append, order=lambda args: ("produce", args.get("partition"))),
                "slow": Handler(log.append)}
    server = ProtocolServer("127.0.0.1", 0, handlers, None, wire.error_fields, 1 << 20).start()
    yield server, log
    server.shutdown()


def connect(server: ProtocolServer) -> ProtocolConnection:
    return ProtocolConnection(f"127.0.0.1:{server.port}", None, None, 10.0, wire.exception_of)


def test_a_partitions_requests_keep_their_order_while_others_pass_them(served) -> None:
    server, log = served
    connection = connect(server)
    first = connection.send("produce", {"partition": 0, "n": 0, "sleep_s": 0.3})  # slow, first of partition 0
    following = [connection.send("produce", {"partition": 0, "n": n}) for n in (1, 2, 3)]
    other = connection.send("produce", {"partition": 1, "n": 9})  # another partition: not held up
    assert int(bytes(connection.wait(other, 10)[0])) == 0
    assert log.appended[1] == [9] and log.appended.get(0, []) == []  # partition 0 still waits for its first
    assert [int(bytes(connection.wait(i, 10)[0])) for i in (first, *following)] == [0, 1, 2, 3]
    assert log.appended[0] == [0, 1, 2, 3]
    connection.close()


def test_unordered_requests_are_answered_as_they_finish(served) -> None:
    server, _ = served
    connection = connect(server)
    slow = connection.send("slow", {"partition": 5, "n": 0, "sleep_s": 0.3})
    fast = connection.send("slow", {"partition": 5, "n": 1})
    done: list[int] = []
    waiter = threading.Thread(target=lambda: (connection.wait(slow, 10), done.append(slow)))
    waiter.start()
    connection.wait(fast, 10)
    done.append(fast)
    waiter.join()
    assert done == [fast, slow]
    connection.close()


def test_a_request_whose_order_key_cannot_be_kept_is_refused_alone(served) -> None:
    server, log = served
    connection = connect(server)
    with pytest.raises(InvalidRequestError, match="argument 'partition' must be int"):
        connection.call("produce", {"partition": [0], "n": 1}, timeout_s=10)
    assert int(bytes(connection.call("produce", {"partition": 0, "n": 2}, timeout_s=10)[0])) == 0
    connection.close()


def test_a_client_that_half_closes_still_gets_its_answers(served) -> None:
    import socket

    server, log = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(frames.encode(messages.encode_request(1, "hello", {"protocol": "fabric", "version": 1}))
                    + frames.encode(messages.encode_request(2, "produce", {"partition": 3, "n": 7,
                                                                          "sleep_s": 0.2})))
        raw.shutdown(socket.SHUT_WR)
        reader, answers = frames.FrameReader(), []
        while received := raw.recv(1 << 16):
            reader.feed(received)
            answers += [messages.decode_answer(f.header) for f in reader.frames()]
    assert [a.id for a in answers] == [1, 2] and bytes(answers[1].result) == b"0"
    assert log.appended[3] == [7]


def test_many_threads_share_one_connection(served) -> None:
    server, log = served
    connection = connect(server)
    results: dict[int, int] = {}

    def produce(partition: int) -> None:
        for n in range(20):
            results[partition * 100 + n] = int(bytes(connection.call("produce", {"partition": partition, "n": n},
                                                                     timeout_s=10)[0]))
    threads = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(log.appended[p] == list(range(20)) for p in range(8))
    assert results == {p * 100 + n: n for p in range(8) for n in range(20)}
    connection.close()


def test_threads_that_open_a_servers_connection_at_once_share_one_and_none_is_cut(served) -> None:
    server, log = served
    clients = ProtocolClients(None, None, wire.exception_of)
    address, start = f"127.0.0.1:{server.port}", threading.Barrier(8)
    got: dict[int, ProtocolConnection] = {}
    answers: dict[int, int] = {}

    def first_request(partition: int) -> None:
        start.wait()
        got[partition] = clients.get(address, 10)
        answers[partition] = int(bytes(got[partition].call("produce", {"partition": partition, "n": 0},
                                                           timeout_s=10)[0]))
    threads = [threading.Thread(target=first_request, args=(p,)) for p in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {p: 0 for p in range(8)}  # no request failed on a connection another thread closed
    assert len({id(c) for c in got.values()}) == 1 and not got[0].broken
    clients.close()


def test_a_loop_handlers_future_is_answered_when_done_and_holds_up_nothing_meanwhile() -> None:
    """A handler on the event loop may answer with a future (a long poll that holds no thread): requests after it
    are answered while it is pending, and it is answered with its result, or its error, once another thread
    completes it."""
    pending: list[concurrent.futures.Future] = []

    def held(principal: str, args: dict[str, Any], payload: bytes) -> concurrent.futures.Future:
        pending.append(concurrent.futures.Future())
        return pending[-1]
    handlers = {"held": Handler(held, lambda args: False),
                "now": Handler(lambda principal, args, payload: (args, b""), lambda args: False)}
    server = ProtocolServer("127.0.0.1", 0, handlers, None, wire.error_fields, 1 << 20).start()
    connection = connect(server)
    try:
        first, second = connection.send("held", {}), connection.send("held", {})
        assert bytes(connection.call("now", {"n": 1}, timeout_s=10)[0]) == b'{"n":1}'  # the loop was not held
        assert len(pending) == 2
        threading.Thread(target=lambda: pending[0].set_result(({"woken": True}, b"frames"))).start()
        result, payload = connection.wait(first, 10)
        assert bytes(result) == b'{"woken":true}' and payload == b"frames"
        pending[1].set_exception(InvalidRequestError("refused once woken"))
        with pytest.raises(InvalidRequestError, match="refused once woken"):
            connection.wait(second, 10)
    finally:
        connection.close()
        server.shutdown()


def test_a_reader_whose_socket_another_thread_closed_gets_a_connection_error(served, monkeypatch) -> None:
    """Another thread breaks the connection (a failed send, close()) just as a waiting caller starts reading:
    the reader's wait ends in ConnectionError, which callers retry, and not in the select's own OSError or
    ValueError on the closed socket."""
    from fabric.common.protocol import connection as module

    server, _ = served
    connection = connect(server)
    request = connection.send("slow", {"partition": 5, "n": 0, "sleep_s": 0.2})
    real_select = module.select.select

    def closed_first(*args: Any) -> Any:  # the other thread's close lands right before this reader's select
        connection.close()
        return real_select(*args)
    monkeypatch.setattr(module, "select", type("Select", (), {"select": staticmethod(closed_first)}))
    with pytest.raises(ConnectionError, match="broke"):
        connection.wait(request, 10)
    assert connection.broken
