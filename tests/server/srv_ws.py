"""A raw WebSocket client for the server suite (imported as `srv_ws`; not a test module): the
opening handshake written by hand, frames of any shape (unmasked, fragmented, a lying length)
and a strict frame reader, on `srv_harness.Raw`. Real clients (`websockets`, aiohttp) are used
wherever the test is about what a user sees; this is for what no real client would send.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from dataclasses import dataclass

from srv_harness import Raw, Response, wait_until
from websockets.sync.client import connect

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def upgrade_request(
    path: str, key: bytes, extra: list[tuple[str, str]] = (), version: str = "13"
) -> bytes:
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key.decode()}",
        f"Sec-WebSocket-Version: {version}",
        *(f"{n}: {v}" for n, v in extra),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def accept_of(key: bytes) -> str:
    return base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()


def frame(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    mask: bool = True,
    rsv1: bool = False,
    length: int | None = None,
) -> bytes:
    """One frame; `length` lies about the payload's length (the payload is sent as given)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()


@dataclass
class Frame:
    fin: bool
    opcode: int
    payload: bytes

    @property
    def code(self) -> int | None:
        """A close frame's code (None: it had none)."""
        assert self.opcode == CLOSE, self
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None

    @property
    def reason(self) -> str:
        return self.payload[2:].decode()


class WsRaw:
    """A WebSocket connection driven by hand (see the module docs)."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw

    def handshake(self, path: str, extra: list[tuple[str, str]] = ()) -> Response:
        """Upgrade; the response must be a 101 with the right accept key."""
        key = base64.b64encode(os.urandom(16))
        self.raw.send(upgrade_request(path, key, extra))
        r = self.raw.read_head()
        assert r.status == 101, r
        assert r.header("sec-websocket-accept") == accept_of(key), r.headers
        return r

    def send(self, opcode: int, payload: bytes = b"", **kw) -> None:
        self.raw.send(frame(opcode, payload, **kw))

    def read(self, timeout: float | None = None) -> Frame:
        """The next frame from the server (unmasked, as a server must send them)."""
        head = self._exact(2, timeout)
        assert head[1] & 0x80 == 0, "a server frame is masked"
        n = head[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._exact(2, timeout))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._exact(8, timeout))[0]
        return Frame(bool(head[0] & 0x80), head[0] & 0x0F, self._exact(n, timeout))

    def read_until(self, opcode: int, timeout: float | None = None) -> Frame:
        """Skip frames until one with `opcode`."""
        while True:
            f = self.read(timeout)
            if f.opcode == opcode:
                return f

    def _exact(self, n: int, timeout: float | None) -> bytes:
        while len(self.raw.buf) < n:
            if not self.raw._fill(timeout):
                raise EOFError(f"connection closed {n - len(self.raw.buf)} bytes short")
        out, self.raw.buf = self.raw.buf[:n], self.raw.buf[n:]
        return out


# -- the application's record (`srv_ws_app`'s `/last`) --------------------------------------------


def url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def last(server) -> dict:
    """What the application recorded of the sessions so far (`/last`)."""
    with connect(url(server, "/last")) as ws:
        return json.loads(ws.recv(timeout=10))


def recorded(server, path: str, timeout: float = 10.0) -> dict:
    """The message `path`'s session ended with, once it ended."""
    got: dict = {}

    def ended() -> bool:
        got.clear()
        got.update(last(server).get(path) or {})
        return got.get("type") not in (None, "waiting", "sent")

    wait_until(ended, timeout, f"the {path} session to end")
    return got
