"""The WSGI (PEP 3333) application the suite runs on ringloop's WSGI interface and on gunicorn
(a module of apps, not a test module): `srv_wsgi_app:app`, one route per behaviour.

`CLOSED` remembers which responses had their iterable's `close()` called (PEP 3333: the
server must call it however the response ends); `GET /closed?key=K` answers it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from urllib.parse import parse_qs

CLOSED: dict[str, str] = {}
BARRIERS: dict[str, threading.Barrier] = {}
_lock = threading.Lock()


def _q(environ, name, default=None):
    values = parse_qs(environ.get("QUERY_STRING", "")).get(name)
    return values[0] if values else default


def _text(start_response, body: bytes, status="200 OK", ctype="text/plain"):
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
    return [body]


def _json(start_response, value):
    return _text(start_response, json.dumps(value).encode(), ctype="application/json")


class Closing:
    """An iterable that records its close() (and how far it was iterated)."""

    def __init__(self, key, chunks, fail_at=None):
        self.key = key
        self.chunks = chunks
        self.fail_at = fail_at
        self.sent = 0

    def __iter__(self):
        for i, chunk in enumerate(self.chunks):
            if i == self.fail_at:
                raise RuntimeError("iterable failed")
            self.sent += 1
            yield chunk

    def close(self):
        with _lock:
            CLOSED[self.key] = f"closed after {self.sent}"


def app(environ, start_response):  # noqa: C901 - one route per behaviour, on purpose
    path = environ["PATH_INFO"]
    inp = environ["wsgi.input"]

    if path == "/environ":
        body = inp.read()
        view = {
            k: (v if isinstance(v, (str, int, bool, tuple)) else repr(type(v)))
            for k, v in environ.items()
        }
        view["body"] = body.decode("latin-1")
        view["wsgi.version"] = list(environ["wsgi.version"])
        view["errors_writable"] = hasattr(environ["wsgi.errors"], "write")
        return _json(start_response, view)

    if path == "/count":
        # Counts the body in 64 KiB reads (1 GiB uploads): nothing is kept.
        import zlib

        total, crc = 0, 0
        while piece := inp.read(65536):
            total += len(piece)
            crc = zlib.crc32(piece, crc)
        return _json(start_response, {"len": total, "crc": crc})

    if path == "/echo":
        return _text(start_response, inp.read())

    if path == "/read-n":
        n = int(_q(environ, "n"))
        pieces = []
        while True:
            piece = inp.read(n)
            if not piece:
                break
            assert len(piece) <= n
            pieces.append(piece)
        sizes = [len(p) for p in pieces]
        return _json(start_response, {"sizes": sizes, "body": b"".join(pieces).decode()})

    if path == "/read-length":
        # What most frameworks do: read exactly CONTENT_LENGTH bytes.
        n = int(environ.get("CONTENT_LENGTH") or 0)
        return _text(start_response, inp.read(n))

    if path == "/readline":
        lines = []
        while True:
            line = inp.readline()
            if not line:
                break
            lines.append(line.decode())
        return _json(start_response, lines)

    if path == "/readline-size":
        lines = []
        while True:
            line = inp.readline(4)
            if not line:
                break
            lines.append(line.decode())
        return _json(start_response, lines)

    if path == "/readlines":
        return _json(start_response, [x.decode() for x in inp.readlines()])

    if path == "/iterate":
        return _json(start_response, [x.decode() for x in inp])

    if path == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written-1 ")
        write(b"written-2 ")
        return [b"returned"]

    if path == "/generator":
        n = int(_q(environ, "n", "5"))
        start_response("200 OK", [("Content-Type", "text/plain")])

        def gen():
            for i in range(n):
                yield f"chunk{i};".encode()

        return gen()

    if path == "/empty-chunks":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"", b"a", b"", b"b", b""]

    if path == "/big":
        size = int(_q(environ, "size"))
        start_response("200 OK", [("Content-Length", str(size))])
        block = b"w" * 65536

        def gen():
            left = size
            while left:
                piece = block[: min(left, len(block))]
                left -= len(piece)
                yield piece

        return gen()

    if path == "/closing":
        key = _q(environ, "key")
        fail = _q(environ, "fail")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Closing(key, [b"one ", b"two ", b"three"], None if fail is None else int(fail))

    if path == "/closed":
        key = _q(environ, "key")
        with _lock:
            state = CLOSED.get(key)
        if state is None:
            return _text(start_response, b"not yet", "404 Not Found")
        return _text(start_response, state.encode())

    if path == "/exc-info":
        # An error after start_response but before any body: start again with exc_info.
        start_response("200 OK", [("X-First", "1")])
        try:
            raise ValueError("changed my mind")
        except ValueError:
            start_response(
                "503 Service Unavailable", [("Content-Type", "text/plain")], sys.exc_info()
            )
        return [b"replaced"]

    if path == "/exc-info-after-body":
        # Too late: the head is sent, so start_response(exc_info) re-raises.
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"head sent ")
        try:
            raise ValueError("too late")
        except ValueError:
            start_response("500 Internal Server Error", [], sys.exc_info())
        return [b"never"]

    if path == "/start-twice":
        start_response("200 OK", [])
        try:
            start_response("404 Not Found", [])
        except Exception as exc:  # noqa: BLE001 - reported in the body
            return [f"refused: {type(exc).__name__}".encode()]
        return [b"accepted"]

    if path == "/raise":
        raise RuntimeError("wsgi boom")

    if path == "/raise-in-iterable":
        key = _q(environ, "key")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Closing(key, [b"one ", b"two ", b"three"], fail_at=1)

    if path == "/no-start":
        return [b"forgot start_response"]

    if path == "/file":
        f = open(_q(environ, "path"), "rb")  # noqa: SIM115 - the server closes it
        size = os.fstat(f.fileno()).st_size
        start_response("200 OK", [("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](f, 32768)

    if path == "/file-no-wrapper":
        # A plain iterable of file blocks (what a framework without file_wrapper does).
        f = open(_q(environ, "path"), "rb")  # noqa: SIM115 - closed by the generator
        start_response("200 OK", [])

        def blocks():
            with f:
                while block := f.read(50000):
                    yield block

        return blocks()

    if path == "/barrier":
        # n requests meet here: only possible if they run at the same time.
        key, n = _q(environ, "key"), int(_q(environ, "n"))
        with _lock:
            barrier = BARRIERS.setdefault(key, threading.Barrier(n))
        try:
            barrier.wait(timeout=10)
        except threading.BrokenBarrierError:
            return _text(start_response, b"timeout")
        return _text(start_response, b"met")

    if path == "/sleep":
        time.sleep(float(_q(environ, "s", "1")))
        return _text(start_response, b"slept")

    if path == "/status":
        code = _q(environ, "code")
        start_response(f"{code} Whatever", [("X-Status", code)])
        return []

    if path == "/pid":
        return _text(start_response, str(os.getpid()).encode())

    return _text(start_response, b"no route " + path.encode("latin-1"), "404 Not Found")
