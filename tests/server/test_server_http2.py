"""HTTP/2: an ASGI application served by `ringloop serve` answers h2c with prior knowledge
(the client preface before anything else) and HTTP/2 over TLS (ALPN `h2`), a stream per
request and many at once on one connection.

Clients are real ones: httpx (`http2=True`, python-hyper's h2 underneath), curl
(`--http2-prior-knowledge`, `--http2`), nghttp2's h2load for many streams, and h2's own
connection object over a socket where a test needs frames the others will not send at will
(a RST_STREAM at a chosen moment, two streams whose answers must come in a chosen order).
Nothing waits for time: a test waits for frames, for the application to say it holds a
stream (`/held`), or for a result it recorded (`/results`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import socket
import ssl
import subprocess

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import pytest
from h2_raw import H2Socket
from srv_harness import HOST, Kind, tls_files, wait_until

APP = "srv_h2_app:app"
pytestmark = pytest.mark.timeout(120)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (curl; h2load is Debian's nghttp2-client)")
    return path


def _curl(*args: str) -> str:
    """curl's body for the URL last in ``args``, then a line with the HTTP version it used."""
    return subprocess.run(
        [_tool("curl"), "-sS", *args[:-1], "-w", "\n%{http_version}", args[-1]],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


# -- a client that speaks frames ----------------------------------------------------------------


class H2Client(H2Socket):
    """h2's client connection over a socket (TLS with ALPN h2 if `tls`): requests are sent
    when asked and what comes back is kept per stream, GOAWAYs in `goaways` (a graceful
    shutdown sends two); `until(cond)` reads until `cond()`."""

    def __init__(self, port: int, *, tls: bool = False, timeout: float = 15.0) -> None:
        super().__init__(port, tls=tls, timeout=timeout)
        self.headers: dict[int, dict[str, str]] = {}
        self.data: dict[int, bytearray] = {}
        self.ended: list[int] = []  # in the order the streams ended
        self.resets: dict[int, int] = {}
        self.trailers: dict[int, dict[str, str]] = {}
        self.settings: dict[int, int] = {}
        self.flush()

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        headers: list[tuple[str, str]] | None = None,
        body: bytes | None = None,
        authority: str | None = None,
        end: bool = True,
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        h = [
            (":method", method),
            (":path", path),
            (":scheme", "http"),
            (":authority", authority or f"{HOST}"),
        ]
        self.conn.send_headers(sid, h + (headers or []), end_stream=body is None and end)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def end_stream(self, sid: int) -> None:
        self.conn.end_stream(sid)
        self.flush()

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid)
        self.flush()

    def on_event(self, ev: h2.events.Event) -> None:
        if isinstance(ev, h2.events.ResponseReceived):
            self.headers[ev.stream_id] = {k.decode(): v.decode() for k, v in ev.headers}
        elif isinstance(ev, h2.events.DataReceived):
            self.data.setdefault(ev.stream_id, bytearray()).extend(ev.data)
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            self.trailers[ev.stream_id] = {k.decode(): v.decode() for k, v in ev.headers}
        elif isinstance(ev, h2.events.StreamEnded):
            self.ended.append(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            self.resets[ev.stream_id] = ev.error_code
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            self.settings.update({k: v.new_value for k, v in ev.changed_settings.items()})

    def response(self, sid: int) -> tuple[int, bytes]:
        self.until(lambda: sid in self.ended or sid in self.resets, f"stream {sid} to end")
        assert sid not in self.resets, f"stream {sid} reset ({self.resets[sid]})"
        return int(self.headers[sid][":status"]), bytes(self.data.get(sid, b""))

    def get(self, path: str) -> tuple[int, bytes]:
        return self.response(self.request(path))


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def h2c(ringloop_kind: Kind, pool):
    """The shared cleartext server of the suite's app on this kind."""
    return pool.get(ringloop_kind, APP, "asgi")


@pytest.fixture
def h2tls(ringloop_kind: Kind, pool):
    """The same app over TLS (ALPN offers h2, then http/1.1)."""
    files = tls_files()
    return pool.get(
        ringloop_kind, APP, "asgi", ssl_certfile=files["cert"], ssl_keyfile=files["key"]
    )


def _client_ctx() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls_files()["ca"])


