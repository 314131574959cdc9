"""A follower's replica fetcher against leaders of earlier releases (fabric.server.node.fetcher): one that does not
take `omit_unchanged`, and one that takes it but has no fetch sessions (`session`). Refused once, the fetcher asks
again without the argument, and from then on never sends it, so a rolling upgrade keeps every follower copying.
Each leader is a real ProtocolServer checking its arguments against its release's replica_fetch signature."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from fabric.server import wire
from fabric.server.arguments import check_call
from fabric.server.node.fetcher import FetchSettings, ReplicaFetcher
from fabric.server.peer_calls import PeerCalls
from fabric.server.protocol_server import Handler, ProtocolServer
from fabric.server.replicated_offsets import node_connection

ANSWER = {"high_watermark": 4, "log_end": 4, "log_start": 0, "frames": 0}


def earlier_replica_fetch(replica_id: int, partitions: list[tuple[str, int, int, int, str]], max_bytes: int = 0,
                          response_max_bytes: int = 0, max_wait_ms: int = 0) -> None:
    """The signature an earlier release's leader checks a replica_fetch against."""


def previous_replica_fetch(replica_id: int, partitions: list[tuple[str, int, int, int, str]], max_bytes: int = 0,
                           response_max_bytes: int = 0, max_wait_ms: int = 0, omit_unchanged: bool = False) -> None:
    """The signature a leader of the release before fetch sessions checks a replica_fetch against."""


@contextlib.contextmanager
def fetcher_of(signature: Callable[..., None], monkeypatch) -> Iterator[tuple[ReplicaFetcher, list[dict[str, Any]]]]:
    """A fetcher of node 2 from a leader (node 1) that checks replica_fetch against `signature` and answers each
    partition with ANSWER; and the arguments of every request the leader was sent."""
    asked: list[dict[str, Any]] = []

    def serve(principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        asked.append(dict(args))
        check_call("replica_fetch", signature, {**args, "partitions": [tuple(p) for p in args["partitions"]]})
        return [ANSWER for _ in args["partitions"]], b""
    leader = ProtocolServer("127.0.0.1", 0, {"replica_fetch": Handler(serve, lambda args: False)}, None,
                            wire.error_fields, 1 << 20).start()
    try:
        peer = PeerCalls(node_connection(False, None))
        monkeypatch.setattr(peer, "_address", lambda node: f"127.0.0.1:{leader.port}")  # (no Flight status)
        yield ReplicaFetcher(2, 1, "leader-1", lambda address, call: None, peer, lambda: None, FetchSettings(),
                             lambda tp, doing: None), asked
    finally:
        leader.shutdown()


def test_a_leader_of_an_earlier_release_is_asked_for_every_answer(monkeypatch) -> None:
    with fetcher_of(earlier_replica_fetch, monkeypatch) as (fetcher, asked):
        answers = fetcher._replica_fetch([("t", 0, 4, 0, "")])
        assert answers[0][0] == ANSWER
        assert ["omit_unchanged" in args for args in asked] == [True, False]  # refused once, asked again without
        fetcher._replica_fetch([("t", 0, 4, 0, "")])
        assert "omit_unchanged" not in asked[-1] and len(asked) == 3


def test_a_leader_without_fetch_sessions_is_fetched_from_without_one(monkeypatch) -> None:
    with fetcher_of(previous_replica_fetch, monkeypatch) as (fetcher, asked):
        fetcher._replica_fetch([("t", 0, 4, 0, "")], {"id": 0, "epoch": 0, "forgotten": []})
        assert ["session" in args for args in asked] == [True, False]  # refused once, asked again without
        assert all(args["omit_unchanged"] for args in asked) and not fetcher._in_session.sent
        assert fetcher.session_id == 0
