"""WebSocket over HTTP/2 (RFC 8441): an extended CONNECT (`:method CONNECT`, `:protocol
websocket`) is a WebSocket session over its stream, for ASGI's `websocket` scope and for the
native handlers' WebSocket API, permessage-deflate included, its sends held to the stream's
window.

The client is a real one at the frame level: python-hyper's `h2` connection (which sends
`:protocol` only once the server's SETTINGS_ENABLE_CONNECT_PROTOCOL came) carrying WebSocket
frames made and read by `wsproto`'s frame layer (masking, fragments, permessage-deflate).
Each behaviour is written once and run against ringloop on both loop backends and against
hypercorn, the one Python server with RFC 8441, as the reference. Nothing waits for time: a
test reads frames until what it waits for came, or polls what the application recorded
(`/results`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket

import h2.events
import h2.settings
import pytest
from h2_raw import H2Socket
from harness_basics import unavailable
from srv_harness import (
    HOST,
    HYPERCORN,
    RINGLOOP_KINDS,
    Kind,
    apply_kind_markers,
    check_kind,
    new_key,
    tls_files,
    wait_until,
)
from wsproto.extensions import PerMessageDeflate
from wsproto.frame_protocol import FrameProtocol, Opcode

APP = "srv_h2_ws_app:app"
NATIVE_APP = "srv_native_ws_app:app"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=(*RINGLOOP_KINDS, HYPERCORN))
def kind(request: pytest.FixtureRequest) -> Kind:
    k = Kind(request.param)
    check_kind(k)
    apply_kind_markers(request, k)
    if k.name == HYPERCORN and importlib.util.find_spec("hypercorn") is None:
        unavailable("hypercorn is not installed (benchmarks/requirements.txt)")
    return k


@pytest.fixture
def server(kind: Kind, pool):
    # A 64 KiB request window on ringloop (hypercorn's is that already): messages larger
    # than it need credit given back as the application reads.
    settings = {"http2_initial_stream_window_size": 65535} if kind.is_ringloop else {}
    return pool.get(kind, APP, "asgi", **settings)


# -- the client -----------------------------------------------------------------------------------


class Client(H2Socket):
    """h2's client connection over a socket; `until(cond)` reads frames until `cond()`. The
    DATA a stream receives is acknowledged (credit given back) as it is read, unless `ack` is
    off (a client that holds the server at its stream windows; its connection window is
    opened wide so that the other streams' answers still come)."""

    def __init__(self, port: int, *, tls: bool = False) -> None:
        super().__init__(port, tls=tls, nodelay=True, header_encoding="utf-8")
        self.ack = True
        self.port = port
        self.scheme = "https" if tls else "http"
        self.conn.increment_flow_control_window(1 << 24)
        self.remote_settings: dict[int, int] = {}
        self.headers: dict[int, dict[str, str]] = {}
        self.data: dict[int, bytearray] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.holding: set[int] = set()
        self.unacked: dict[int, int] = {}
        self.flush()
        self.until(lambda: self.remote_settings, "the server's SETTINGS")

    def on_event(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            self.remote_settings.update({k: v.new_value for k, v in ev.changed_settings.items()})
        elif isinstance(ev, h2.events.ResponseReceived):
            self.headers[ev.stream_id] = dict(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            self.data.setdefault(ev.stream_id, bytearray()).extend(ev.data)
            if self.ack or ev.stream_id not in self.holding:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            else:
                self.unacked[ev.stream_id] = (
                    self.unacked.get(ev.stream_id, 0) + ev.flow_controlled_length
                )
        elif isinstance(ev, h2.events.StreamEnded):
            self.ended.add(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            self.resets[ev.stream_id] = ev.error_code

    def get(self, path: str) -> tuple[int, bytes]:
        sid = self.conn.get_next_available_stream_id()
        h = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", HOST)]
        self.conn.send_headers(sid, h, end_stream=True)
        self.flush()
        self.until(lambda: sid in self.ended or sid in self.resets, f"stream {sid} to end")
        return int(self.headers[sid][":status"]), bytes(self.data.get(sid, b""))

    def send_data(self, sid: int, data: bytes, end: bool = False) -> None:
        """Send `data` on stream `sid` as the windows allow, reading the server's
        WINDOW_UPDATEs meanwhile."""
        view = memoryview(data)
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room == 0:
                self.read()
                continue
            self.conn.send_data(sid, bytes(view[:room]))
            self.flush()
            view = view[room:]
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def hold(self, sid: int) -> None:
        """Stop giving stream `sid` credit back (`release` gives it all)."""
        self.ack = False
        self.holding.add(sid)

    def release(self, sid: int) -> None:
        self.ack = True
        self.holding.discard(sid)
        n = self.unacked.pop(sid, 0)
        if n:
            self.conn.acknowledge_received_data(n, sid)
            self.flush()


class Ws:
    """A WebSocket session over an extended CONNECT stream of `client` (RFC 8441 §4)."""

    def __init__(
        self,
        client: Client,
        path: str,
        *,
        subprotocols: tuple[str, ...] = (),
        deflate: bool = False,
        early: str | None = None,
    ) -> None:
        """`early`: a text message sent right behind the HEADERS, before the answer."""
        self.c = client
        self.sid = client.conn.get_next_available_stream_id()
        h = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", client.scheme),
            (":path", path),
            (":authority", f"{HOST}:{client.port}"),
            ("sec-websocket-version", "13"),
        ]
        if subprotocols:
            h.append(("sec-websocket-protocol", ", ".join(subprotocols)))
        ext = PerMessageDeflate()
        if deflate:
            h.append(("sec-websocket-extensions", f"permessage-deflate; {ext.offer()}"))
        client.conn.send_headers(self.sid, h)
        if early is not None:
            client.conn.send_data(self.sid, bytes(FrameProtocol(True, []).send_data(early)))
        client.flush()
        client.until(self._answered, f"the answer to stream {self.sid}")
        self.head = client.headers.get(self.sid, {})
        self.status = int(self.head[":status"]) if self.head else None
        agreed = self.head.get("sec-websocket-extensions")
        if agreed:
            ext.finalize(agreed)
        self.proto = FrameProtocol(client=True, extensions=[ext] if agreed else [])
        self.fed = 0
        self.parts: list = []
        self.events: list = []

    def _answered(self) -> bool:
        return self.sid in self.c.headers or self.sid in self.c.resets

    @property
    def wire_bytes(self) -> int:
        """DATA bytes the stream has carried to the client so far."""
        return len(self.c.data.get(self.sid, b""))

    def send(self, payload: str | bytes, *, fin: bool = True) -> None:
        self.c.send_data(self.sid, bytes(self.proto.send_data(payload, fin)))

    def ping(self, payload: bytes) -> None:
        self.c.send_data(self.sid, bytes(self.proto.ping(payload)))

    def close(self, code: int, reason: str = "", *, end: bool = True) -> None:
        self.c.send_data(self.sid, bytes(self.proto.close(code, reason)), end=end)

    def reset(self) -> None:
        self.c.conn.reset_stream(self.sid)
        self.c.flush()

    def _decode(self) -> None:
        data = self.c.data.get(self.sid, b"")
        if len(data) > self.fed:
            self.proto.receive_bytes(bytes(data[self.fed :]))
            self.fed = len(data)
        for frame in self.proto.received_frames():
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONTINUATION):
                self.parts.append(frame.payload)
                if frame.message_finished:
                    text = isinstance(self.parts[0], str)
                    self.events.append(("".join if text else b"".join)(self.parts))
                    self.parts = []
            elif frame.opcode == Opcode.CLOSE:
                self.events.append(("close", int(frame.payload[0]), frame.payload[1]))
            else:
                self.events.append((frame.opcode.name.lower(), bytes(frame.payload)))

    def recv(self):
        """The next message (`str` or `bytes`), or `("ping"|"pong", payload)`,
        `("close", code, reason)`."""

        def got() -> bool:
            self._decode()
            return bool(self.events)

        self.c.until(
            lambda: got() or self.sid in self.c.resets or self.sid in self.c.ended, "a frame"
        )
        if not self.events:
            raise AssertionError(f"stream {self.sid} ended without a frame ({self.c.resets})")
        return self.events.pop(0)

    def ended(self) -> bool:
        return self.sid in self.c.ended or self.sid in self.c.resets


@pytest.fixture
def client(server):
    c = Client(server.port)
    yield c
    c.close()


def _result(client: Client, key: str):
    def recorded():
        status, body = client.get(f"/results?key={key}")
        return json.loads(body) if status == 200 else None

    return wait_until(recorded, 15, f"the application to record {key!r}")


# -- the handshake ----------------------------------------------------------------------------------


def test_settings_announce_enable_connect_protocol(client):
    """RFC 8441 §3: the server says it takes extended CONNECT in its SETTINGS."""
    assert client.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1


def test_echo_over_an_extended_connect_stream(client):
    ws = Ws(client, "/echo", subprotocols=("chat", "other"))
    assert ws.status == 200
    # §5: a 200 on the stream, no 101's fields and no Sec-WebSocket-Accept.
    assert ws.head.get("sec-websocket-protocol") == "chat"
    assert "sec-websocket-accept" not in ws.head and "upgrade" not in ws.head
    ws.send("hello")
    assert ws.recv() == "hello"
    ws.send(b"\x00\xff" * 1000)
    assert ws.recv() == b"\x00\xff" * 1000
    ws.ping(b"are you there")
    assert ws.recv() == ("pong", b"are you there")


def test_websocket_scope(client):
    ws = Ws(client, "/scope?x=1", subprotocols=("a", "b"))
    scope = json.loads(ws.recv())
    assert scope["type"] == "websocket"
    assert scope["http_version"] == "2"
    assert scope["scheme"] == "ws"
    assert scope["path"] == "/scope"
    assert scope["query_string"] == "x=1"
    assert scope["subprotocols"] == ["a", "b"]
    assert "method" not in scope
    headers = dict(scope["headers"])
    assert headers["sec-websocket-version"] == "13"
    assert not any(name.startswith(":") for name in headers)


def test_permessage_deflate_negotiated_and_used(client):
    ws = Ws(client, "/echo", deflate=True)
    assert ws.head["sec-websocket-extensions"].startswith("permessage-deflate")
    text = "compress me " * 10_000
    before = ws.wire_bytes
    ws.send(text)
    assert ws.recv() == text
    # The echo came compressed: far fewer bytes on the stream than the message.
    assert ws.wire_bytes - before < len(text) // 10


def test_fragmented_messages(client):
    ws = Ws(client, "/echo")
    ws.send("frag", fin=False)
    ws.send("men", fin=False)
    ws.send("ted")
    assert ws.recv() == "fragmented"
    ws.send(b"\x01" * 70_000, fin=False)
    ws.ping(b"between fragments")
    ws.send(b"\x02" * 70_000)
    assert ws.recv() == ("pong", b"between fragments")
    assert ws.recv() == b"\x01" * 70_000 + b"\x02" * 70_000


def test_messages_larger_than_the_stream_windows(client):
    """Both ways past a 64 KiB window: the client's upload goes as the server gives credit
    back (the application reads), and the server's 1 MiB message is held to the client's
    window (h2 refuses a frame beyond it) and arrives whole as the client acknowledges."""
    ws = Ws(client, "/big?n=1048576")
    assert ws.recv() == bytes(range(256)) * 4096
    upload = bytes(range(255, -1, -1)) * 4096
    ws.send(upload)
    assert ws.recv() == upload


# -- the end ----------------------------------------------------------------------------------------

# hypercorn 0.18 forgets a WebSocket stream once it has answered a close, and the client's
# END_STREAM that follows (RFC 8441 §5: each side ends its half) then ends the connection with
# a KeyError in its h2 protocol.
HYPERCORN_END_STREAM = pytest.mark.reference_lax(
    "hypercorn drops the connection at the client's END_STREAM after a close", kinds=(HYPERCORN,)
)


@HYPERCORN_END_STREAM
def test_client_close_reaches_the_application(client):
    key = new_key()
    ws = Ws(client, f"/echo?key={key}")
    ws.close(4001, "done")
    assert ws.recv() == ("close", 4001, "")
    client.until(ws.ended, "the stream to end")
    assert ws.sid not in client.resets
    got = _result(client, key)
    assert (got["type"], got["code"]) == ("websocket.disconnect", 4001)


@HYPERCORN_END_STREAM
def test_application_close_ends_the_stream(client):
    ws = Ws(client, "/echo")
    ws.send("close:4002:bye")
    assert ws.recv() == ("close", 4002, "bye")
    ws.close(4002, end=True)
    client.until(ws.ended, "the stream to end")
    assert ws.sid not in client.resets or client.resets[ws.sid] == 0
    # The connection serves on.
    assert client.get("/") == (200, b"plain http")


def test_client_reset_is_a_1006_disconnect(client):
    key = new_key()
    ws = Ws(client, f"/echo?key={key}")
    ws.send("still here")
    assert ws.recv() == "still here"
    ws.reset()
    got = _result(client, key)
    assert (got["type"], got["code"]) == ("websocket.disconnect", 1006)


def test_connection_loss_is_a_1006_disconnect(server, client):
    key = new_key()
    lost = Client(server.port)
    ws = Ws(lost, f"/echo?key={key}")
    ws.send("still here")
    assert ws.recv() == "still here"
    lost.sock.shutdown(socket.SHUT_RDWR)
    lost.close()
    got = _result(client, key)
    assert (got["type"], got["code"]) == ("websocket.disconnect", 1006)


def test_denial_before_accept_is_403_on_the_stream(client):
    ws = Ws(client, "/deny")
    assert ws.status == 403
    client.until(ws.ended, "the stream to end")
    assert client.get("/") == (200, b"plain http")


def test_denial_with_an_http_response(client):
    """The `websocket.http.response` extension: the application's own answer on the
    stream instead of the session."""
    ws = Ws(client, "/http-deny")
    assert ws.status == 401
    assert ws.head["x-deny"] == "1"
    client.until(ws.ended, "the stream to end")
    assert bytes(client.data[ws.sid]) == b"not you"


def test_other_streams_go_on_beside_an_open_session(client):
    ws = Ws(client, "/echo")
    ws.send("one")
    assert ws.recv() == "one"
    for _ in range(3):
        assert client.get("/") == (200, b"plain http")
    other = Ws(client, "/echo")
    other.send("two")
    ws.send("three")
    assert other.recv() == "two"
    assert ws.recv() == "three"


# -- ringloop's own ---------------------------------------------------------------------------------


@pytest.fixture
def native_server(ringloop_kind, pool):
    return pool.get(ringloop_kind, NATIVE_APP, "native")


@pytest.fixture
def native(native_server):
    c = Client(native_server.port)
    yield c
    c.close()


def _closed_with(native: Client, path: str, code: int) -> None:
    def closed():
        status, body = native.get("/record")
        return [path, code, ""] in json.loads(body)["closes"] or None

    wait_until(closed, 15, f"on_close({code}) of {path} to be recorded")


def test_native_handler_over_http2(native):
    """The native handlers' WebSocket API over an extended CONNECT stream: on_connect's
    subprotocol, on_message, ws.close with a code and reason, on_close recorded."""
    ws = Ws(native, "/native-h2", subprotocols=("chat",), deflate=True)
    assert ws.status == 200
    assert ws.head["sec-websocket-protocol"] == "chat"
    ws.send("hello native")
    assert ws.recv() == "hello native"
    big = b"n" * 300_000
    ws.send(big)
    assert ws.recv() == big
    ws.send("close")
    assert ws.recv() == ("close", 4000, "bye")
    ws.close(4000, end=True)
    native.until(ws.ended, "the stream to end")
    _closed_with(native, "/native-h2", 4000)


def test_native_reset_and_loss_are_on_close_1006(native_server, native):
    ws = Ws(native, "/native-reset")
    ws.send("x")
    assert ws.recv() == "x"
    ws.reset()
    _closed_with(native, "/native-reset", 1006)
    lost = Client(native_server.port)
    ws = Ws(lost, "/native-lost")
    ws.send("y")
    assert ws.recv() == "y"
    lost.sock.shutdown(socket.SHUT_RDWR)
    lost.close()
    _closed_with(native, "/native-lost", 1006)


def test_native_send_is_held_to_the_stream_window(native):
    """A native handler that sends until `send` says stop, to a client that gives its
    stream no credit: `send` returns False once the window (64 KiB) is full, no more than
    that crosses, and the rest arrives once the client reads."""

    def record() -> dict:
        status, body = native.get("/record")
        return json.loads(body)

    before = record()
    ws = Ws(native, "/flood-h2")
    native.hold(ws.sid)
    ws.send("flood")
    # The handler ran: its `send` returned False at the first message past the window.
    got = wait_until(
        lambda: (r := record())["flood_false"] > before["flood_false"] and r, 15, "flood"
    )
    assert got["flood_sent"] - before["flood_sent"] == 1
    assert ws.wire_bytes <= 65535
    native.release(ws.sid)
    assert ws.recv() == b"f" * 65536


def test_native_handler_denies_with_403(native):
    ws = Ws(native, "/deny")
    assert ws.status == 403
    native.until(ws.ended, "the stream to end")


def test_a_message_sent_before_the_answer(ringloop_kind, pool):
    """Bytes the client sends behind its HEADERS, before the 200 (in the same packet), are
    the session's first message once it is accepted."""
    server = pool.get(ringloop_kind, APP, "asgi", http2_initial_stream_window_size=65535)
    c = Client(server.port)
    try:
        ws = Ws(c, "/echo", early="eager")
        assert ws.status == 200
        assert ws.recv() == "eager"
        ws.send("then")
        assert ws.recv() == "then"
    finally:
        c.close()


def test_credit_comes_back_only_as_the_application_reads(ringloop_kind, pool):
    """An application that does not read holds its client at one window (64 KiB here): the
    client fills it and gets no credit while the application waits, though the connection
    answers other streams meanwhile; once it reads, credit comes and the message goes."""
    server = pool.get(ringloop_kind, APP, "asgi", http2_initial_stream_window_size=65535)
    c = Client(server.port)
    try:
        key = new_key()
        ws = Ws(c, f"/lazy?key={key}")
        frame = bytes(ws.proto.send_data(b"m" * 200_000))
        c.send_data(ws.sid, frame[:65535])
        assert c.conn.local_flow_control_window(ws.sid) == 0
        # The server has read all of it by the time a later stream is answered.
        assert c.get("/") == (200, b"plain http")
        assert c.conn.local_flow_control_window(ws.sid) == 0
        assert c.get(f"/release?key={key}") == (200, b"plain http")
        c.send_data(ws.sid, frame[65535:])
        assert ws.recv() == b"m" * 200_000
    finally:
        c.close()


def test_graceful_shutdown_closes_with_1001(ringloop_kind, start_server):
    """SIGTERM: an open session over HTTP/2 gets close 1001 (going away) and its stream
    ends once the client answers; the server exits."""
    server = start_server(ringloop_kind, APP, "asgi")
    c = Client(server.port)
    try:
        ws = Ws(c, "/echo")
        ws.send("before")
        assert ws.recv() == "before"
        os.kill(server.proc.pid, signal.SIGTERM)
        assert ws.recv() == ("close", 1001, "")
        ws.close(1001)
        c.until(ws.ended, "the stream to end")
        c.until(lambda: c.goaways, "the GOAWAY")
        assert server.proc.wait(30) == 0
    finally:
        c.close()


def test_over_tls_alpn_h2(ringloop_kind, pool):
    """wss over HTTP/2: ALPN h2, the extended CONNECT with `:scheme https`, deflate on."""
    files = tls_files()
    server = pool.get(
        ringloop_kind, APP, "asgi", ssl_certfile=files["cert"], ssl_keyfile=files["key"]
    )
    c = Client(server.port, tls=True)
    try:
        ws = Ws(c, "/scope", deflate=True)
        scope = json.loads(ws.recv())
        assert (scope["scheme"], scope["http_version"]) == ("wss", "2")
        assert "tls" in scope["extensions"]
        ws.send("secure " * 1000)
        assert ws.recv() == "secure " * 1000
    finally:
        c.close()


def test_not_announced_without_websocket(ringloop_kind, pool):
    """`--ws off`: no SETTINGS_ENABLE_CONNECT_PROTOCOL, so a client keeps its WebSocket on
    HTTP/1.1 (h2 refuses `:protocol` then)."""
    server = pool.get(ringloop_kind, APP, "asgi", ws="off")
    c = Client(server.port)
    try:
        assert c.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL, 0) == 0
    finally:
        c.close()
