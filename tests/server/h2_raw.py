"""A frame-level HTTP/2 client for the attack suite (`test_server_http2_attacks.py`): it writes
whatever frames it is given (hyperframe's, or bytes built here), including those h2's client
state machine refuses to send, and reads what comes back frame by frame.

Also the socket plumbing of the suites' clients built on python-hyper's h2 (`H2Socket`), which
reads GOAWAYs off the bytes before h2 sees them (`take_goaways`).

Nothing here waits for time: `until(cond)` reads until `cond()` holds or the server closes.
"""

from __future__ import annotations

import socket
import ssl
from typing import NamedTuple

import h2.config
import h2.connection
import h2.events
import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)
from srv_harness import HOST, tls_files

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# RFC 9113 §7 error codes.
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
STREAM_CLOSED = 0x5
REFUSED_STREAM = 0x7
CANCEL = 0x8
ENHANCE_YOUR_CALM = 0xB

__all__ = [
    "CANCEL",
    "ContinuationFrame",
    "DataFrame",
    "ENHANCE_YOUR_CALM",
    "H2Socket",
    "HeadersFrame",
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "PingFrame",
    "REFUSED_STREAM",
    "RawH2",
    "RstStreamFrame",
    "STREAM_CLOSED",
    "SettingsFrame",
    "Taken",
    "goaway_of",
    "split_frames",
    "take_goaways",
]


def split_frames(buf: bytes) -> tuple[list[bytes], bytes]:
    """The whole frames at the head of ``buf`` (each its 9-byte header and its payload), and
    the bytes after them (a frame not all read yet)."""
    frames = []
    # An offset rather than slicing `buf` down frame by frame: a read of a MiB holds tens of
    # thousands of small frames in a flood, and each slice would copy the rest again.
    pos = 0
    while len(buf) - pos >= 9:
        end = pos + 9 + int.from_bytes(buf[pos : pos + 3], "big")
        if len(buf) < end:
            break
        frames.append(buf[pos:end])
        pos = end
    return frames, buf[pos:]


def goaway_of(frame: bytes) -> tuple[int, int] | None:
    """(last stream id, error code) if ``frame`` is a GOAWAY, else None."""
    if frame[3] != 0x7:
        return None
    return int.from_bytes(frame[9:13], "big") & 0x7FFFFFFF, int.from_bytes(frame[13:17], "big")


class Taken(NamedTuple):
    """What `take_goaways` makes of the bytes read."""

    frames: bytes  # the whole frames but the GOAWAYs, in order, for h2's `receive_data`
    goaways: list[tuple[int, int]]  # each GOAWAY's (last stream id, error code)
    pings: int  # how many of `frames` are the server's PINGs (not ACKs of ours)
    rest: bytes  # a frame not all read yet: to put before the next read's bytes


def take_goaways(buf: bytes) -> Taken:
    """The whole frames of ``buf`` sorted for a client that hands them to h2's state machine.

    The GOAWAYs are taken out: h2's client closes at the first, where a graceful shutdown
    sends two and then finishes the streams in flight (RFC 9113 §6.8), and a test wants each
    one's codes. The server's PINGs stay for h2 to answer, and are counted."""
    whole, rest = split_frames(buf)
    goaways = []
    kept = []
    pings = 0
    for frame in whole:
        if (g := goaway_of(frame)) is not None:
            goaways.append(g)
            continue
        if frame[3] == 0x6 and not frame[4] & 0x1:  # PING without ACK
            pings += 1
        kept.append(frame)
    return Taken(b"".join(kept), goaways, pings, rest)


class Reader:
    """What `RawH2` and `H2Socket` share: waiting on the connection `sock`, whose `read` takes
    in what one recv brings (setting `closed` once the server has closed)."""

    sock: socket.socket
    closed: bool

    def read(self) -> None:
        raise NotImplementedError

    def until(self, cond, what: str = "the condition") -> None:
        while not cond():
            if self.closed:
                raise AssertionError(f"connection closed before {what}")
            self.read()

    def until_closed(self) -> None:
        """Read until the server closes the connection."""
        while not self.closed:
            self.read()

    def close(self) -> None:
        self.sock.close()


