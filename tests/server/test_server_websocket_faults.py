"""WebSocket faults, limits and lifecycle on the ws_server, on ringloop (both loop backends) and
uvicorn alike (`srv_ws_app`):

* protocol faults get their close code: an unmasked client frame 1002, invalid UTF-8 1007, a
  message over `--ws-max-size` 1009 — a 100 MiB one against the 16 MiB default is refused at
  its head, before its payload is read;
* fragmentation with a ping between the fragments: one message, and the pong;
* keep-alive: the server pings a silent client (`--ws-ping-interval`) and closes one that
  stays silent (`--ws-ping-timeout`);
* memory stays bounded for a flood of pings and for a client that never reads;
* a client that disappears mid-message is a `websocket.disconnect` (1006), nothing else;
* graceful shutdown sends close 1001 (going away) to every open WebSocket, never a bare close.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from srv_harness import MiB, wait_until
from srv_ws import BINARY, CLOSE, CONT, PING, PONG, TEXT, WsRaw, frame, recorded, url
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(90)

UVICORN = ("uvicorn-httptools",)


def test_unmasked_frame_is_1002(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(TEXT, b"not masked", mask=False)
        assert c.read_until(CLOSE, 10).code == 1002
        assert raw.closed(10)


def test_invalid_utf8_is_1007(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(TEXT, b"ok \xff\xfe not utf-8")
        assert c.read_until(CLOSE, 10).code == 1007


def test_utf8_cut_between_fragments_is_fine(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        snow = "☃".encode()
        c.send(TEXT, b"a" + snow[:1], fin=False)
        c.send(CONT, snow[1:] + b"b")
        f = c.read(10)
        assert (f.opcode, f.payload) == (TEXT, b"a" + snow + b"b")


def test_fragments_with_a_ping_between_them(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(BINARY, b"one-", fin=False)
        c.send(PING, b"in between")
        c.send(CONT, b"two-", fin=False)
        c.send(CONT, b"three", fin=True)
        frames = [c.read(10), c.read(10)]
        assert sorted((f.opcode, f.payload) for f in frames) == sorted(
            [(PONG, b"in between"), (BINARY, b"one-two-three")]
        )


def test_message_over_max_size_is_1009(ws_kind, pool):
    srv = pool.get(ws_kind, "srv_ws_app:app", "asgi", ws_max_size=65536)
    with connect(url(srv, "/echo"), compression=None, max_size=None) as ws:
        ws.send(b"x" * 65536)
        assert len(ws.recv(timeout=10)) == 65536
        ws.send(b"x" * 65537)
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1009


def test_100_mib_message_is_refused_at_its_head(ws_server):
    """Against the 16 MiB default: the close comes after the head and a little of the payload,
    and the server's memory does not grow by the message."""
    rss = ws_server.rss()
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(BINARY, b"y" * 4096, length=100 * MiB)
        assert c.read_until(CLOSE, 10).code == 1009
    assert ws_server.rss() - rss < 32 * MiB


def test_client_pings_are_answered(ws_server):
    with connect(url(ws_server, "/echo")) as ws:
        for i in range(5):
            latency = ws.ping(f"p{i}".encode()).wait(10)
            assert latency
        ws.send("after pings")
        assert ws.recv(timeout=10) == "after pings"


def test_server_pings_a_silent_client(ws_kind, pool):
    srv = pool.get(ws_kind, "srv_ws_app:app", "asgi", ws_ping_interval=0.5, ws_ping_timeout=5)
    with srv.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/idle")
        f = c.read(timeout=5)
        assert f.opcode == PING, f
        c.send(PONG, f.payload)
        c.send(CLOSE, b"\x03\xe8")
        assert c.read_until(CLOSE, 10).code == 1000


def test_server_closes_a_client_that_stays_silent(ws_kind, pool):
    srv = pool.get(ws_kind, "srv_ws_app:app", "asgi", ws_ping_interval=0.3, ws_ping_timeout=0.6)
    with srv.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/idle")
        # Read until the server closes: pings, perhaps a close frame, never answered. The
        # deadline is a hang guard (the server would ping forever), not a measurement.
        deadline = time.monotonic() + 60
        with pytest.raises(EOFError):
            while time.monotonic() < deadline:
                c.read(timeout=10)
            pytest.fail("the server kept a silent client for 60 s")
    assert recorded(srv, "/idle")["type"] == "websocket.disconnect"


def test_a_flood_of_pings_keeps_memory_bounded(ws_server):
    rss = ws_server.rss()
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/idle")
        ping = frame(PING, b"x" * 125)
        raw.sock.settimeout(0.5)
        sent = 0
        deadline = time.monotonic() + 3
        # The client never reads its pongs: once both kernel buffers are full the server must
        # stop reading it rather than pile pongs up in memory.
        while time.monotonic() < deadline and sent < 200_000:
            try:
                raw.sock.sendall(ping * 100)
            except TimeoutError:
                break
            sent += 100
    assert ws_server.rss() - rss < 48 * MiB
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("still serving")
        assert ws.recv(timeout=10) == "still serving"


def test_a_client_that_never_reads_keeps_memory_bounded(ws_server):
    rss = ws_server.rss()
    with ws_server.raw() as raw:
        WsRaw(raw).handshake("/flood")
        time.sleep(2)  # the application sends as fast as the server lets it
        grown = ws_server.rss() - rss
    assert grown < 48 * MiB, f"grew by {grown / MiB:.1f} MiB"
    got = recorded(ws_server, "/flood")
    assert got["type"] == "stopped", got


@pytest.mark.reference_lax("uvicorn reports 1005 (no status), not 1006, for a reset", kinds=UVICORN)
def test_client_disappearing_mid_message(ws_server):
    with ws_server.raw() as raw:
        c = WsRaw(raw)
        c.handshake("/echo")
        c.send(TEXT, b"z" * 1000, length=1 * MiB)
        time.sleep(0.1)
        raw.reset()
    got = recorded(ws_server, "/echo")
    assert got["type"] == "websocket.disconnect"
    assert got["code"] == 1006
    with connect(url(ws_server, "/echo")) as ws:
        ws.send("next one")
        assert ws.recv(timeout=10) == "next one"


@pytest.mark.reference_lax(
    "uvicorn closes open WebSockets with 1012, not 1001 (going away)", kinds=UVICORN
)
def test_graceful_shutdown_sends_1001(ws_kind, start_server):
    srv = start_server(ws_kind, "srv_ws_app:app", "asgi", timeout_graceful_shutdown=5)
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(connect(url(srv, "/idle"))) for _ in range(3)]
        for ws in clients:
            ws.ping().wait(10)
        status = srv.terminate(timeout=30)
        for ws in clients:
            with pytest.raises(ConnectionClosed) as e:
                ws.recv(timeout=10)
            assert e.value.rcvd is not None, "a bare TCP close, no close frame"
            assert e.value.rcvd.code == 1001
        assert status == 0


def test_many_sessions_open_and_close(ws_server):
    for _ in range(3):
        with contextlib.ExitStack() as stack:
            conns = [stack.enter_context(connect(url(ws_server, "/echo"))) for _ in range(30)]
            for i, ws in enumerate(conns):
                ws.send(str(i))
            for i, ws in enumerate(conns):
                assert ws.recv(timeout=10) == str(i)
    wait_until(lambda: ws_server.tcp_connections() == 0, 15, "every connection to close")
