"""The plain ASGI WebSocket application of the server suite (no framework), one behaviour per
path, served the same way by ringloop and by uvicorn (`srv_harness.Kind`):

* `/echo`: accepts (with the first offered subprotocol, and an `x-accept` header), echoes text
  and bytes; the text `close:<code>:<reason>` makes it close with that code and reason,
  `raise` makes it raise, `return` makes it return without closing; the client's
  `websocket.disconnect` is recorded;
* `/scope`: accepts and sends its scope as JSON;
* `/deny`: `websocket.close` before accepting (an HTTP 403);
* `/http-deny`: denies with its own HTTP response (the `websocket.http.response` extension);
* `/raise-before`: raises before accepting (an HTTP 500); `/send-before`: `websocket.send`
  before accepting (a misuse: a 500 too);
* `/wait`: takes `websocket.connect`, then waits on `receive()` without accepting: a client
  that leaves meanwhile must come as `websocket.disconnect`;
* `/flood`: accepts and sends 64 KiB messages forever (a client that never reads);
* `/idle`: accepts and only receives (for pings and shutdowns);
* `/last`: accepts and sends what the previous sessions recorded (JSON), then closes.
"""

from __future__ import annotations

import asyncio
import json

# What the sessions saw, by path: the last message their receive() returned when they ended.
RECORD: dict[str, object] = {}


def _jsonable(value):
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


async def _echo(scope, receive, send):
    assert (await receive())["type"] == "websocket.connect"
    offered = scope.get("subprotocols") or []
    await send(
        {
            "type": "websocket.accept",
            "subprotocol": offered[0] if offered else None,
            "headers": [(b"x-accept", b"yes")],
        }
    )
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            RECORD["/echo"] = msg
            return
        text = msg.get("text")
        if text is not None and text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            RECORD["/echo"] = await receive()
            return
        if text == "raise":
            raise RuntimeError("the application failed on purpose")
        if text == "return":
            return
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": msg["bytes"]})


async def _wait(scope, receive, send):
    assert (await receive())["type"] == "websocket.connect"
    RECORD["/wait"] = {"type": "waiting"}
    try:
        RECORD["/wait"] = await receive()
    except BaseException as exc:  # what a server must not do: raise instead of disconnect
        RECORD["/wait"] = {"type": "raised", "exc": repr(exc)}
        raise


async def _flood(scope, receive, send):
    await receive()
    await send({"type": "websocket.accept"})
    chunk = b"x" * 65536
    sent = 0
    try:
        while True:
            await send({"type": "websocket.send", "bytes": chunk})
            sent += 1
            RECORD["/flood"] = {"type": "sent", "n": sent}
    except OSError:
        RECORD["/flood"] = {"type": "stopped", "n": sent}


async def _idle(scope, receive, send):
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            RECORD["/idle"] = msg
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "websocket":
        body = b"plain http"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    path = scope["path"]
    if path == "/echo":
        await _echo(scope, receive, send)
    elif path == "/scope":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(_jsonable(scope))})
        await send({"type": "websocket.close"})
    elif path == "/deny":
        await receive()
        await send({"type": "websocket.close"})
    elif path == "/http-deny":
        await receive()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"text/plain"), (b"x-deny", b"1")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": b"not you"})
    elif path == "/raise-before":
        await receive()
        raise RuntimeError("no handshake on purpose")
    elif path == "/send-before":
        await receive()
        await send({"type": "websocket.send", "text": "too early"})
    elif path == "/wait":
        await _wait(scope, receive, send)
    elif path == "/flood":
        await _flood(scope, receive, send)
    elif path == "/idle":
        await _idle(scope, receive, send)
    elif path == "/last":
        await receive()
        await send({"type": "websocket.accept"})
        await asyncio.sleep(0)
        await send({"type": "websocket.send", "text": json.dumps(_jsonable(RECORD))})
        await send({"type": "websocket.close"})
    else:
        await send({"type": "websocket.close", "code": 4004})
