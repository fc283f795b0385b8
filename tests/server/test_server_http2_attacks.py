"""HTTP/2 attacks and bad input against `ringloop serve` (issue 22): each known attack on an
HTTP/2 server is made here with a frame-level client (`h2_raw.RawH2`: hyperframe frames and
hpack blocks written straight onto the socket, where h2's client would refuse to misbehave),
and each meets a bound:

- the connection ends with GOAWAY (ENHANCE_YOUR_CALM for a flood), or the offending stream
  alone is reset / answered 4xx and the connection goes on, as RFC 9113 says;
- the server's memory stays bounded (its RSS before and after, with a generous margin, far
  below what the attack would make an unbounded server hold);
- the worker keeps serving another, well-behaved connection during and after the attack.

Nothing waits for time: a test waits for a GOAWAY, a RST_STREAM, the server's close, or a
count the application keeps (`/calls`, `/held`).
"""

from __future__ import annotations

import fcntl
import struct
import termios
import threading
import uuid

import hpack
import httpx
import pytest
from h2_raw import (
    CANCEL,
    ENHANCE_YOUR_CALM,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    STREAM_CLOSED,
    ContinuationFrame,
    DataFrame,
    HeadersFrame,
    PingFrame,
    RawH2,
    RstStreamFrame,
    SettingsFrame,
    split_frames,
)
from srv_harness import HOST, Kind, wait_until
from test_server_http2 import H2Client

APP = "srv_h2_attacks_app:app"
pytestmark = pytest.mark.timeout(180)

MiB = 1024 * 1024
# What an attack may add to the server's RSS: far below what each attack would make an
# unbounded server hold (tens of MiB), far above allocator noise.
RSS_MARGIN = 24 * MiB


@pytest.fixture
def server(ringloop_kind: Kind, pool):
    return pool.get(ringloop_kind, APP, "asgi")


def _calls(server, path: str) -> int:
    return httpx.get(server.url(f"/calls?path={path}")).json()


def _serves(server, other: H2Client | None = None) -> None:
    """Another connection, well-behaved, gets its answer: `other`, open since before the
    attack, or else a new one."""
    if other is not None:
        assert other.get("/") == (200, b"hello over 2")
        return
    c = H2Client(server.port)
    try:
        assert c.get("/") == (200, b"hello over 2")
    finally:
        c.close()


def _calmed(c: RawH2, server, *, other: H2Client | None = None, rss: int | None = None) -> None:
    """How a flood ends: GOAWAY ENHANCE_YOUR_CALM on `c` and the server's close, another
    connection served (`_serves`), and, given the RSS from before the attack, the server's
    memory within the margin of it."""
    c.until(lambda: c.goaway is not None, "GOAWAY")
    assert c.goaway[1] == ENHANCE_YOUR_CALM
    c.until_closed()
    _serves(server, other)
    if rss is not None:
        assert server.rss() - rss < RSS_MARGIN


def _wait_json(server, path: str, want) -> None:
    def got():
        r = httpx.get(server.url(path))
        return r.status_code == 200 and r.json() == want

    wait_until(got, 30, f"{path} to say {want!r}")


def _frames(cls, sid: int, payloads, flags=()) -> bytes:
    out = bytearray()
    for p in payloads:
        f = cls(sid, p) if cls is not RstStreamFrame else cls(sid)
        for flag in flags:
            f.flags.add(flag)
        out += f.serialize()
    return bytes(out)


