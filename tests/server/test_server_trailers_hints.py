"""Response trailers (ASGI `http.response.trailers`) and 103 Early Hints
(`http.response.early_hint`) on HTTP/1.1 and HTTP/2, and HTTP/2 keep-alive PINGs
(`--http2-keep-alive-interval`, `--http2-keep-alive-timeout`).

- Trailers are announced in `scope["extensions"]` only to a request that says `te: trailers`,
  on both versions. On HTTP/1.1 they follow the last chunk of a chunked body; where the body is
  not chunked (the application's own Content-Length, an HTTP/1.0 client) or the client did not
  ask, they are dropped and the response ends as it would without them.
- Early hints are announced on both versions: HTTP/1.1 writes `103 Early Hints` heads before the
  final one (none to an HTTP/1.0 client, RFC 8297 §3), HTTP/2 a HEADERS frame with `:status`
  103 and no END_STREAM. After `http.response.start`, the message raises `RuntimeError`.
- Keep-alive PINGs: after an interval with nothing from the client the server sends a PING; a
  client that answers keeps its connection, one that does not gets GOAWAY once the timeout has
  passed and its streams hear `http.disconnect`.

Clients: a raw socket with h11 parsing the bytes on HTTP/1.1 (h11 reads interim responses and
trailers), curl's `-v` for the 103 on both versions, and python-hyper's h2 over a socket on
HTTP/2, whose frames are also read by type (PING, GOAWAY). Tests wait for frames, for the
application to hold a stream (`/held`) or for what it recorded (`/results`), never for time.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

import h2.events
import h11
import httpx
import pytest
from h2_raw import H2Socket
from srv_harness import HOST, Kind, tls_files, wait_until

APP = "srv_hints_app:app"
pytestmark = pytest.mark.timeout(120)

TE = [("te", "trailers")]


@pytest.fixture
def server(ringloop_kind: Kind, pool):
    return pool.get(ringloop_kind, APP, "asgi")


def _result(server, key: str):
    """What the application recorded under `key` (waits until it has)."""
    got: list[object] = []

    def recorded() -> bool:
        r = httpx.get(server.url(f"/results?key={key}"))
        if r.status_code == 200:
            got.append(r.json())
        return bool(got)

    wait_until(recorded, 15, f"the application to record {key}")
    return got[0]


# -- HTTP/1.1: a raw socket, h11 reading -------------------------------------------------------


class H1:
    """A connection sending raw requests; `response()` reads one with h11 (interim heads,
    body, trailers), `raw` keeps every byte received."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=15)
        self.h11 = h11.Connection(h11.CLIENT)
        self.raw = b""

    def send(self, path: str, headers: list[tuple[str, str]] = (), version: str = "1.1") -> None:
        lines = [f"GET {path} HTTP/{version}", f"Host: {HOST}"]
        lines += [f"{n}: {v}" for n, v in headers]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode()
        # h11 is told the same request, so that it reads the answer in context.
        self.h11.send(h11.Request(method="GET", target=path, headers=[("Host", HOST), *headers]))
        self.h11.send(h11.EndOfMessage())
        self.sock.sendall(data)

    def response(self) -> dict:
        got: dict = {"interim": [], "body": b"", "trailers": []}
        while True:
            ev = self.h11.next_event()
            if ev is h11.NEED_DATA:
                chunk = self.sock.recv(65536)
                self.raw += chunk
                self.h11.receive_data(chunk)
                continue
            if isinstance(ev, h11.InformationalResponse):
                got["interim"].append((ev.status_code, [(n, v) for n, v in ev.headers]))
            elif isinstance(ev, h11.Response):
                got["status"] = ev.status_code
                got["headers"] = {n.decode(): v.decode() for n, v in ev.headers}
            elif isinstance(ev, h11.Data):
                got["body"] += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                got["trailers"] = [(n.decode(), v.decode()) for n, v in ev.headers]
                if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
                    self.h11.start_next_cycle()
                return got
            elif isinstance(ev, h11.ConnectionClosed):
                raise AssertionError("closed before the response ended")

    def close(self) -> None:
        self.sock.close()


