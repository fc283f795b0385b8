"""Native WebSocket handlers (`native_handler(..., websocket=WebSocketHandler())`) on
ringloop's server, both loop backends, with a real client (`websockets`) — ringloop's own API,
so no reference server:

* the callbacks in order (on_connect, on_open, on_message, on_close with the client's code),
  text as `str` and binary as `bytes`, a subprotocol picked by on_connect, a denial (403), an
  on_connect that raises (500), an on_message that raises (1011, logged), `ws.close` with a
  code and reason;
* `broadcast` to every open session;
* back-pressure: a handler that sends until `send` returns `False` to a client that never
  reads keeps the server's memory bounded;
* plain HTTP requests still reach the handler function; graceful shutdown sends 1001.
"""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest
from srv_harness import MiB, wait_until
from srv_ws import TEXT, WsRaw
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(60)

APP = "srv_native_ws_app:app"


@pytest.fixture
def nws(ringloop_kind, pool):
    return pool.get(ringloop_kind, APP, "native")


def url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def record(server) -> dict:
    return httpx.get(server.url("/record"), timeout=10).json()


def test_echo_text_and_bytes(nws):
    with connect(url(nws, "/echo"), compression=None, max_size=None) as ws:
        ws.send("text")
        assert ws.recv(timeout=10) == "text"
        ws.send(b"\x00\xff" * 40000)
        assert ws.recv(timeout=10) == b"\x00\xff" * 40000


def test_deflate_with_a_native_handler(nws):
    with connect(url(nws, "/echo")) as ws:
        assert ws.response.headers["sec-websocket-extensions"].startswith("permessage-deflate")
        ws.send("deflated " * 2000)
        assert ws.recv(timeout=10) == "deflated " * 2000


def test_on_connect_picks_the_subprotocol(nws):
    with connect(url(nws, "/p"), subprotocols=["other", "chat"]) as ws:
        assert ws.subprotocol == "chat"


def test_on_connect_denies(nws):
    with pytest.raises(InvalidStatus) as e:
        connect(url(nws, "/deny"))
    assert e.value.response.status_code == 403


def test_on_connect_raising_is_500(nws):
    with pytest.raises(InvalidStatus) as e:
        connect(url(nws, "/raise"))
    assert e.value.response.status_code == 500
    assert "on_connect failed on purpose" in nws.log()


def test_on_message_raising_closes_with_1011(nws):
    with connect(url(nws, "/boom")) as ws:
        ws.send("boom")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd.code == 1011
    assert "on_message failed on purpose" in nws.log()


def test_close_with_code_and_reason(nws):
    with connect(url(nws, "/bye")) as ws:
        ws.send("close")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert (e.value.rcvd.code, e.value.rcvd.reason) == (4000, "bye")


def test_on_close_gets_the_client_code(nws):
    with connect(url(nws, "/client-close")) as ws:
        ws.send("x")
        ws.recv(timeout=10)
        ws.close(4321, "done here")
    wait_until(
        lambda: ["/client-close", 4321, "done here"] in record(nws)["closes"], 10, "on_close"
    )


def test_on_close_after_a_reset_is_1006(nws):
    with nws.raw() as raw:
        WsRaw(raw).handshake("/reset")
        WsRaw(raw).send(TEXT, b"half", length=1000)
        raw.reset()
    wait_until(lambda: any(c[:2] == ["/reset", 1006] for c in record(nws)["closes"]), 10, "1006")


def test_broadcast_reaches_every_session(nws):
    with contextlib.ExitStack() as stack:
        members = [stack.enter_context(connect(url(nws, f"/m{i}"))) for i in range(20)]
        members[0].send("all")
        got = [members[0].recv(timeout=10), members[0].recv(timeout=10)]
        # The broadcast comes first on the sender's own connection, then the count.
        assert got[0] == "to all" and int(got[1]) >= 20
        for ws in members[1:]:
            assert ws.recv(timeout=10) == "to all"


def test_back_pressure_keeps_memory_bounded(nws):
    rss = nws.rss()
    with nws.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/flood")
        for _ in range(20):
            c.send(TEXT, b"flood")
            time.sleep(0.05)
        time.sleep(0.5)
        grown = nws.rss() - rss
    assert grown < 48 * MiB, f"grew by {grown / MiB:.1f} MiB"
    r = record(nws)
    assert r["flood_false"] >= 1, r


def test_plain_http_reaches_the_handler(nws):
    r = httpx.get(nws.url("/hello"), timeout=10)
    assert (r.status_code, r.content) == (200, b"plain http")


def test_graceful_shutdown_sends_1001(ringloop_kind, start_server):
    srv = start_server(ringloop_kind, APP, "native", timeout_graceful_shutdown=5)
    with connect(url(srv, "/s")) as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        assert srv.terminate(timeout=30) == 0
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1001
