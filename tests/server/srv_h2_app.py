"""The ASGI application of the HTTP/2 suite (`test_server_http2.py`; not a test module).

Plain ASGI 3 and no framework, so that what is tested is the server. Streams that must wait
for something the test does (`/hold`) wait on an `asyncio.Event` another request sets
(`/release`); what a stream observed that its client cannot see (an `http.disconnect`) is kept
in `RESULTS` and read with `/results?key=K` (404 while nothing is recorded), so the tests wait
for events, never for time.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import srv_hints_app
from srv_asgi_bits import answer as _answer
from srv_asgi_bits import lifespan
from srv_asgi_bits import q as _q

RESULTS: dict[str, object] = {}
EVENTS: dict[str, asyncio.Event] = {}
# Streams that reached the application and hold, by key (`/held?key=K` counts them).
HELD: dict[str, int] = {}


def _event(key: str) -> asyncio.Event:
    return EVENTS.setdefault(key, asyncio.Event())


async def _json(send, value, status: int = 200) -> None:
    await _answer(send, json.dumps(value).encode(), status, b"application/json")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    path = scope["path"]
    if path == "/":
        await _answer(send, b"hello over " + scope["http_version"].encode())
    elif path.startswith("/scope"):
        await _json(
            send,
            {
                "type": scope["type"],
                "http_version": scope["http_version"],
                "method": scope["method"],
                "scheme": scope["scheme"],
                "path": scope["path"],
                "raw_path": scope["raw_path"].decode("latin-1"),
                "query_string": scope["query_string"].decode("latin-1"),
                "root_path": scope["root_path"],
                "headers": [
                    [n.decode("latin-1"), v.decode("latin-1")] for n, v in scope["headers"]
                ],
                "server": list(scope["server"]) if scope["server"] else None,
                "client_is_tuple": isinstance(scope["client"], (list, tuple)),
                "tls": "tls" in scope.get("extensions", {}),
                "extensions": sorted(scope.get("extensions", {})),
            },
        )
    elif path == "/echo":
        # Read the body one message at a time; answer its length, digest and message count.
        digest, size, messages = hashlib.sha256(), 0, 0
        while True:
            m = await receive()
            assert m["type"] == "http.request", m
            messages += 1
            digest.update(m.get("body", b""))
            size += len(m.get("body", b""))
            if not m.get("more_body", False):
                break
        await _json(send, {"size": size, "sha256": digest.hexdigest(), "messages": messages})
    elif path == "/read-after":
        # Read nothing until `/release?key=K`; then the whole body: its size.
        await _event(_q(scope, "key")).wait()
        size = 0
        while True:
            m = await receive()
            size += len(m.get("body", b""))
            if not m.get("more_body", False):
                break
        await _json(send, {"size": size})
    elif path == "/trailers":
        # ASGI's http.response.trailers: a body (n bytes, in 64 KiB pieces), then trailers in
        # two messages (the trailers tests' endpoint).
        await srv_hints_app.trailers(scope, send)
    elif path == "/big":
        # A body larger than the client's window, in pieces: `send` must wait for credit.
        n, piece = int(_q(scope, "n", "1048576")), 64 * 1024
        await send({"type": "http.response.start", "status": 200, "headers": []})
        sent = 0
        while sent < n:
            k = min(piece, n - sent)
            await send({"type": "http.response.body", "body": b"b" * k, "more_body": True})
            sent += k
        await send({"type": "http.response.body", "body": b""})
    elif path == "/hold":
        # Wait until `/release?key=K`, then answer with the key.
        key = _q(scope, "key")
        HELD[key] = HELD.get(key, 0) + 1
        await _event(key).wait()
        await _answer(send, f"released {key}".encode())
    elif path == "/held":
        await _json(send, HELD.get(_q(scope, "key"), 0))
    elif path == "/release-on-body":
        # Release `key` once this request's body is complete (the client decides when).
        while True:
            m = await receive()
            if m["type"] != "http.request" or not m.get("more_body", False):
                break
        _event(_q(scope, "key")).set()
        await _answer(send, b"ok")
    elif path == "/release":
        _event(_q(scope, "key")).set()
        await _answer(send, b"ok")
    elif path == "/disconnect":
        # Wait for what `receive` says once the client resets the stream.
        key = _q(scope, "key")
        HELD[key] = HELD.get(key, 0) + 1
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                RESULTS[key] = "http.disconnect"
                return
    elif path == "/results":
        key = _q(scope, "key")
        if key in RESULTS:
            await _json(send, RESULTS[key])
        else:
            await _answer(send, b"not yet", 404)
    elif path == "/fail":
        raise RuntimeError("the application failed")
    else:
        await _answer(send, b"no such route", 404)