def _raw_http10(port: int, path: str, headers: str = "") -> bytes:
    """An HTTP/1.0 request; everything the server sends until it closes."""
    with socket.create_connection((HOST, port), timeout=15) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\n{headers}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_h1_extensions_follow_te_trailers(server):
    c = H1(server.port)
    try:
        c.send("/extensions")
        plain = json.loads(c.response()["body"])
        c.send("/extensions", TE)
        asked = json.loads(c.response()["body"])
        # A list of codings that includes trailers counts too.
        c.send("/extensions", [("TE", "gzip, trailers")])
        listed = json.loads(c.response()["body"])
    finally:
        c.close()
    assert "http.response.trailers" not in plain
    assert "http.response.trailers" in asked and "http.response.trailers" in listed
    for ext in (plain, asked):
        assert "http.response.early_hint" in ext and "http.response.pathsend" in ext
    # HTTP/1.0 cannot read a chunked body: its `te: trailers` is not heard.
    data = _raw_http10(server.port, "/extensions", "TE: trailers\r\n")
    assert b"http.response.trailers" not in data and b"http.response.early_hint" in data


@pytest.mark.parametrize("n", [10, 300_000])
def test_h1_trailers_follow_the_last_chunk(server, n):
    """Two trailer messages arrive after the chunked body, large bodies (written from the
    application's own bytes) included; the connection carries the next request."""
    c = H1(server.port)
    try:
        c.send(f"/trailers?n={n}", TE)
        r = c.response()
        assert r["status"] == 200
        assert r["headers"]["transfer-encoding"] == "chunked"
        assert "content-length" not in r["headers"]
        assert r["body"] == b"t" * n
        assert r["trailers"] == [("x-size", str(n)), ("x-done", "yes")]
        assert c.raw.endswith(f"\r\n0\r\nx-size: {n}\r\nx-done: yes\r\n\r\n".encode())
        c.send("/trailers-only", TE)
        r = c.response()
        assert (r["body"], r["trailers"]) == (b"", [("grpc-status", "0")])
        assert c.raw.endswith(b"\r\n\r\n0\r\ngrpc-status: 0\r\n\r\n")
    finally:
        c.close()


@pytest.mark.parametrize(
    "target,headers",
    [("/trailers?n=10", []), ("/trailers?n=10&cl=1", TE), ("/trailers-only", [])],
    ids=["not-asked", "content-length", "not-asked-no-body"],
)
def test_h1_trailers_dropped_where_they_cannot_go(server, target, headers):
    """Not asked for, or a body the application framed with its own Content-Length: the
    response ends without them, and the connection goes on."""
    c = H1(server.port)
    try:
        c.send(target, headers)
        r = c.response()
        assert r["trailers"] == []
        assert r["body"] == (b"" if "only" in target else b"t" * 10)
        assert b"x-size" not in c.raw and b"grpc-status" not in c.raw
        c.send("/extensions")
        assert c.response()["status"] == 200
    finally:
        c.close()


