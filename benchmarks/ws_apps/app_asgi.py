"""The WebSocket suite's ASGI app, served by uvicorn, granian and ``ringloop serve``.

``/echo`` sends every message back as it came; ``/sub`` is a subscriber: its ``send`` joins
a module-level set until it disconnects; ``/pub`` is the publisher: each of its messages is
sent to every subscriber, one ``await send`` after another (the plain ASGI way: the server
decides how a send that cannot be written at once waits). Any other request over HTTP gets a
200, so the runner sees the server is up.
"""

from __future__ import annotations

from typing import Any

SUBSCRIBERS: set[Any] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ws suite"})
        return
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    path = scope["path"]
    if path == "/echo":
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({**message, "type": "websocket.send"})
    elif path == "/sub":
        SUBSCRIBERS.add(send)
        try:
            while (await receive())["type"] != "websocket.disconnect":
                pass
        finally:
            SUBSCRIBERS.discard(send)
    elif path == "/pub":
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            out = {**message, "type": "websocket.send"}
            for subscriber in list(SUBSCRIBERS):
                await subscriber(out)
    else:
        await send({"type": "websocket.close", "code": 1008})
