"""The ASGI application of the trailers, early hints and HTTP/2 keep-alive suite
(`test_server_trailers_hints.py`; not a test module).

Plain ASGI 3, no framework. What an application observed that its client cannot see (the
`RuntimeError` a misused message raised, an `http.disconnect`) is kept in `RESULTS` and read
with `/results?key=K` (404 while nothing is recorded); a stream that must stay open holds on
an `asyncio.Event` that `/release?key=K` sets. Tests wait for these, never for time.
"""

from __future__ import annotations

import asyncio
import json

from srv_asgi_bits import answer as _answer
from srv_asgi_bits import lifespan
from srv_asgi_bits import q as _q

RESULTS: dict[str, object] = {}
EVENTS: dict[str, asyncio.Event] = {}
HELD: dict[str, int] = {}

LINKS = [b"</style.css>; rel=preload; as=style", b"</app.js>; rel=preload; as=script"]


def _event(key: str) -> asyncio.Event:
    return EVENTS.setdefault(key, asyncio.Event())


async def _refused(send, key: str, message: dict) -> None:
    """Send `message`, which must be refused: the error's type and text go to RESULTS."""
    try:
        await send(message)
    except Exception as e:  # noqa: BLE001 - what was raised is the result
        RESULTS[key] = f"{type(e).__name__}: {e}"
    else:
        RESULTS[key] = "accepted"


async def _disconnected(receive) -> None:
    """Read the (empty) body, then wait for `http.disconnect`."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def trailers(scope, send) -> None:
    """`n` body bytes in pieces of `piece`, then trailers in two messages; `cl=1`: with the
    application's own Content-Length (no room for trailers on HTTP/1.1)."""
    n, piece = int(_q(scope, "n", "10")), int(_q(scope, "piece", "65536"))
    headers = [(b"content-type", b"text/plain")]
    if _q(scope, "cl"):
        headers.append((b"content-length", str(n).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers, "trailers": True})
    sent = 0
    while sent < n:
        k = min(piece, n - sent)
        await send({"type": "http.response.body", "body": b"t" * k, "more_body": True})
        sent += k
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    await send(
        {
            "type": "http.response.trailers",
            "headers": [(b"x-size", str(n).encode())],
            "more_trailers": True,
        }
    )
    await send({"type": "http.response.trailers", "headers": [(b"x-done", b"yes")]})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    path = scope["path"]
    key = _q(scope, "key", "")
    if path == "/extensions":
        body = json.dumps(sorted(scope.get("extensions", {}))).encode()
        await _answer(send, body, ctype=b"application/json")
    elif path == "/trailers":
        await trailers(scope, send)
    elif path == "/trailers-only":
        # No body message at all: the trailers end the response.
        start = {"type": "http.response.start", "status": 200, "headers": [], "trailers": True}
        await send(start)
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")]})
    elif path == "/trailers-bad":
        # A trailer value that would split the message: refused, then a good end.
        start = {"type": "http.response.start", "status": 200, "headers": [], "trailers": True}
        await send(start)
        await send({"type": "http.response.body", "body": b"ok"})
        bad = {"type": "http.response.trailers", "headers": [(b"x", b"a\r\nb: c")]}
        await _refused(send, key, bad)
        await send({"type": "http.response.trailers", "headers": [(b"x", b"fine")]})
    elif path == "/trailers-unasked":
        # Trailers without `trailers: True`: refused; the response then ends normally.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"body", "more_body": True})
        await _refused(send, key, {"type": "http.response.trailers", "headers": []})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/hints":
        await send({"type": "http.response.early_hint", "links": LINKS})
        await send({"type": "http.response.early_hint", "links": [LINKS[0]]})
        await _answer(send, b"after the hints")
    elif path == "/hint-late":
        # An early hint after the response started: refused.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await _refused(send, key, {"type": "http.response.early_hint", "links": LINKS})
        await send({"type": "http.response.body", "body": b"late"})
    elif path == "/hint-bad":
        bad = {"type": "http.response.early_hint", "links": [b"</a>\r\nx: y"]}
        await _refused(send, key, bad)
        await _answer(send, b"ok")
    elif path == "/hold":
        # Hold the stream until `/release?key=K`, or record the disconnect that ends it.
        HELD[key] = HELD.get(key, 0) + 1
        gone = asyncio.ensure_future(_disconnected(receive))
        release = asyncio.ensure_future(_event(key).wait())
        done, _ = await asyncio.wait({gone, release}, return_when=asyncio.FIRST_COMPLETED)
        if gone in done:
            release.cancel()
            RESULTS[key] = "http.disconnect"
            return
        gone.cancel()
        await _answer(send, f"released {key}".encode())
    elif path == "/held":
        await _answer(send, str(HELD.get(key, 0)).encode())
    elif path == "/release":
        _event(key).set()
        await _answer(send, b"ok")
    elif path == "/results":
        if key in RESULTS:
            await _answer(send, json.dumps(RESULTS[key]).encode(), ctype=b"application/json")
        else:
            await _answer(send, b"not yet", 404)
    else:
        await _answer(send, b"no such route", 404)
