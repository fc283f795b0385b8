"""The ASGI application of the WebSocket-over-HTTP/2 suite (`test_server_http2_websocket.py`;
not a test module), plain ASGI 3 so that ringloop and hypercorn serve the same thing:

* `/echo` (WebSocket): accepts with the first offered subprotocol, echoes text and bytes; the
  text `close:<code>:<reason>` makes it close with them; its `websocket.disconnect` is
  recorded under `?key=K`;
* `/scope` (WebSocket): accepts and sends its scope as JSON, then echoes;
* `/big?n=N` (WebSocket): accepts, sends one binary message of N bytes, then echoes;
* `/deny` (WebSocket): `websocket.close` before the accept (an HTTP 403 on the stream);
* `/http-deny` (WebSocket): denies with its own response (`websocket.http.response`);
* `/lazy?key=K` (WebSocket): accepts, then reads nothing until `/release?key=K`, then echoes;
* `/results?key=K` (HTTP): what was recorded under K, 404 until then; `/release?key=K` lets
  `/lazy` go on; any other HTTP path answers `plain http`.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

RESULTS: dict[str, object] = {}
EVENTS: dict[str, asyncio.Event] = {}


def _q(scope, name: str, default=None):
    values = parse_qs(scope["query_string"].decode("latin-1")).get(name)
    return values[0] if values else default


def _jsonable(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


async def _echo(scope, receive, send) -> None:
    key = _q(scope, "key")
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            if key:
                RESULTS[key] = msg
            return
        text = msg.get("text")
        if text is not None and text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            if key:
                RESULTS[key] = await receive()
            return
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": msg["bytes"]})


async def _websocket(scope, receive, send) -> None:
    assert (await receive())["type"] == "websocket.connect"
    path = scope["path"]
    if path == "/deny":
        await send({"type": "websocket.close"})
        return
    if path == "/http-deny":
        headers = [(b"content-type", b"text/plain"), (b"x-deny", b"1")]
        await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": b"not ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"you"})
        return
    offered = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": offered[0] if offered else None})
    if path == "/scope":
        await send({"type": "websocket.send", "text": json.dumps(_jsonable(scope))})
    elif path == "/lazy":
        await EVENTS.setdefault(_q(scope, "key"), asyncio.Event()).wait()
    elif path == "/big":
        await send(
            {"type": "websocket.send", "bytes": bytes(range(256)) * (int(_q(scope, "n")) // 256)}
        )
    await _echo(scope, receive, send)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "websocket":
        await _websocket(scope, receive, send)
        return
    status, body = 200, b"plain http"
    if scope["path"] == "/release":
        EVENTS.setdefault(_q(scope, "key"), asyncio.Event()).set()
    elif scope["path"] == "/results":
        key = _q(scope, "key")
        status, body = (200, json.dumps(RESULTS[key]).encode()) if key in RESULTS else (404, b"")
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
