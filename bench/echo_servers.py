"""Echo servers for bench.request_bench, in a process of their own (`python -m bench.echo_servers`): the same
small request echoed over each transport the fabric could use, so their costs compare alone.

  flight-action    Arrow Flight unary DoAction (one gRPC call per request: what every coordinator call is now)
  flight-exchange  one long-lived Flight DoExchange stream, each request and answer a message's app metadata
  protocol         the fabric protocol (fabric.server.protocol_server) on uvloop
  protocol-asyncio the same on asyncio's own event loop

It prints one JSON line {"flight": port, "protocol": port, "protocol-asyncio": port} once serving, and serves
until its standard input closes.
"""
from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from fabric.server.protocol_handlers import echo
from fabric.server.protocol_server import Handler, ProtocolServer


class EchoFlight(flight.FlightServerBase):
    """DoAction `echo` answers its body; DoExchange answers each message's app metadata with itself."""

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[bytes]:
        return [action.body.to_pybytes()]

    def do_exchange(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
                    reader: flight.MetadataRecordBatchReader, writer: flight.MetadataRecordBatchWriter) -> None:
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                return
            writer.write_metadata(chunk.app_metadata)


def protocol_echo(loop: asyncio.AbstractEventLoop | None) -> ProtocolServer:
    def refusal(exc: Exception) -> dict[str, Any]:
        return {"type": type(exc).__name__, "message": str(exc)}
    return ProtocolServer("127.0.0.1", 0, {"echo": Handler(echo, lambda args: False)}, None, refusal, 1 << 20,
                          loop=loop).start()


def main() -> None:
    server = EchoFlight("grpc+tcp://127.0.0.1:0")
    fast, plain = protocol_echo(None), protocol_echo(asyncio.new_event_loop())
    print(json.dumps({"flight": server.port, "protocol": fast.port, "protocol-asyncio": plain.port}), flush=True)
    sys.stdin.read()
    fast.shutdown()
    plain.shutdown()
    server.shutdown()


if __name__ == "__main__":
    pa.set_cpu_count(1)
    main()