def _wait_held(server, key: str, n: int = 1) -> None:
    def held() -> bool:
        r = httpx.get(server.url(f"/held?key={key}"), verify=_client_ctx())
        return r.json() >= n

    wait_until(held, 15, f"{n} stream(s) holding {key}")


# -- the protocol is chosen -----------------------------------------------------------------------


def test_h2c_prior_knowledge_with_httpx(h2c):
    """The preface before anything else: the connection speaks HTTP/2, the app sees
    `http_version` "2"."""
    with httpx.Client(http1=False, http2=True) as c:
        r = c.get(h2c.url("/"))
        assert r.http_version == "HTTP/2"
        assert r.status_code == 200
        assert r.text == "hello over 2"
        assert r.headers["server"] == "ringloop"
        assert "date" in r.headers
        # The same connection carries the next request.
        assert c.get(h2c.url("/")).text == "hello over 2"


def test_h2c_prior_knowledge_with_curl(h2c):
    out = _curl("--http2-prior-knowledge", h2c.url("/"))
    assert out == "hello over 2\n2"


def test_http1_still_served_beside_h2c(h2c):
    """A client that sends HTTP/1.1 first is served HTTP/1.1 by the same server."""
    r = httpx.get(h2c.url("/"))
    assert r.http_version == "HTTP/1.1"
    assert r.text == "hello over 1.1"


def test_preface_in_pieces_and_a_method_named_pri(h2c):
    """The preface may arrive in pieces (held until it is whole); an HTTP/1.1 request whose
    method happens to be `PRI` is not a preface and is HTTP/1.1's."""
    with socket.create_connection((HOST, h2c.port), timeout=15) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(
            1,
            [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", HOST)],
            end_stream=True,
        )
        out = conn.data_to_send()
        for piece in (out[:3], out[3:17], out[17:]):
            s.sendall(piece)
        body, ended = b"", False
        while not ended:
            for ev in conn.receive_data(s.recv(65536)):
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                ended = ended or isinstance(ev, h2.events.StreamEnded)
            s.sendall(conn.data_to_send())
        assert body == b"hello over 2"
    with socket.create_connection((HOST, h2c.port), timeout=15) as s:
        s.sendall(b"PRI / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello over 1.1"), data


def test_upgrade_h2c_is_served_as_http1(h2c):
    """`Upgrade: h2c` (RFC 7540 §3.2, dropped by RFC 9113) is not supported, as granian and
    uvicorn do not: curl's `--http2` in cleartext asks for it and is answered HTTP/1.1."""
    out = _curl("--http2", h2c.url("/"))
    assert out == "hello over 1.1\n1.1"


def test_alpn_h2_over_tls(h2tls):
    """Over TLS the ALPN offer picks HTTP/2 (httpx, curl) and the scope says https."""
    ca = tls_files()["ca"]
    with httpx.Client(http2=True, verify=_client_ctx()) as c:
        r = c.get(h2tls.url("/scope"))
        assert r.http_version == "HTTP/2"
        s = r.json()
        assert (s["http_version"], s["scheme"], s["tls"]) == ("2", "https", True)
    out = _curl("--http2", "--cacert", ca, h2tls.url("/"))
    assert out == "hello over 2\n2"


def test_alpn_falls_back_to_http1_for_a_client_offering_only_it(h2tls):
    ctx = ssl.create_default_context(cafile=tls_files()["ca"])
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((HOST, h2tls.port), timeout=15) as raw:
        with ctx.wrap_socket(raw, server_hostname=HOST) as s:
            assert s.selected_alpn_protocol() == "http/1.1"
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert data.endswith(b"hello over 1.1")
    with httpx.Client(http2=False, verify=_client_ctx()) as c:
        assert c.get(h2tls.url("/")).http_version == "HTTP/1.1"


def test_http_1_refuses_the_preface(ringloop_kind: Kind, pool):
    """`--http 1`: the preface is read as an HTTP/1.1 request line, as before HTTP/2 came:
    its version is refused (505) and the connection closed."""
    server = pool.get(ringloop_kind, APP, "asgi", http="1")
    with socket.create_connection((HOST, server.port), timeout=15) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 505"), data[:100]
    assert httpx.get(server.url("/")).text == "hello over 1.1"


def test_http_2_in_cleartext_speaks_only_http2(ringloop_kind: Kind, pool):
    """`--http 2`: the first bytes are HTTP/2's whatever they are; an HTTP/1.1 request gets
    no HTTP/1.1 answer (the core ends the connection for a missing preface)."""
    server = pool.get(ringloop_kind, APP, "asgi", http="2")
    c = H2Client(server.port)
    try:
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()
    with socket.create_connection((HOST, server.port), timeout=15) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                data += chunk
    assert not data.startswith(b"HTTP/1.1"), data[:100]


def test_http_2_over_tls_offers_only_h2(ringloop_kind: Kind, pool):
    files = tls_files()
    server = pool.get(
        ringloop_kind, APP, "asgi", http="2", ssl_certfile=files["cert"], ssl_keyfile=files["key"]
    )
    c = H2Client(server.port, tls=True)
    try:
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()
    ctx = ssl.create_default_context(cafile=files["ca"])
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((HOST, server.port), timeout=15) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw, server_hostname=HOST) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(1)


