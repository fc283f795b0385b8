"""The ASGI app that test_uvicorn.py serves with uvicorn in a subprocess (not a test module).

It is written against raw ASGI on purpose: a framework would read a request body in one go,
and the path under test is uvicorn's flow control. uvicorn buffers the body and pauses reading
once its buffer passes 64 KiB (``HIGH_WATER_LIMIT``); each ``receive()`` of the app hands the
buffer over and resumes reading. So the upload route pulls the body through ``receive()`` and
sleeps now and then, which lets the buffer fill and the transport be paused and resumed many
times per request -- the path on which ringloop once reordered received bytes.

Routes:

* ``GET /info`` -- which loop (class, ringloop backend) runs this server, so the test can
  prove that ``--loop ringloop:new_event_loop`` and ``RINGLOOP_BACKEND`` took effect;
* ``POST /upload`` -- SHA-256 and length of the body as received, the number of
  ``receive()`` calls, the largest body chunk one of them returned (past 64 KiB means the
  buffer filled, so reading was paused) and the framing the client used (``chunked`` or
  ``content-length``);
* ``GET /download?size=N`` -- N random bytes sent in chunks of uneven sizes, with their SHA-256
  in the ``x-sha256`` header.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from urllib.parse import parse_qs

# Chunk sizes the download cycles through: tiny, odd, page-sized and larger than uvicorn's
# and the transports' buffers, so writes land on every side of the write-buffer water marks.
_DOWNLOAD_CHUNKS = (1, 7, 4096, 65536, 1000, 300_000, 65537, 1_048_576, 13)

# Every _SLEEP_EVERY-th receive() the upload route sleeps, so the server's buffer overflows
# the 64 KiB mark while the app is away and uvicorn pauses reading.
_SLEEP_EVERY = 5
_SLEEP = 0.002

_payloads: dict[int, tuple[bytes, str]] = {}


def _payload(size: int) -> tuple[bytes, str]:
    if size not in _payloads:
        data = os.urandom(size)
        _payloads[size] = (data, hashlib.sha256(data).hexdigest())
    return _payloads[size]


async def _json(send, status: int, obj: dict) -> None:
    body = json.dumps(obj).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _upload(scope, receive, send) -> None:
    headers = dict(scope["headers"])
    framing = (
        "chunked" if b"chunked" in headers.get(b"transfer-encoding", b"") else "content-length"
    )
    digest = hashlib.sha256()
    size = receives = largest = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        receives += 1
        body = message.get("body", b"")
        digest.update(body)
        size += len(body)
        largest = max(largest, len(body))
        if not message.get("more_body", False):
            break
        if receives % _SLEEP_EVERY == 0:
            await asyncio.sleep(_SLEEP)
    await _json(
        send,
        200,
        {
            "sha256": digest.hexdigest(),
            "size": size,
            "receives": receives,
            "largest": largest,
            "framing": framing,
        },
    )


async def _download(query: dict, send) -> None:
    size = int(query["size"][0])
    data, sha = _payload(size)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", b"%d" % size),
                (b"x-sha256", sha.encode()),
            ],
        }
    )
    view = memoryview(data)
    pos = i = 0
    while pos < size:
        n = _DOWNLOAD_CHUNKS[i % len(_DOWNLOAD_CHUNKS)]
        i += 1
        await send(
            {"type": "http.response.body", "body": bytes(view[pos : pos + n]), "more_body": True}
        )
        pos += n
    await send({"type": "http.response.body", "body": b""})


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    assert scope["type"] == "http", scope["type"]
    path, method = scope["path"], scope["method"]
    if path == "/info" and method == "GET":
        loop = asyncio.get_running_loop()
        cls = type(loop)
        await _json(
            send,
            200,
            {
                "loop": f"{cls.__module__}.{cls.__qualname__}",
                "backend": getattr(loop, "backend", None),
            },
        )
    elif path == "/upload" and method == "POST":
        await _upload(scope, receive, send)
    elif path == "/download" and method == "GET":
        await _download(parse_qs(scope["query_string"].decode()), send)
    else:
        await _json(send, 404, {"error": f"no route {method} {path}"})