def test_h1_trailers_to_http10_are_dropped(server):
    data = _raw_http10(server.port, "/trailers?n=10", "TE: trailers\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert body == b"t" * 10


@pytest.mark.parametrize("version", ["1.1", "2"])
def test_trailers_misuse_raises(server, version):
    """A trailer field that would split the message is a ValueError (a good one still ends the
    response); trailers without `trailers: True` a RuntimeError worded as the rest."""
    if version == "1.1":
        c = H1(server.port)
        try:
            c.send("/trailers-bad?key=bad1", TE)
            assert c.response()["trailers"] == [("x", "fine")]
            c.send("/trailers-unasked?key=unasked1", TE)
            r = c.response()
            assert (r["body"], r["trailers"]) == (b"body", [])
        finally:
            c.close()
    else:
        c = H2(server.port)
        try:
            sid = c.request("/trailers-bad?key=bad2", TE)
            c.until_ended(sid)
            assert c.trailers[sid] == {"x": "fine"}
            sid = c.request("/trailers-unasked?key=unasked2", TE)
            c.until_ended(sid)
            assert c.data[sid] == b"body"
        finally:
            c.close()
    n = "1" if version == "1.1" else "2"
    assert _result(server, f"bad{n}").startswith("ValueError: ")
    assert _result(server, f"unasked{n}") == (
        "RuntimeError: Unexpected ASGI message 'http.response.trailers' sent, "
        "without 'trailers': True or after the last one."
    )


# -- HTTP/1.1 early hints -----------------------------------------------------------------------


def test_h1_early_hints_before_the_response(server):
    c = H1(server.port)
    try:
        c.send("/hints")
        r = c.response()
    finally:
        c.close()
    assert r["interim"] == [
        (
            103,
            [
                (b"link", b"</style.css>; rel=preload; as=style"),
                (b"link", b"</app.js>; rel=preload; as=script"),
            ],
        ),
        (103, [(b"link", b"</style.css>; rel=preload; as=style")]),
    ]
    assert (r["status"], r["body"]) == (200, b"after the hints")
    assert c.raw.startswith(
        b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload; as=style\r\n"
        b"link: </app.js>; rel=preload; as=script\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
    )


def test_h1_early_hints_not_to_http10(server):
    data = _raw_http10(server.port, "/hints")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"103" not in data
    assert data.endswith(b"after the hints")


@pytest.mark.parametrize("version", ["1.1", "2"])
def test_early_hint_after_start_or_bad_raises(server, version):
    key = f"late{version}"
    bad = f"badlink{version}"
    if version == "1.1":
        assert httpx.get(server.url(f"/hint-late?key={key}")).text == "late"
        r = httpx.get(server.url(f"/hint-bad?key={bad}"))
        assert r.text == "ok"
    else:
        c = H2(server.port)
        try:
            sid = c.request(f"/hint-late?key={key}")
            c.until_ended(sid)
            assert c.informational.get(sid, []) == [] and c.data[sid] == b"late"
            sid = c.request(f"/hint-bad?key={bad}")
            c.until_ended(sid)
            assert c.data[sid] == b"ok"
        finally:
            c.close()
    assert _result(server, key) == (
        "RuntimeError: Unexpected ASGI message 'http.response.early_hint' sent, "
        "after response already started."
    )
    assert _result(server, bad).startswith("ValueError: invalid response")


def _curl_verbose(*args: str) -> str:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    r = subprocess.run([curl, "-sS", "-v", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stderr + r.stdout


@pytest.mark.parametrize("mode", ["1.1", "2"])
def test_early_hints_seen_by_curl(server, mode):
    flag = "--http1.1" if mode == "1.1" else "--http2-prior-knowledge"
    out = _curl_verbose(flag, server.url("/hints"))
    status = "HTTP/1.1 103 Early Hints" if mode == "1.1" else "HTTP/2 103"
    assert out.count(f"< {status}") == 2, out
    assert "< link: </app.js>; rel=preload; as=script" in out
    assert out.endswith("after the hints")


@pytest.mark.parametrize("mode", ["1.1", "2"])
def test_early_hints_over_tls(ringloop_kind: Kind, pool, mode):
    """Over TLS, ALPN choosing the version: the same 103s."""
    files = tls_files()
    server = pool.get(
        ringloop_kind, APP, "asgi", ssl_certfile=files["cert"], ssl_keyfile=files["key"]
    )
    flag = "--http1.1" if mode == "1.1" else "--http2"
    out = _curl_verbose(flag, "--cacert", files["ca"], server.url("/hints"))
    status = "HTTP/1.1 103 Early Hints" if mode == "1.1" else "HTTP/2 103"
    assert out.count(f"< {status}") == 2, out
    assert out.endswith("after the hints")


# -- HTTP/2: python-hyper's h2 over a socket ---------------------------------------------------


class H2(H2Socket):
    """h2's client connection over a socket. Besides h2's events, the frames are read by type:
    the server's PINGs (`pings`) and GOAWAYs (`goaways`, kept from h2, which closes at the
    first). `answer=False`: nothing more is sent (no PING ACK, no WINDOW_UPDATE), a peer gone
    silent."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.answer = True
        self.headers: dict[int, dict[str, str]] = {}
        self.informational: dict[int, list[dict[str, list[str]]]] = {}
        self.data: dict[int, bytes] = {}
        self.trailers: dict[int, dict[str, str]] = {}
        self.ended: set[int] = set()
        self.resets: set[int] = set()
        self.flush()

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out and self.answer:
            self.sock.sendall(out)

    def request(self, path: str, headers: list[tuple[str, str]] = ()) -> int:
        sid = self.conn.get_next_available_stream_id()
        h = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", HOST)]
        self.conn.send_headers(sid, h + list(headers), end_stream=True)
        self.flush()
        return sid

    def recv(self) -> bytes:
        # A connection the server ends with a reset (TCP's, where it closes with bytes of ours
        # unread) has ended as well.
        try:
            return super().recv()
        except ConnectionResetError:
            return b""

    def on_event(self, ev: h2.events.Event) -> None:
        sid = getattr(ev, "stream_id", None)
        if isinstance(ev, h2.events.InformationalResponseReceived):
            fields: dict[str, list[str]] = {}
            for n, v in ev.headers:
                fields.setdefault(n.decode(), []).append(v.decode())
            self.informational.setdefault(sid, []).append(fields)
        elif isinstance(ev, h2.events.ResponseReceived):
            self.headers[sid] = {k.decode(): v.decode() for k, v in ev.headers}
        elif isinstance(ev, h2.events.DataReceived):
            self.data[sid] = self.data.get(sid, b"") + ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.trailers[sid] = {k.decode(): v.decode() for k, v in ev.headers}
        elif isinstance(ev, h2.events.StreamEnded):
            self.ended.add(sid)
        elif isinstance(ev, h2.events.StreamReset):
            self.resets.add(sid)

    def until_ended(self, sid: int) -> None:
        self.until(lambda: sid in self.ended or sid in self.resets, f"stream {sid} to end")
        assert sid not in self.resets, f"stream {sid} was reset"


def test_h2_trailers_only_when_asked(server):
    c = H2(server.port)
    try:
        plain = c.request("/extensions")
        asked = c.request("/extensions", TE)
        c.until_ended(plain)
        c.until_ended(asked)
        assert "http.response.trailers" not in json.loads(c.data[plain])
        assert "http.response.trailers" in json.loads(c.data[asked])
        assert "http.response.early_hint" in json.loads(c.data[plain])
        for n in (10, 300_000):
            sid = c.request(f"/trailers?n={n}", TE)
            c.until_ended(sid)
            assert c.data[sid] == b"t" * n
            assert c.trailers[sid] == {"x-size": str(n), "x-done": "yes"}
        # Not asked: the stream ends (an empty DATA) without them.
        sid = c.request("/trailers?n=10")
        c.until_ended(sid)
        assert c.data[sid] == b"t" * 10 and sid not in c.trailers
        sid = c.request("/trailers-only", TE)
        c.until_ended(sid)
        assert c.trailers[sid] == {"grpc-status": "0"}
    finally:
        c.close()


def test_h2_early_hints_are_103_heads(server):
    c = H2(server.port)
    try:
        sid = c.request("/hints")
        c.until_ended(sid)
    finally:
        c.close()
    assert c.informational[sid] == [
        {
            ":status": ["103"],
            "link": ["</style.css>; rel=preload; as=style", "</app.js>; rel=preload; as=script"],
        },
        {":status": ["103"], "link": ["</style.css>; rel=preload; as=style"]},
    ]
    assert c.headers[sid][":status"] == "200" and c.data[sid] == b"after the hints"


# -- HTTP/2 keep-alive PINGs -------------------------------------------------------------------

# A client that never answers is found after 0.5 s; one that answers is given 30 s, so that a
# loaded machine delaying its ACK cannot end its connection.
PINGING = {"http2_keep_alive_interval": 200, "http2_keep_alive_timeout": 0.5}
PATIENT = {"http2_keep_alive_interval": 200, "http2_keep_alive_timeout": 30}


def _held(server, key: str) -> None:
    wait_until(
        lambda: httpx.get(server.url(f"/held?key={key}")).text == "1", 15, f"{key} to be held"
    )


def test_h2_keep_alive_ping_unanswered_ends_the_connection(ringloop_kind: Kind, pool):
    """A client gone silent with a stream open: PING, then (no ACK) GOAWAY; the stream's
    application hears `http.disconnect`."""
    server = pool.get(ringloop_kind, APP, "asgi", **PINGING)
    c = H2(server.port)
    try:
        c.request("/hold?key=silent")
        _held(server, "silent")
        c.answer = False
        c.until(lambda: bool(c.goaways) or c.closed, "a GOAWAY")
        c.until_closed()
    finally:
        c.close()
    assert c.pings >= 1
    assert c.goaways and c.goaways[-1][1] == 0  # NO_ERROR
    assert _result(server, "silent") == "http.disconnect"


def test_h2_keep_alive_ping_answered_keeps_the_connection(ringloop_kind: Kind, pool):
    server = pool.get(ringloop_kind, APP, "asgi", **PATIENT)
    c = H2(server.port)
    try:
        sid = c.request("/hold?key=answering")
        _held(server, "answering")
        # Several intervals and timeouts go by, every PING acknowledged.
        c.until(lambda: c.pings >= 4, "four PINGs")
        assert not c.goaways
        httpx.get(server.url("/release?key=answering"))
        c.until_ended(sid)
        assert c.data[sid] == b"released answering"
        assert not c.goaways
    finally:
        c.close()


def test_h2_idle_connection_still_times_out_with_pings(ringloop_kind: Kind, pool):
    """PINGs and their ACKs are not activity: an idle connection still gets its GOAWAY after
    `--timeout-keep-alive`."""
    server = pool.get(ringloop_kind, APP, "asgi", timeout_keep_alive=1, **PATIENT)
    c = H2(server.port)
    try:
        c.until_ended(c.request("/extensions"))
        c.until(lambda: bool(c.goaways), "the idle GOAWAY")
    finally:
        c.close()
    assert c.goaways[0][1] == 0