def _outq(sock) -> int:
    """Bytes our socket has not had acknowledged (the server's window is closed if many)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


# -- 1. Rapid Reset (CVE-2023-44487) --------------------------------------------------------------


def test_rapid_reset_gets_enhance_your_calm(server):
    """Thousands of streams opened and reset at once, far beyond max concurrent streams: the
    connection ends with GOAWAY ENHANCE_YOUR_CALM, and only a bounded few of the streams ever
    started the application."""
    path = f"/rapid-{uuid.uuid4().hex}"
    rss = server.rss()
    c = RawH2(server.port)
    try:
        burst = bytearray()
        for i in range(5000):
            sid = 1 + 2 * i
            f = HeadersFrame(sid, c.block(path))
            f.flags.add("END_HEADERS")
            f.flags.add("END_STREAM")
            r = RstStreamFrame(sid)
            r.error_code = CANCEL
            burst += f.serialize() + r.serialize()
        c.send(bytes(burst))
        _calmed(c, server, rss=rss)
    finally:
        c.close()
    # h2's pending-accept bound (20 in one read) and ours across reads (100 net resets).
    assert _calls(server, path) <= 150


def test_rapid_reset_spread_over_reads_meets_max_reset_streams(ringloop_kind: Kind, pool):
    """The slow form: each stream reaches its application before the client resets it, so
    h2's bound on resets waiting in its accept queue never sees them; ours does
    (`--http2-max-reset-streams 5`): the sixth reset ends the connection with GOAWAY
    ENHANCE_YOUR_CALM, and each application heard `http.disconnect`."""
    server = pool.get(ringloop_kind, APP, "asgi", http2_max_reset_streams=5)
    key = uuid.uuid4().hex
    c = RawH2(server.port)
    try:
        for i in range(6):
            k = f"{key}-{i}"
            sid = c.request(1 + 2 * i, f"/disconnect?key={k}")
            _wait_json(server, f"/held?key={k}", 1)
            r = RstStreamFrame(sid)
            r.error_code = CANCEL
            c.send(r)
            _wait_json(server, f"/results?key={k}", "http.disconnect")
        _calmed(c, server)
    finally:
        c.close()


# -- 2. CONTINUATION flood (CVE-2024-27316 family) ------------------------------------------------


@pytest.mark.parametrize("piece", [0, 16_000], ids=["empty", "full"])
def test_continuation_flood_is_cut_short(server, piece):
    """A HEADERS without END_HEADERS, then CONTINUATION frames without end (empty ones, or
    full ones of a literal that grows past every limit): GOAWAY after a few frames, the
    connection closed long before the 48 MiB flood is read."""
    rss = server.rss()
    c = RawH2(server.port)
    other = H2Client(server.port)
    try:
        block = c.block("/")
        if piece:
            # A literal field, not indexed, whose value never ends: 0x00, name, then a
            # 7-bit-prefixed length of 48 MiB.
            block += b"\x00\x05x-big" + b"\x7f" + _varint(48 * MiB - 127)
        c.send(HeadersFrame(1, block))
        flood = _frames(ContinuationFrame, 1, [b"a" * piece] * (3000 if piece else 100_000))
        c.send(flood)
        _calmed(c, server, other=other, rss=rss)
    finally:
        c.close()
        other.close()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    out.append(n)
    return bytes(out)


# -- 3. HPACK bomb and oversized header lists --------------------------------------------------


def test_max_header_list_size_is_32_kib(server):
    c = RawH2(server.port)
    try:
        c.until(lambda: c.server_settings, "the server's SETTINGS")
        assert c.server_settings.get(0x6) == 32 * 1024  # SETTINGS_MAX_HEADER_LIST_SIZE
        # 30 KB of fields fit; 40 KB do not: 431 on that stream, the connection goes on.
        ok = c.request(1, "/", extra=[("x-fill", "a" * 30_000)])
        big = c.request(3, "/", extra=[("x-fill", "a" * 40_000)])
        after = c.request(5, "/")
        c.until(lambda: {ok, big, after} <= c.ended, "3 answers")
        assert c.status[ok] == 200
        assert c.status.get(big) == 431
        assert c.status[after] == 200
        assert c.goaway is None
    finally:
        c.close()


@pytest.mark.parametrize("refs", [10, 2000], ids=["over-the-limit", "bomb"])
def test_hpack_bomb(server, refs):
    """One 4 KB dynamic-table entry referenced many times: 40 KB decoded from a 50-byte block
    (over the 32 KiB limit: 431 on that stream, the connection goes on, its HPACK state in
    step, as h2 decodes on without keeping the fields), or 8 MB from a 2 KB block (past four
    times the limit h2 stops decoding: GOAWAY ENHANCE_YOUR_CALM). Never the application."""
    path = f"/bomb-{uuid.uuid4().hex}"
    rss = server.rss()
    c = RawH2(server.port)
    other = H2Client(server.port)
    try:
        seed = c.request(1, "/", extra=[("x-bomb", "b" * 4000)])  # indexed: entry 62
        c.until(lambda: seed in c.ended, "the first answer")
        # The head's own fields never indexed (an insertion would evict the entry), then
        # 0xbe, the indexed field 62 (the entry), `refs` times.
        head = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", HOST)]
        block = c.enc.encode([hpack.NeverIndexedHeaderTuple(n, v) for n, v in head])
        f = HeadersFrame(3, block + b"\xbe" * refs)
        f.flags.add("END_HEADERS")
        f.flags.add("END_STREAM")
        c.send(f)
        c.until(lambda: 3 in c.ended or 3 in c.resets or c.goaway, "the bomb's answer")
        _serves(server, other)
        if refs * 4000 > 4 * 32 * 1024:
            assert c.goaway == (1, ENHANCE_YOUR_CALM)
            c.until_closed()
        else:
            assert c.status.get(3) == 431, (c.resets, c.goaway)
            after = c.request(5, "/")
            c.until(lambda: after in c.ended, "the next answer")
            assert c.status[after] == 200
    finally:
        c.close()
        other.close()
    assert _calls(server, path) == 0
    assert server.rss() - rss < RSS_MARGIN


# -- 4. SETTINGS and PING floods ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ping", "settings"])
def test_flood_of_frames_that_ask_an_answer_does_not_queue_answers(server, kind):
    """Two million PINGs (or SETTINGS) written without reading the answers: the server stops
    reading once its output waits (its memory holds at most `max_pending_output` of answers,
    not 34 MiB), another connection is served meanwhile, and once we read, every frame is
    answered."""
    n = 2_000_000
    frame = PingFrame(0, b"12345678") if kind == "ping" else SettingsFrame(0, {})
    rss = server.rss()
    c = RawH2(server.port, rcvbuf=64 * 1024)
    c.until(lambda: any(isinstance(f, SettingsFrame) and "ACK" in f.flags for f in c.frames), "ACK")
    flood = frame.serialize() * n
    sender = threading.Thread(target=c.send, args=(flood,), daemon=True)
    sender.start()
    try:
        # The server stopped reading: our bytes wait in our socket (or all went out).
        wait_until(lambda: _outq(c.sock) > 64 * 1024 or not sender.is_alive(), 60, "a stall")
        stalled = server.rss()
        _serves(server)
        assert stalled - rss < RSS_MARGIN
        acks = 0
        kind_byte = 0x6 if kind == "ping" else 0x4
        buf = b""
        while acks < n:
            chunk = c.sock.recv(1 << 20)
            assert chunk, f"closed after {acks} answers"
            frames, buf = split_frames(buf + chunk)
            acks += sum(1 for f in frames if f[3] == kind_byte and f[4] & 0x1)
        sender.join()
    finally:
        c.close()
    assert server.rss() - rss < RSS_MARGIN
    _serves(server)


# -- 5. Empty frames (CVE-2019-9518) ---------------------------------------------------------------------


@pytest.mark.parametrize("what", ["data", "continuation", "headers"])
def test_empty_frame_flood_gets_enhance_your_calm(server, what):
    """Frames that carry nothing and cost a frame's work each: zero-length DATA without
    END_STREAM on an open stream, empty CONTINUATION frames of a header block that never
    ends, or empty header blocks on new streams. GOAWAY ENHANCE_YOUR_CALM after a bounded
    count, long before the flood is read."""
    rss = server.rss()
    c = RawH2(server.port)
    other = H2Client(server.port)
    try:
        if what == "data":
            c.request(1, "/echo", method="POST", end=False)
            flood = _frames(DataFrame, 1, [b""] * 200_000)
        elif what == "continuation":
            c.send(HeadersFrame(1, b""))
            flood = _frames(ContinuationFrame, 1, [b""] * 200_000)
        else:
            flood = b"".join(
                _frames(HeadersFrame, 1 + 2 * i, [b""], ("END_HEADERS", "END_STREAM"))
                for i in range(20_000)
            )
        c.send(flood)
        _calmed(c, server, other=other, rss=rss)
    finally:
        c.close()
        other.close()


# -- 6. Zero-window slow reader (CVE-2019-9517) ----------------------------------------------------


def _zero_window_round(server, path: str, rss: int) -> None:
    c = RawH2(server.port, {0x4: 0})  # SETTINGS_INITIAL_WINDOW_SIZE 0
    try:
        sids = [c.request(1 + 2 * i, path) for i in range(20)]
        # Each response head went out with the first send(): every application waits.
        c.until(lambda: all(s in c.status for s in sids), "20 response heads")
        assert {c.status[s] for s in sids} == {200}
        assert server.rss() - rss < RSS_MARGIN
        _serves(server)
        c.until(lambda: all(s in c.resets for s in sids), "20 resets")
        assert set(c.resets.values()) == {CANCEL}
        assert not c.data  # not a byte went beyond the window
        assert c.goaway is None
    finally:
        c.close()


@pytest.mark.parametrize("path", [f"/big?n={16 * MiB}", "/"], ids=["sending", "complete"])
def test_zero_window_reader_is_bounded_and_reset(ringloop_kind: Kind, pool, path):
    """A client whose window is 0 and never gives credit asks for 20 responses (of 16 MiB, the
    application sending on; or a short one, the application done once its last body waits):
    each stream holds at most what one `send()` gave, and after `--http2-send-timeout` without
    progress each stream is reset; other clients are served meanwhile and after."""
    # `--limit-concurrency 21`: a stream the reset left counted in flight would make the
    # second round's requests 503.
    server = pool.get(ringloop_kind, APP, "asgi", http2_send_timeout=0.5, limit_concurrency=21)
    rss = server.rss()
    for _ in range(2):
        _zero_window_round(server, path, rss)
    _serves(server)


# -- 7. Too many streams --------------------------------------------------------------------------------


def test_streams_past_the_limit_are_refused_the_others_served(ringloop_kind: Kind, pool):
    server = pool.get(ringloop_kind, APP, "asgi", http2_max_concurrent_streams=10)
    key = uuid.uuid4().hex
    c = RawH2(server.port)
    try:
        c.until(lambda: c.server_settings, "the server's SETTINGS")
        assert c.server_settings.get(0x3) == 10
        sids = [c.request(1 + 2 * i, f"/hold?key={key}") for i in range(15)]
        c.until(lambda: len(c.resets) == 5, "5 refusals")
        assert set(c.resets) == set(sids[10:])
        assert set(c.resets.values()) == {REFUSED_STREAM}
        wait_until(lambda: httpx.get(server.url(f"/held?key={key}")).json() == 10, 30, "10 held")
        httpx.get(server.url(f"/release?key={key}"))
        c.until(lambda: set(sids[:10]) <= c.ended, "10 answers")
        assert all(c.status[s] == 200 for s in sids[:10])
        assert c.goaway is None
    finally:
        c.close()


# -- 8. Frames on closed streams ------------------------------------------------------------------------


def test_data_on_a_half_closed_stream_ends_the_connection(server):
    """DATA after the client's END_STREAM (the stream half-closed (remote), its response still
    coming). RFC 9113 §5.1 asks for a stream error STREAM_CLOSED; `guard.rs`, which sees only
    the client's side of a stream, answers as for a closed one: the connection error
    STREAM_CLOSED, which §5.4 allows ("an endpoint MAY choose to treat a stream error as a
    connection error"; h2 alone would say PROTOCOL_ERROR). GOAWAY, the held stream's
    application hears `http.disconnect`, and other connections are served."""
    key = uuid.uuid4().hex
    c = RawH2(server.port)
    try:
        held = c.request(1, f"/disconnect?key={key}")
        wait_until(lambda: httpx.get(server.url(f"/held?key={key}")).json() == 1, 30, "held")
        c.send(_frames(DataFrame, held, [b"late"]))
        c.until(lambda: held in c.resets or c.goaway, "the error")
        if c.goaway is None:  # the RFC's answer, should h2 come to give it
            assert c.resets[held] == STREAM_CLOSED
        else:
            assert c.goaway[1] == STREAM_CLOSED
            c.until_closed()
            assert httpx.get(server.url(f"/results?key={key}")).json() == "http.disconnect"
    finally:
        c.close()
    _serves(server)


@pytest.mark.parametrize("frame", ["data", "headers"])
def test_frames_on_a_closed_stream(server, frame):
    """Frames on a stream the client ended (its END_STREAM came): RFC 9113 §5.1 makes any frame
    after END_STREAM a connection error STREAM_CLOSED, and h2 cannot be told which of its
    streams are closed on the client's side, so `guard.rs` answers before h2 reads: GOAWAY
    STREAM_CLOSED, for DATA and for a HEADERS reusing the id; the worker serves the next
    connection, and one that had nothing to do with it."""
    c = RawH2(server.port)
    try:
        done = c.request(1, "/")
        c.until(lambda: done in c.ended, "the answer")
        assert c.status[done] == 200
        if frame == "data":
            c.send(_frames(DataFrame, done, [b"late"]))
        else:
            c.request(1, "/")
        c.until(lambda: c.goaway is not None, "GOAWAY")
        assert c.goaway == (1, STREAM_CLOSED)
        c.until_closed()
    finally:
        c.close()
    _serves(server)


# -- 9. A malformed request header --------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        [(":method", "GET"), (":path", "/"), (":scheme", "http"), ("connection", "keep-alive")],
        [(":method", "GET"), (":path", "/"), (":scheme", "http"), ("keep-alive", "timeout=5")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "x")],
        [(":method", "GET"), (":path", "/"), (":scheme", "http"), ("te", "gzip")],
        [(":method", "GET"), (":path", "/"), (":path", "/again"), (":scheme", "http")],
    ],
    ids=["connection-specific", "keep-alive", "no-path", "te-gzip", "two-paths"],
)
def test_malformed_request_resets_that_stream_only(server, fields):
    """RFC 9113 §8.2.2, §8.3.1: a malformed request is a stream error PROTOCOL_ERROR (§8.1.1):
    the application never sees it, the connection's other streams go on."""
    path = f"/malformed-{uuid.uuid4().hex}"
    fields = [(n, path if n == ":path" else v) for n, v in fields]
    c = RawH2(server.port)
    try:
        f = HeadersFrame(1, c.enc.encode(fields))
        f.flags.add("END_HEADERS")
        f.flags.add("END_STREAM")
        c.send(f)
        ok = c.request(3, "/")
        c.until(lambda: ok in c.ended or c.goaway, "the next answer")
        assert c.goaway is None, c.goaway
        assert c.resets.get(1) == PROTOCOL_ERROR or c.status.get(1) == 400
        assert c.status[ok] == 200
    finally:
        c.close()
    assert _calls(server, path) == 0


@pytest.mark.parametrize("field", [("X-Upper", "1"), ("x-nul", "a\0b")], ids=["uppercase", "nul"])
def test_field_hpack_refuses_ends_the_connection(server, field):
    """An uppercase field name (RFC 9113 §8.2.1) or a NUL in a value (§8.2.1) makes a request
    malformed, a stream error by §8.1.1; h2 finds both while decoding HPACK (its
    `HeaderName::from_lowercase` and `HeaderValue::from_bytes` fail inside the decoder), and a
    decoding failure is a connection error it gives no way to soften: the decoder's dynamic
    table cannot be trusted past it, and our own rules (`head.rs`) never see the field. §5.4
    allows a connection error where a stream error is asked. Held as it is: GOAWAY
    PROTOCOL_ERROR, the application never called, other connections served."""
    path = f"/hpack-{uuid.uuid4().hex}"
    c = RawH2(server.port)
    try:
        ok = c.request(1, "/")
        c.until(lambda: ok in c.ended, "the first answer")
        f = HeadersFrame(
            3, c.enc.encode([(":method", "GET"), (":path", path), (":scheme", "http"), field])
        )
        f.flags.add("END_HEADERS")
        f.flags.add("END_STREAM")
        c.send(f)
        c.until(lambda: c.goaway is not None, "GOAWAY")
        assert c.goaway == (1, PROTOCOL_ERROR)
        c.until_closed()
    finally:
        c.close()
    assert _calls(server, path) == 0
    _serves(server)
