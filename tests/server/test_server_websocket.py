"""WebSocket on the server (RFC 6455, RFC 7692, ASGI's `websocket` scope), written once and run
on ringloop (both loop backends) and uvicorn (its `websockets` implementation) with the same
plain ASGI application (`srv_ws_app`), through real clients (`websockets`, aiohttp's):

* the scope, subprotocols and the accept's headers, permessage-deflate negotiated (and off);
* text and binary echo, small to several MiB, compressed and not;
* close codes and reasons both ways: the application's reach the client, the client's reach
  the application's `websocket.disconnect`; a client that leaves before the accept is a
  `websocket.disconnect`, not an exception;
* denials: `websocket.close` before the accept (403), the `websocket.http.response`
  extension, an exception or a misuse before the accept (500); after the accept an exception
  closes with 1011 and a return with 1000;
* refused upgrades: 400 for a bad key, 426 with `Sec-WebSocket-Version: 13`.
Faults, limits, pings and shutdown are in `test_server_websocket_faults`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from srv_harness import wait_until
from srv_ws import BINARY, CLOSE, TEXT, WsRaw, close_payload, last, recorded, upgrade_request, url
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(60)

UVICORN = ("uvicorn-httptools",)


# -- the scope and the handshake ------------------------------------------------------------------


def test_scope(ws_server):
    with connect(url(ws_server, "/scope?x=1"), subprotocols=["chat", "superchat"]) as ws:
        scope = json.loads(ws.recv(timeout=10))
    assert scope["type"] == "websocket"
    assert scope["scheme"] == "ws"
    assert scope["path"] == "/scope"
    assert scope["query_string"] == {"bytes": "x=1"}
    assert scope["http_version"] == "1.1"
    assert scope["subprotocols"] == ["chat", "superchat"]
    assert "method" not in scope
    names = [n["bytes"] for n, _ in scope["headers"]]
    assert "sec-websocket-key" in names and "upgrade" in names
    assert scope["client"][0] == "127.0.0.1" and scope["server"][1] == ws_server.port


def test_scope_advertises_the_http_response_extension(ws_server):
    with connect(url(ws_server, "/scope")) as ws:
        scope = json.loads(ws.recv(timeout=10))
    assert "websocket.http.response" in scope["extensions"]


def test_subprotocol_and_accept_headers(ws_server):
    with connect(url(ws_server, "/echo"), subprotocols=["chat", "other"]) as ws:
        assert ws.subprotocol == "chat"
        assert ws.response.headers["x-accept"] == "yes"
        ws.send("hi")
        assert ws.recv(timeout=10) == "hi"


def test_permessage_deflate_is_negotiated_and_used(ws_server):
    with connect(url(ws_server, "/echo")) as ws:  # websockets offers permessage-deflate
        ext = ws.response.headers.get("sec-websocket-extensions", "")
        assert ext.startswith("permessage-deflate"), ext
        text = "compress me " * 5000
        ws.send(text)
        assert ws.recv(timeout=10) == text
        data = bytes(range(256)) * 4096
        ws.send(data)
        assert ws.recv(timeout=10) == data


def test_no_deflate_when_the_client_offers_none(ws_server):
    with connect(url(ws_server, "/echo"), compression=None) as ws:
        assert "sec-websocket-extensions" not in ws.response.headers
        ws.send("plain")
        assert ws.recv(timeout=10) == "plain"


@pytest.mark.ringloop_only("--ws-per-message-deflate false (uvicorn spells it with a value)")
def test_deflate_off_by_setting(ringloop_kind, pool):
    srv = pool.get(ringloop_kind, "srv_ws_app:app", "asgi", ws_per_message_deflate="false")
    with connect(url(srv, "/echo")) as ws:
        assert "sec-websocket-extensions" not in ws.response.headers
        ws.send("x" * 1000)
        assert ws.recv(timeout=10) == "x" * 1000


def test_browser_like_deflate_offer(ws_server):
    """A browser offers `permessage-deflate; client_max_window_bits`: accepted, and the answer
    names only parameters the client can take."""
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        r = c.handshake(
            "/echo", [("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")]
        )
        ext = r.header("sec-websocket-extensions")
        assert ext and ext.split(";")[0].strip() == "permessage-deflate", r.headers
        c.send(TEXT, b"uncompressed is still fine")
        f = c.read(timeout=10)
        assert f.opcode == TEXT


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 3 * 1024 * 1024])
def test_echo_sizes(ws_server, size):
    data = bytes(i % 251 for i in range(size))
    with connect(url(ws_server, "/echo"), max_size=None, compression=None) as ws:
        ws.send(data)
        assert ws.recv(timeout=20) == data
        ws.send(data.decode("latin-1"))
        assert ws.recv(timeout=20) == data.decode("latin-1")


def test_many_messages_in_order(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        for i in range(500):
            ws.send(f"m{i}")
        for i in range(500):
            assert ws.recv(timeout=10) == f"m{i}"


def test_aiohttp_client_with_deflate(ws_server):
    import aiohttp

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(url(ws_server, "/echo"), compress=15) as ws:
                assert ws.compress, "permessage-deflate not agreed"
                await ws.send_str("aiohttp " * 1000)
                assert (await ws.receive(timeout=10)).data == "aiohttp " * 1000
                await ws.send_bytes(b"\x00" * 70000)
                assert (await ws.receive(timeout=10)).data == b"\x00" * 70000
                await ws.close(code=4100, message=b"aiohttp done")

    asyncio.run(go())
    got = recorded(ws_server, "/echo")
    assert (got["code"], got.get("reason", "")) == (4100, "aiohttp done")


def test_concurrent_sessions(ws_server):
    async def one(i: int) -> None:
        from websockets.asyncio.client import connect as aconnect

        async with aconnect(url(ws_server, "/echo")) as ws:
            for j in range(20):
                await ws.send(f"{i}:{j}")
                assert await ws.recv() == f"{i}:{j}"

    async def all_() -> None:
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(50))), 30)

    asyncio.run(all_())


# -- closing ------------------------------------------------------------------------------------------


def test_application_close_code_and_reason_reach_the_client(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("close:4001:as asked")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert (e.value.rcvd.code, e.value.rcvd.reason) == (4001, "as asked")
    got = recorded(ws_server, "/echo")
    assert got["type"] == "websocket.disconnect"


def test_client_close_code_and_reason_reach_the_application(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("x")
        ws.recv(timeout=10)
        ws.close(4002, "client says bye")
    got = recorded(ws_server, "/echo")
    assert got["type"] == "websocket.disconnect"
    assert got["code"] == 4002
    assert got.get("reason", "") == "client says bye"


def test_client_close_without_code_is_1005(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(CLOSE, b"")
        f = c.read_until(CLOSE, timeout=10)
        assert f.code in (None, 1000)
        assert raw.closed(10)
    assert recorded(ws_server, "/echo")["code"] == 1005


@pytest.mark.reference_lax("uvicorn closes the TCP connection without a close frame", kinds=UVICORN)
def test_exception_after_accept_closes_with_1011(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("raise")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1011
    assert "the application failed on purpose" in ws_server.log()


@pytest.mark.reference_lax("uvicorn closes the TCP connection without a close frame", kinds=UVICORN)
def test_return_after_accept_closes_with_1000(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("return")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1000


def test_client_leaving_before_accept_is_a_disconnect(ws_server):
    with ws_server.raw() as raw:
        key = b"dGhlIHNhbXBsZSBub25jZQ=="
        raw.send(upgrade_request("/wait", key))
        wait_until(
            lambda: last(ws_server).get("/wait", {}).get("type") == "waiting", 10, "the app to wait"
        )
    got = recorded(ws_server, "/wait")
    assert got["type"] == "websocket.disconnect", got
    assert got["code"] == 1006


# -- denials and refusals -----------------------------------------------------------------------------


def test_close_before_accept_is_403(ws_server):
    with pytest.raises(InvalidStatus) as e:
        connect(url(ws_server, "/deny"))
    assert e.value.response.status_code == 403


def test_http_response_extension(ws_kind, ws_server):
    with ws_server.raw() as raw:
        raw.send(upgrade_request("/http-deny", b"dGhlIHNhbXBsZSBub25jZQ=="))
        r = raw.read_response()
    assert r.status == 401
    assert r.body == b"not you"
    assert r.header("x-deny") == "1"


def test_exception_before_accept_is_500(ws_server):
    with pytest.raises(InvalidStatus) as e:
        connect(url(ws_server, "/raise-before"))
    assert e.value.response.status_code == 500
    assert "no handshake on purpose" in ws_server.log()


def test_send_before_accept_is_500(ws_server):
    with pytest.raises(InvalidStatus) as e:
        connect(url(ws_server, "/send-before"))
    assert e.value.response.status_code == 500


@pytest.mark.reference_lax(
    "uvicorn answers an unknown version with 400", kinds=UVICORN, ids=("-8-",)
)
@pytest.mark.parametrize(
    "key, version, status",
    [
        (b"short", "13", 400),
        (b"dGhlIHNhbXBsZSBub25jZQ==", "8", 426),
    ],
)
def test_bad_upgrade_is_refused(ws_server, key, version, status):
    with ws_server.raw() as raw:
        raw.send(upgrade_request("/echo", key, version=version))
        r = raw.read_response()
    assert r.status == status, r
    if status == 426:
        assert r.header("sec-websocket-version") == "13"


@pytest.mark.reference_lax("uvicorn closes the connection after a refused upgrade", kinds=UVICORN)
def test_connection_goes_on_after_a_refused_upgrade(ws_server):
    with ws_server.raw() as raw:
        raw.send(upgrade_request("/echo", b"short"))
        assert raw.read_response().status == 400
        raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        r = raw.read_response()
        assert (r.status, r.body) == (200, b"plain http")


def test_plain_http_beside_websocket(ws_server):
    with ws_server.raw() as raw:
        raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        r = raw.read_response()
    assert (r.status, r.body) == (200, b"plain http")


def test_binary_and_text_keep_their_types(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(BINARY, b"\xff\x00")
        c.send(TEXT, "é".encode())
        assert (c.read(10).opcode, c.read(10).opcode) == (BINARY, TEXT)
        c.send(CLOSE, close_payload(1000))
        assert c.read_until(CLOSE, 10).code == 1000


def test_wss_over_tls(ws_kind, pool, tmp_path_factory):
    """wss://: the same session over TLS (the stdlib's SSLProtocol on the native transport)."""
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    d = tmp_path_factory.mktemp("tls")
    key_path, cert_path = d / "key.pem", d / "cert.pem"
    cert.private_key_pem.write_to_path(str(key_path))
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    srv = pool.get(
        ws_kind, "srv_ws_app:app", "asgi", ssl_keyfile=str(key_path), ssl_certfile=str(cert_path)
    )
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with connect(f"wss://127.0.0.1:{srv.port}/echo", ssl=ctx, max_size=None) as ws:
        ws.send("over tls")
        assert ws.recv(timeout=10) == "over tls"
        data = bytes(range(256)) * 2000
        ws.send(data)
        assert ws.recv(timeout=10) == data
    with connect(f"wss://127.0.0.1:{srv.port}/scope", ssl=ctx) as ws:
        assert json.loads(ws.recv(timeout=10))["scheme"] == "wss"
