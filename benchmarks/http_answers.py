"""The HTTP suite's answer check: what each response's body must be, HTTP/1.1 responses read
off one socket, and ``probe``, which checks a subject's answers on one keep-alive connection
(and warms it up) before wrk counts anything.

Catching a wrong answer here means wrk never counts the bytes of a server that answers
garbage: wrk itself looks at nothing but the status line. ``http_suite.py`` calls ``probe``
before every load.
"""

from __future__ import annotations

import json
import socket
from typing import Protocol

from http_peers import PATHS

# The upload scenario's body; the app answers with the number of bytes it read.
UPLOAD_BYTES = 1 << 20


class Request(Protocol):
    """What the check needs of a scenario (``http_suite.Scenario``)."""

    @property
    def label(self) -> str: ...

    @property
    def response(self) -> str: ...  # the app's answer (``http_apps`` names)

    @property
    def depth(self) -> int: ...  # requests per write


BIG = b"x" * 65536


def _expected(sc: Request, body: bytes) -> str | None:
    """What is wrong with ``body`` as the answer to ``sc``'s request, or None."""
    if sc.response == "hello" and body != b"Hello, world!":
        return f"body {body[:40]!r}, not b'Hello, world!'"
    if sc.response == "big" and body != BIG:
        return f"a body of {len(body)} bytes, not 64 KiB of x"
    if sc.response == "upload" and body != str(UPLOAD_BYTES).encode():
        return f"body {body[:40]!r}: the app did not see the {UPLOAD_BYTES}-byte upload"
    if sc.response == "json":
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if doc != {"message": "Hello, world!"}:
            return f"body {body[:60]!r} is not the JSON message"
    return None


class _Responses:
    """HTTP/1.1 responses read off one socket: status, headers, body by length or chunks."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def next(self) -> tuple[int, dict[bytes, bytes], bytes]:
        status = self._line().split(b" ", 2)
        headers = {}
        while line := self._line():
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            return int(status[1]), headers, self._take(int(headers[b"content-length"]))
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = b""
            while size := int(self._line().split(b";")[0], 16):
                body += self._take(size)
                self._take(2)
            while self._line():  # trailers
                pass
            return int(status[1]), headers, body
        raise ValueError(f"response {status[1]!r} with neither Content-Length nor chunked body")


def probe(port: int, sc: Request, reference: bool) -> str | None:
    """Check the subject's answers on one keep-alive connection and warm it up.

    ``sc.depth`` requests per write (the pipelined scenario checks pipelining); every
    response must be a 200 and, except from the canned references, the app's exact body.
    Returns what went wrong, or None. Catching a wrong answer here means wrk never counts
    the bytes of a server that answers garbage.
    """
    path = PATHS[sc.response]
    if sc.response == "upload":
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
        ).encode() + b"x" * UPLOAD_BYTES
    else:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    rounds = {"hello": 100, "json": 200, "big": 40, "upload": 5}[sc.response]
    if sc.depth > 1:
        rounds //= 4
    answered = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            responses = _Responses(sock)
            for _ in range(rounds):
                sock.sendall(request * sc.depth)
                for _ in range(sc.depth):
                    status, _headers, body = responses.next()
                    if status != 200:
                        return f"status {status} to {sc.label}: {body[:60]!r}"
                    if not reference and (wrong := _expected(sc, body)):
                        return f"wrong answer to {sc.label}: {wrong}"
                    answered += 1
    except (OSError, ValueError) as exc:
        # Which request failed tells a keep-alive or pipelining bug from a dead server.
        return (
            f"warm-up probe, request {answered + 1} on one keep-alive connection"
            f"{f' ({sc.depth} per write)' if sc.depth > 1 else ''}: {type(exc).__name__}: {exc}"
        )
    return None
