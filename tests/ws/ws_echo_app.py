"""The ASGI WebSocket echo app the Autobahn fuzzing client talks to (not a test module).

Every text message comes back as text and every binary message as binary, unchanged; the
server under test does the framing, fragmentation, UTF-8 validation, close handshake and
permessage-deflate. A plain HTTP request gets a 200, so a runner can tell the server is up
before the fuzzing client connects.
"""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"websocket echo\n"})
        return
    if scope["type"] != "websocket":
        raise ValueError(f"unknown ASGI scope type {scope['type']!r}")
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})
