"""`get_extra_info` of a native TLS transport (`ssl=_core.TlsConfig` on `create_server`):
`ssl_object` (version, cipher, ALPN, peer certificate), `cipher` and `peercert`, each checked
against what the stdlib's asyncio TLS client on the other end says it negotiated; with the
protocol factory marked native too (a `_core.NativeTransport`, docs/native-accept.md)."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from ringloop import _core
from tls_pki import issue_pki
from transport_helpers import marked_native

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    return issue_pki(d, "127.0.0.1")[1]


class Recorder(asyncio.Protocol):
    """Answers the first bytes with what its transport's extra info says, then closes."""

    def __init__(self, seen: asyncio.Future) -> None:
        self.seen = seen

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        t = self.transport
        obj = t.get_extra_info("ssl_object")
        self.seen.set_result(
            {
                "version": obj.version(),
                "cipher": obj.cipher(),
                "alpn": obj.selected_alpn_protocol(),
                "compression": obj.compression(),
                "server_side": obj.server_side,
                "peercert_der": obj.getpeercert(binary_form=True),
                "peercert": t.get_extra_info("peercert"),
                "cipher_info": t.get_extra_info("cipher"),
                "sslcontext": t.get_extra_info("sslcontext"),
                "socket": t.get_extra_info("socket").getsockname(),
                "transport": type(t).__name__,
            }
        )
        t.write(b"ok")


@pytest.mark.only_kinds(
    "ringloop-io_uring", "ringloop-epoll", reason="_core.TlsConfig is ringloop's TLS"
)
@pytest.mark.parametrize("client_cert", [False, True], ids=["no-client-cert", "client-cert"])
@pytest.mark.parametrize("native", [False, True], ids=["asyncio-accept", "native-accept"])
def test_ssl_object_matches_the_client(loop, pki, client_cert, native):
    cfg = _core.TlsConfig(
        str(pki["cert"]),
        str(pki["key"]),
        ca_certs=str(pki["ca"]),
        cert_reqs=1,
        alpn=["h2", "http/1.1"],
    )
    cctx = ssl.create_default_context(cafile=str(pki["ca"]))
    cctx.set_alpn_protocols(["http/1.1"])
    if client_cert:
        cctx.load_cert_chain(str(pki["client"]))

    async def main():
        seen = loop.create_future()
        factory = marked_native(Recorder, seen) if native else (lambda: Recorder(seen))
        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=cfg)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=cctx)
        writer.write(b"hello")
        assert await reader.readexactly(2) == b"ok"
        got = await seen
        client = writer.get_extra_info("ssl_object")
        mine = (
            client.version(),
            client.cipher(),
            client.selected_alpn_protocol(),
            client.getpeercert(True),
        )
        own = writer.get_extra_info("peername")
        writer.close()
        server.close()
        await server.wait_closed()
        return got, mine, own

    got, (version, cipher, alpn, _server_der), peer = loop.run_until_complete(main())
    want = "NativeTransport" if native else "StreamTransport"
    assert got["transport"] == want
    assert got["sslcontext"] is cfg
    assert got["socket"] == peer
    assert got["version"] == version == "TLSv1.3"
    assert got["cipher"] == cipher == got["cipher_info"]
    assert got["alpn"] == alpn == "http/1.1"
    assert got["compression"] is None and got["server_side"] is True
    if client_cert:
        own = pki["client"].read_text().split("-----BEGIN CERTIFICATE-----")[1]
        assert got["peercert_der"] == ssl.PEM_cert_to_DER_cert("-----BEGIN CERTIFICATE-----" + own)
        subject = dict(x[0] for x in got["peercert"]["subject"])
        assert subject["commonName"] == "client one"
    else:
        assert got["peercert_der"] is None and got["peercert"] is None


def test_cleartext_transport_has_no_ssl_object(loop):
    async def main():
        seen = loop.create_future()

        class P(asyncio.Protocol):
            def connection_made(self, transport):
                seen.set_result(
                    (
                        transport.get_extra_info("ssl_object"),
                        transport.get_extra_info("cipher", "none"),
                    )
                )

        server = await loop.create_server(P, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = await seen
        writer.close()
        server.close()
        await server.wait_closed()
        return got

    assert loop.run_until_complete(main()) == (None, "none")
