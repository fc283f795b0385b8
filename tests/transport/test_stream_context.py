"""The protocol's context (asyncio 3.15's `context=` of `_make_socket_transport` and
`_start_serving`): every callback of a connection's protocol runs in that one context, so what
`connection_made` sets, `data_received` and `connection_lost` see, and the caller's own context
is untouched. ringloop takes the keyword on every Python; stock asyncio only from 3.15, so the
oracle runs where it has the hook."""

from __future__ import annotations

import asyncio
import contextvars
import socket
import sys

import pytest

if sys.version_info < (3, 15):
    pytestmark = pytest.mark.skip_kinds(
        "asyncio", reason="stock asyncio's transport factories take context= from 3.15"
    )

var = contextvars.ContextVar("var", default="unset")


class Recorder(asyncio.Protocol):
    """Notes `var` in each callback; sets it in connection_made, as a handler would."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.seen.append(("connection_made", var.get()))
        var.set("set in connection_made")

    def data_received(self, data: bytes) -> None:
        self.seen.append(("data_received", var.get()))

    def eof_received(self):
        self.seen.append(("eof_received", var.get()))

    def connection_lost(self, exc) -> None:
        self.seen.append(("connection_lost", var.get()))
        self.lost.set_result(None)


def test_socket_transport_runs_its_protocol_in_the_given_context(loop) -> None:
    async def main() -> list:
        ctx = contextvars.copy_context()
        ctx.run(var.set, "the connection's")
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        proto = Recorder()
        waiter = loop.create_future()
        transport = loop._make_socket_transport(ours, proto, waiter, context=ctx)
        await waiter
        peer.sendall(b"hello")
        peer.shutdown(socket.SHUT_WR)
        await proto.lost  # eof_received returns None: the transport closes itself
        peer.close()
        assert transport.is_closing()
        assert var.get() == "unset", "the caller's context changed"
        assert ctx[var] == "set in connection_made"
        return proto.seen

    seen = loop.run_until_complete(main())
    assert seen == [
        ("connection_made", "the connection's"),
        ("data_received", "set in connection_made"),
        ("eof_received", "set in connection_made"),
        ("connection_lost", "set in connection_made"),
    ]
