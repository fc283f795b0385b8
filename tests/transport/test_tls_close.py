"""A TLS client's close_notify ends the server's side of the connection, as in asyncio's SSL
transport: the protocol's `eof_received` runs, the server answers with its own close_notify and
closes, and the client's orderly shutdown completes (asyncio's client keeps the TCP connection
open until it hears that close_notify; without it, it waits out `ssl_shutdown_timeout` and
aborts). Written once: stock asyncio serves with an `ssl.SSLContext`, ringloop with its native
`_core.TlsConfig`."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from tls_pki import issue_pki

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return issue_pki(tmp_path_factory.mktemp("pki"), "127.0.0.1")[1]


def server_tls(loop_kind, pki):
    if loop_kind == "asyncio":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(pki["cert"]), str(pki["key"]))
        return ctx
    from ringloop import _core

    return _core.TlsConfig(str(pki["cert"]), str(pki["key"]))


class Server(asyncio.Protocol):
    """Echoes; records the calls asyncio makes at the end of the connection."""

    def __init__(self, events: list, lost: asyncio.Future) -> None:
        self.events, self.lost = events, lost

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

    def eof_received(self):
        self.events.append("eof_received")

    def connection_lost(self, exc):
        self.events.append(("connection_lost", exc))
        self.lost.set_result(None)


def test_client_close_notify_closes_the_server_side(loop, loop_kind, pki):
    cctx = ssl.create_default_context(cafile=str(pki["ca"]))
    sctx = server_tls(loop_kind, pki)

    async def main():
        events: list = []
        lost = loop.create_future()
        server = await loop.create_server(lambda: Server(events, lost), "127.0.0.1", 0, ssl=sctx)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=cctx)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()  # close_notify; the client's socket stays open for the server's answer
        await lost
        # The client heard the server's close_notify: an orderly end, not its timeout's abort.
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return events

    assert loop.run_until_complete(main()) == ["eof_received", ("connection_lost", None)]