# -- the scope --------------------------------------------------------------------------------------


def test_scope_from_pseudo_headers(h2c):
    c = H2Client(h2c.port)
    try:
        sid = c.request(
            "/scope/a%20b?x=1&y=2",
            authority="example.test:8080",
            headers=[("cookie", "a=1"), ("x-custom", "v"), ("cookie", "b=2")],
        )
        status, body = c.response(sid)
    finally:
        c.close()
    assert status == 200
    s = json.loads(body)
    assert s["type"] == "http"
    assert s["http_version"] == "2"
    assert s["method"] == "GET"
    assert s["scheme"] == "http"
    assert s["path"] == "/scope/a b"
    assert s["raw_path"] == "/scope/a%20b"
    assert s["query_string"] == "x=1&y=2"
    assert s["client_is_tuple"] and s["server"][0] == HOST
    headers = s["headers"]
    assert not any(n.startswith(":") for n, _ in headers), headers
    assert ["host", "example.test:8080"] in headers
    assert ["x-custom", "v"] in headers
    # RFC 9113 §8.2.3: the cookie fields joined for an HTTP/1.1-shaped consumer.
    assert [v for n, v in headers if n == "cookie"] == ["a=1; b=2"]


# -- bodies and flow control ------------------------------------------------------------------------


def test_post_larger_than_the_stream_window(ringloop_kind: Kind, pool):
    """A 1 MiB upload through a 64 KiB stream and connection window arrives whole: credit
    comes back as the application's `receive()` takes the body, so it takes many messages."""
    server = pool.get(
        ringloop_kind,
        APP,
        "asgi",
        http2_initial_stream_window_size=65535,
        http2_initial_connection_window_size=65535,
    )
    body = bytes(range(256)) * 4096
    with httpx.Client(http1=False, http2=True) as c:
        r = c.post(server.url("/echo"), content=body)
    assert r.status_code == 200
    got = r.json()
    assert got["size"] == len(body)
    assert got["sha256"] == hashlib.sha256(body).hexdigest()
    assert got["messages"] > 1


def test_request_credit_comes_back_only_when_the_application_reads(ringloop_kind: Kind, pool):
    """An application that does not read holds its client at one window: the client fills
    the stream's 64 KiB and gets no credit while the application waits (credit given on
    arrival would reach the client before the answer to a later stream on the same
    connection); once the application reads, credit comes and the rest of the body goes."""
    server = pool.get(
        ringloop_kind,
        APP,
        "asgi",
        http2_initial_stream_window_size=65535,
        http2_initial_connection_window_size=65535,
    )
    c = H2Client(server.port)
    total, sent = 512 * 1024, 0

    def send_what_fits() -> None:
        nonlocal sent
        while sent < total:
            n = min(c.conn.local_flow_control_window(sid), c.conn.max_outbound_frame_size)
            n = min(n, total - sent)
            if n <= 0:
                break
            c.conn.send_data(sid, b"u" * n)
            sent += n
        c.flush()

    try:
        c.get("/")  # the server's SETTINGS are in
        sid = c.request("/read-after?key=credit", method="POST", end=False)
        send_what_fits()
        assert sent == 65535
        assert c.get("/") == (200, b"hello over 2")
        assert c.conn.local_flow_control_window(sid) == 0
        c.request("/release?key=credit")
        while sent < total:
            c.until(lambda: c.conn.local_flow_control_window(sid) > 0, "credit")
            send_what_fits()
        c.end_stream(sid)
        status, body = c.response(sid)
        assert (status, json.loads(body)) == (200, {"size": total})
    finally:
        c.close()