class H2Socket(Reader):
    """h2's client connection over a socket (TLS with ALPN h2 if `tls`; `config`: more of
    `H2Configuration`), what the suites' h2 clients share: `read` hands one read's frames to
    h2, each event it reports to `on_event`, then writes what h2 has to send; `goaways` and
    `pings` are kept from the bytes (`take_goaways`); `until(cond)` reads until `cond()`.
    Nothing is written before the subclass's first `flush`."""

    def __init__(
        self,
        port: int,
        *,
        tls: bool = False,
        timeout: float = 15.0,
        nodelay: bool = False,
        **config,
    ) -> None:
        sock = socket.create_connection((HOST, port), timeout=timeout)
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            ctx = ssl.create_default_context(cafile=tls_files()["ca"])
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname=HOST)
            assert sock.selected_alpn_protocol() == "h2"
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, **config)
        )
        self.conn.initiate_connection()
        self.goaways: list[tuple[int, int]] = []  # (last stream id, error code)
        self.pings = 0
        self.closed = False
        self._buf = b""

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def recv(self) -> bytes:
        return self.sock.recv(1 << 20)

    def read(self) -> None:
        chunk = self.recv()
        if not chunk:
            self.closed = True
            return
        got = take_goaways(self._buf + chunk)
        self._buf = got.rest
        self.goaways += got.goaways
        self.pings += got.pings
        for ev in self.conn.receive_data(got.frames):
            self.on_event(ev)
        self.flush()

    def on_event(self, ev: h2.events.Event) -> None:
        raise NotImplementedError


class RawH2(Reader):
    """One connection: the preface and a SETTINGS frame (`settings`: code → value) go out at
    once; `send` writes bytes or frames; `until` reads frames (answering the server's SETTINGS,
    PINGs only if `answer_pings`) into `frames`, per-stream `status`, `data`, `resets`, and
    `goaway` (last stream id, error code)."""

    def __init__(
        self,
        port: int,
        settings: dict[int, int] | None = None,
        *,
        rcvbuf: int | None = None,
        timeout: float = 30.0,
    ) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Before connect, so that the window the kernel offers is small from the start.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect((HOST, port))
        self.sock = sock
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.dec.max_header_list_size = 1 << 30
        self.frames: list[Frame] = []
        self.status: dict[int, int] = {}
        self.data: dict[int, bytearray] = {}
        self.ended: set[int] = set()
        self.resets: dict[int, int] = {}
        self.goaway: tuple[int, int] | None = None
        self.server_settings: dict[int, int] = {}
        self.closed = False
        self.received = 0
        self._buf = b""
        self._block: dict[int, bytes] = {}
        self.send(PREFACE + SettingsFrame(0, settings or {}).serialize())

    # -- out

    def send(self, data: bytes | Frame) -> bool:
        """Write it all; False if the server closed the connection meanwhile (what it wrote
        before is still to read)."""
        if isinstance(data, Frame):
            data = data.serialize()
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def block(self, path: str = "/", method: str = "GET", extra=()) -> bytes:
        """An HPACK block for a request (our encoder's dynamic table goes on across calls)."""
        h = [(":method", method), (":path", path), (":scheme", "http"), (":authority", HOST)]
        return self.enc.encode(h + list(extra))

    def request(
        self, sid: int, path: str = "/", *, method: str = "GET", end: bool = True, extra=()
    ):
        """HEADERS (and CONTINUATION frames past 16 KiB, the least SETTINGS_MAX_FRAME_SIZE)."""
        block = self.block(path, method, extra)
        pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)] or [b""]
        frames = [HeadersFrame(sid, pieces[0])] + [ContinuationFrame(sid, p) for p in pieces[1:]]
        frames[-1].flags.add("END_HEADERS")
        if end:
            frames[0].flags.add("END_STREAM")
        self.send(b"".join(f.serialize() for f in frames))
        return sid

    # -- in

    def read(self) -> None:
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self.received += len(chunk)
        self._buf += chunk
        view = memoryview(self._buf)
        pos = 0
        while len(view) - pos >= 9:
            frame, length = Frame.parse_frame_header(view[pos : pos + 9])
            if len(view) - pos < 9 + length:
                break
            frame.parse_body(view[pos + 9 : pos + 9 + length])
            pos += 9 + length
            self._on(frame)
        self._buf = bytes(view[pos:])

    def _on(self, f: Frame) -> None:
        self.frames.append(f)
        if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
            self.server_settings.update(f.settings)
            self.send(SettingsFrame(0, flags=["ACK"]))
        elif isinstance(f, GoAwayFrame):
            if self.goaway is None:
                self.goaway = (f.last_stream_id, f.error_code)
        elif isinstance(f, RstStreamFrame):
            self.resets[f.stream_id] = f.error_code
        elif isinstance(f, (HeadersFrame, ContinuationFrame)):
            block = self._block.pop(f.stream_id, b"") + f.data
            if "END_HEADERS" not in f.flags:
                self._block[f.stream_id] = block
            else:
                fields = dict(self.dec.decode(block, raw=True))
                if b":status" in fields:
                    self.status.setdefault(f.stream_id, int(fields[b":status"]))
            if "END_STREAM" in f.flags:
                self.ended.add(f.stream_id)
        elif isinstance(f, DataFrame):
            self.data.setdefault(f.stream_id, bytearray()).extend(f.data)
            if "END_STREAM" in f.flags:
                self.ended.add(f.stream_id)
