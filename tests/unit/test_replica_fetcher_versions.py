"""A follower's replica fetcher against a leader of an earlier release, one that does not take `omit_unchanged`
(fabric.server.node.fetcher): refused once, it asks again without the argument, and from then on never sends it,
so a rolling upgrade keeps every follower copying. The leader is a real ProtocolServer checking its arguments
against the earlier release's replica_fetch signature."""
from __future__ import annotations

from typing import Any

from fabric.server import wire
from fabric.server.arguments import check_call
from fabric.server.node.fetcher import FetchSettings, ReplicaFetcher
from fabric.server.peer_calls import PeerCalls
from fabric.server.protocol_server import Handler, ProtocolServer
from fabric.server.replicated_offsets import node_connection


def earlier_replica_fetch(replica_id: int, partitions: list[tuple[str, int, int, int, str]], max_bytes: int = 0,
                          response_max_bytes: int = 0, max_wait_ms: int = 0) -> None:
    """The signature an earlier release's leader checks a replica_fetch against."""


def test_a_leader_of_an_earlier_release_is_asked_for_every_answer(monkeypatch) -> None:
    asked: list[dict[str, Any]] = []

    def serve(principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        asked.append(dict(args))
        check_call("replica_fetch", earlier_replica_fetch,
                   {**args, "partitions": [tuple(p) for p in args["partitions"]]})
        return [{"high_watermark": 4, "log_end": 4, "log_start": 0, "frames": 0} for _ in args["partitions"]], b""
    leader = ProtocolServer("127.0.0.1", 0, {"replica_fetch": Handler(serve, lambda args: False)}, None,
                            wire.error_fields, 1 << 20).start()
    try:
        peer = PeerCalls(node_connection(False, None))
        monkeypatch.setattr(peer, "_address", lambda node: f"127.0.0.1:{leader.port}")  # (no Flight status)
        fetcher = ReplicaFetcher(2, 1, "leader-1", lambda address, call: None, peer, lambda: None, FetchSettings(),
                                 lambda tp, doing: None)
        answers = fetcher._replica_fetch([("t", 0, 4, 0, "")])
        assert answers[0][0] == {"high_watermark": 4, "log_end": 4, "log_start": 0, "frames": 0}
        assert ["omit_unchanged" in args for args in asked] == [True, False]  # refused once, asked again without
        fetcher._replica_fetch([("t", 0, 4, 0, "")])
        assert "omit_unchanged" not in asked[-1] and len(asked) == 3
    finally:
        leader.shutdown()