def test_response_larger_than_the_client_window(h2c):
    """A 1 MiB response to a client with the default 64 KiB windows: `send()` waits for the
    client's WINDOW_UPDATEs and every byte arrives."""
    c = H2Client(h2c.port)
    try:
        status, body = c.get("/big?n=1048576")
    finally:
        c.close()
    assert status == 200
    assert body == b"b" * 1048576


def test_response_trailers_extension(h2c):
    """ASGI's `http.response.trailers` is announced to a request that says `te: trailers`
    (also over HTTP/1.1: `test_server_trailers_hints.py`): the trailers of two messages arrive
    after the body, also after a body that had to wait for the client's window."""
    te = [("te", "trailers")]
    c = H2Client(h2c.port)
    try:
        status, body = c.response(c.request("/scope", headers=te))
        assert "http.response.trailers" in json.loads(body)["extensions"]
        status, body = c.get("/scope")
        assert "http.response.trailers" not in json.loads(body)["extensions"]
        for n in (10, 300000):
            sid = c.request(f"/trailers?n={n}", headers=te)
            assert c.response(sid) == (200, b"t" * n)
            assert c.trailers[sid] == {"x-size": str(n), "x-done": "yes"}
    finally:
        c.close()
    assert "http.response.trailers" not in httpx.get(h2c.url("/scope")).json()["extensions"]


# -- many streams -------------------------------------------------------------------------------------


def test_many_streams_with_h2load(h2c):
    h2load = _tool("h2load")
    out = subprocess.run(
        [h2load, "-n", "400", "-c", "2", "-m", "64", h2c.url("/")],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "400 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 400 2xx" in out, out


def test_many_uploads_at_once_with_h2load(h2c, tmp_path):
    """Bodies on many streams at once, each past a 64 KiB window: every one read whole."""
    h2load = _tool("h2load")
    body = tmp_path / "body"
    body.write_bytes(b"p" * 100_000)
    out = subprocess.run(
        [h2load, "-n", "200", "-c", "2", "-m", "16", "-d", str(body), h2c.url("/echo")],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "200 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 200 2xx" in out, out


def test_a_slow_stream_does_not_hold_the_others(h2c):
    """Stream A's application waits; B, C answer meanwhile on the same connection; A answers
    once released: completion is interleaved, not in request order."""
    c = H2Client(h2c.port)
    try:
        a = c.request("/hold?key=slow-a")
        _wait_held(h2c, "slow-a")
        b = c.request("/")
        d = c.request("/scope")
        assert c.response(b) == (200, b"hello over 2")
        assert c.response(d)[0] == 200
        assert a not in c.ended
        c.request("/release?key=slow-a")
        assert c.response(a) == (200, b"released slow-a")
        assert c.ended.index(b) < c.ended.index(a) and c.ended.index(d) < c.ended.index(a)
    finally:
        c.close()


def test_concurrent_held_streams_answer_in_release_order(h2c):
    c = H2Client(h2c.port)
    try:
        ids = {k: c.request(f"/hold?key=order-{k}") for k in ("x", "y", "z")}
        for k in ids:
            _wait_held(h2c, f"order-{k}")
        for k in ("z", "x", "y"):
            c.request(f"/release?key=order-{k}")
            assert c.response(ids[k]) == (200, f"released order-{k}".encode())
        assert [s for s in c.ended if s in ids.values()] == [ids["z"], ids["x"], ids["y"]]
    finally:
        c.close()


@pytest.mark.parametrize(
    "app,interface",
    [
        ("srv_wsgi_app:app", "wsgi"),
        ("srv_native_app:app", "native"),
        ("srv_native_app:app_async", "native"),
    ],
    ids=["wsgi", "native", "native-async"],
)
def test_wsgi_and_native_handlers_over_h2c(ringloop_kind: Kind, pool, app, interface):
    """The other interfaces reach the connection through the same Sink: they run over
    HTTP/2 too (a body in, larger than a window; a body out, larger than the client's)."""
    server = pool.get(ringloop_kind, app, interface)
    body = bytes(range(256)) * 1200  # 300 KiB: past the 256 KiB stream window
    with httpx.Client(http1=False, http2=True) as c:
        r = c.post(server.url("/echo"), content=body)
        assert (r.http_version, r.status_code) == ("HTTP/2", 200)
        assert r.content == body
        r = c.get(server.url("/big?size=300000"))
        assert (r.status_code, len(r.content)) == (200, 300000)


# -- resets and errors --------------------------------------------------------------------------------


def test_client_reset_is_http_disconnect_for_that_stream_only(h2c):
    c = H2Client(h2c.port)
    try:
        victim = c.request("/disconnect?key=rst-1")
        _wait_held(h2c, "rst-1")
        c.reset(victim)

        def recorded() -> bool:
            r = httpx.get(h2c.url("/results?key=rst-1"))
            return r.status_code == 200 and r.json() == "http.disconnect"

        wait_until(recorded, 15, "the application to hear http.disconnect")
        # The connection and its other streams go on.
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()


def test_connection_loss_is_http_disconnect_for_every_stream(h2c):
    c = H2Client(h2c.port)
    for key in ("lost-1", "lost-2"):
        c.request(f"/disconnect?key={key}")
    for key in ("lost-1", "lost-2"):
        _wait_held(h2c, key)
    c.close()

    def recorded(key: str):
        def check() -> bool:
            r = httpx.get(h2c.url(f"/results?key={key}"))
            return r.status_code == 200 and r.json() == "http.disconnect"

        return check

    for key in ("lost-1", "lost-2"):
        wait_until(recorded(key), 15, f"{key} to hear http.disconnect")


def test_application_error_is_a_500_on_its_stream(h2c):
    c = H2Client(h2c.port)
    try:
        assert c.get("/fail")[0] == 500
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()


def test_malformed_request_resets_its_stream_only(ringloop_kind: Kind, pool):
    """A request the rules refuse (a `host` that names another authority than `:authority`,
    RFC 9113 §8.3.1) is reset with PROTOCOL_ERROR,
    never reaches the application, the rule is logged at debug level, and the connection
    goes on."""
    server = pool.get(ringloop_kind, APP, "asgi", log_level="debug")
    mark = server.log_mark()
    c = H2Client(server.port)
    try:
        c.conn.config.validate_outbound_headers = False
        c.conn.config.normalize_outbound_headers = False
        bad = c.request("/", authority="a.test", headers=[("host", "b.test")])
        c.until(lambda: bad in c.resets, "the reset")
        assert c.resets[bad] == 1  # PROTOCOL_ERROR
        # Logged before the reset was written.
        assert f"HTTP/2: stream {bad} reset: host-authority-mismatch" in server.log_since(mark)
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()


def test_idle_connection_gets_goaway_after_keep_alive(ringloop_kind: Kind, pool):
    """No stream open for `--timeout-keep-alive`: GOAWAY (NO_ERROR), then the close."""
    server = pool.get(ringloop_kind, APP, "asgi", timeout_keep_alive=1)
    c = H2Client(server.port)
    try:
        assert c.get("/") == (200, b"hello over 2")
        c.until(lambda: c.goaways, "GOAWAY")
        assert c.goaways[0][1] == 0
        c.until(lambda: c.closed, "the close")
    finally:
        c.close()


def test_concurrency_limit_answers_503_on_the_stream(ringloop_kind: Kind, pool):
    """`--limit-concurrency 2`: two streams in their application, the third is answered 503
    on its stream (streams are checked in the order they came); the connection goes on."""
    server = pool.get(ringloop_kind, APP, "asgi", limit_concurrency=2)
    c = H2Client(server.port)
    try:
        held = c.request("/hold?key=limit")
        trigger = c.request("/release-on-body?key=limit", method="POST", end=False)
        assert c.get("/")[0] == 503
        c.end_stream(trigger)
        assert c.response(held) == (200, b"released limit")
        assert c.response(trigger) == (200, b"ok")
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()


def test_settings_reach_the_client(ringloop_kind: Kind, pool):
    server = pool.get(ringloop_kind, APP, "asgi", http2_max_concurrent_streams=7)
    c = H2Client(server.port)
    try:
        c.get("/")
        assert c.settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 7
    finally:
        c.close()


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--http2-max-frame-size", "1000"),
        ("--http2-initial-stream-window-size", "0"),
        ("--http2-initial-connection-window-size", "3000000000"),
        ("--http", "3"),
        ("--http2-send-timeout", "-1"),
        ("--http2-max-reset-streams", "0"),
        ("--http2-max-empty-frames", "-1"),
        ("--http2-keep-alive-interval", "-1"),
        ("--http2-keep-alive-interval", "86400001"),
        ("--http2-keep-alive-timeout", "0"),
        ("--http2-keep-alive-timeout", "soon"),
    ],
)
def test_bad_http2_flag_is_one_clear_error(flag, value):
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "ringloop", "serve", "srv_h2_app:app", flag, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], r.stderr


# -- shutdown --------------------------------------------------------------------------------------------


def test_graceful_shutdown_finishes_in_flight_streams(ringloop_kind: Kind, start_server):
    """SIGTERM: GOAWAY goes out, the streams in flight are still served (one of them is what
    releases the other, its body ended by the client after the GOAWAY), then the connection
    closes and the server exits cleanly."""
    server = start_server(ringloop_kind, APP, "asgi")
    c = H2Client(server.port)
    try:
        held = c.request("/hold?key=shutdown")
        trigger = c.request("/release-on-body?key=shutdown", method="POST", end=False)
        _wait_held(server, "shutdown")
        server.proc.send_signal(signal.SIGTERM)
        c.until(lambda: c.goaways, "GOAWAY")
        assert c.goaways[0] == (2**31 - 1, 0)  # NO_ERROR, no stream refused yet
        c.end_stream(trigger)
        assert c.response(held) == (200, b"released shutdown")
        assert c.response(trigger) == (200, b"ok")
        c.until(lambda: c.closed, "the server to close the connection")
    finally:
        c.close()
    assert server.proc.wait(30) == 0


def test_graceful_shutdown_deadline_ends_a_stuck_stream(ringloop_kind: Kind, start_server):
    """A stream whose application never answers does not keep the worker: past
    `--timeout-graceful-shutdown` the connection is closed and the server exits."""
    server = start_server(ringloop_kind, APP, "asgi", timeout_graceful_shutdown=1)
    c = H2Client(server.port)
    try:
        stuck = c.request("/hold?key=stuck-forever")
        _wait_held(server, "stuck-forever")
        server.proc.send_signal(signal.SIGTERM)
        c.until(lambda: c.goaways, "GOAWAY")
        c.until(lambda: c.closed, "the close at the deadline")
        assert stuck not in c.ended
    finally:
        c.close()
    assert server.proc.wait(30) == 0


def test_new_stream_after_goaway_is_refused(ringloop_kind: Kind, start_server):
    """After the shutdown's final GOAWAY names the last stream it took, a stream the client
    opens anyway is not served (RFC 9113 §6.8); the one in flight still is."""
    server = start_server(ringloop_kind, APP, "asgi")
    c = H2Client(server.port)
    try:
        held = c.request("/hold?key=goaway-late")
        trigger = c.request("/release-on-body?key=goaway-late", method="POST", end=False)
        _wait_held(server, "goaway-late")
        server.proc.send_signal(signal.SIGTERM)
        c.until(lambda: len(c.goaways) >= 2, "the final GOAWAY")
        assert c.goaways[-1] == (trigger, 0)
        late = c.request("/")
        c.end_stream(trigger)
        assert c.response(held) == (200, b"released goaway-late")
        assert c.response(trigger) == (200, b"ok")
        assert late not in c.ended
    finally:
        c.close()
    assert server.proc.wait(30) == 0
