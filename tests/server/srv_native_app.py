"""Native handlers (`ringloop.server.native`) the suite serves with `--interface native` (a
module of apps, not a test module):

* `app(request)`: synchronous — called on the loop thread with the whole body in
  `request.body`;
* `app_async(request)`: `async def`, reads the body with `await request.read()` or
  `request.stream()`;
* `app_writer(request, writer)`: `async def` that writes as it goes through a `Writer`.
"""

from __future__ import annotations

import asyncio
import json

from ringloop.server.native import FileBody, Response, native_handler

TEXT = [(b"content-type", b"text/plain")]
BLOCK = b"n" * 65536


def _q(request, name, default=None):
    from urllib.parse import parse_qs

    values = parse_qs(request.query_string.decode()).get(name)
    return values[0] if values else default


def _info(request, body: bytes) -> Response:
    view = {
        "method": request.method,
        "path": request.path,
        "raw_path": request.raw_path.decode("latin-1"),
        "query_string": request.query_string.decode("latin-1"),
        "http_version": request.http_version,
        "headers": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in request.headers],
        "x_a": None if request.header(b"x-a") is None else request.header(b"x-a").decode(),
        "x_a_str": None if request.header("X-A") is None else request.header("X-A").decode(),
        "client": list(request.client) if request.client else None,
        "server": list(request.server) if request.server else None,
        "scheme": request.scheme,
        "root_path": request.root_path,
        # (`request.body` of a bodyless request: see test_sync_body_of_a_bodyless_request)
        "body_len": len(body or b""),
    }
    return Response(200, [(b"content-type", b"application/json")], json.dumps(view))


def _big(size: int):
    left = size
    while left:
        piece = BLOCK[: min(left, len(BLOCK))]
        left -= len(piece)
        yield piece


@native_handler
def app(request):
    path = request.path
    if path == "/echo":
        return Response(200, TEXT, request.body)
    if path.startswith("/info"):
        return _info(request, request.body)
    if path == "/body-repr":
        return Response(200, TEXT, repr(request.body))
    if path == "/bytes":
        return b"plain bytes"
    if path == "/str":
        return "unicode \u2713"
    if path == "/iter":
        return Response(200, TEXT, iter([b"a", b"bb", "ccc"]))
    if path == "/big":
        size = int(_q(request, "size"))
        return Response(200, [(b"content-length", str(size).encode())], _big(size))
    if path == "/file":
        return Response(
            200, [(b"content-type", b"application/octet-stream")], FileBody(_q(request, "path"))
        )
    if path == "/status":
        return Response(int(_q(request, "code")), [(b"x-status", b"1")], b"")
    if path == "/raise":
        raise RuntimeError("native boom")
    if path == "/raise-in-iterator":

        def gen():
            yield b"first "
            raise RuntimeError("iterator boom")

        return Response(200, TEXT, gen())
    if path == "/bad-return":
        return 42
    if path == "/bad-header":
        return Response(200, [("x-str", "not bytes")], b"no")
    return Response(404, TEXT, b"no route " + path.encode())


@native_handler
async def app_async(request):
    path = request.path
    if path == "/echo":
        return Response(200, TEXT, await request.read())
    if path == "/info":
        return _info(request, await request.read())
    if path == "/stream-in":
        sizes = []
        async for chunk in request.stream():
            sizes.append(len(chunk))
        return Response(200, TEXT, f"{sum(sizes)} in {len(sizes)}")
    if path == "/sync-body":
        # `request.body` is for synchronous handlers; an async one reads.
        return Response(200, TEXT, repr(request.body))
    if path == "/aiter":

        async def gen():
            for i in range(4):
                await asyncio.sleep(0)
                yield f"part{i};".encode()

        return Response(200, TEXT, gen())
    if path == "/big":
        size = int(_q(request, "size"))
        return Response(200, [(b"content-length", str(size).encode())], _big(size))
    if path == "/sleep":
        await asyncio.sleep(float(_q(request, "s", "0.5")))
        return b"slept"
    if path == "/raise":
        await asyncio.sleep(0)
        raise RuntimeError("async native boom")
    return Response(404, TEXT, b"no route " + path.encode())


@native_handler
async def app_writer(request, writer):
    path = request.path
    if path == "/write":
        writer.start(200, TEXT)
        writer.write(b"one ")
        await writer.drain()
        writer.write(b"two ")
        writer.end(b"end")
        return None
    if path == "/big":
        size = int(_q(request, "size"))
        writer.start(200, [(b"content-length", str(size).encode())])
        paused = 0
        for piece in _big(size):
            if not writer.write(piece):
                paused += 1
                await writer.drain()
        writer.end()
        return None
    if path == "/raise-after-start":
        writer.start(200, TEXT)
        writer.write(b"partial")
        await asyncio.sleep(0)
        raise RuntimeError("writer boom")
    if path == "/no-end":
        writer.start(200, TEXT)
        writer.write(b"never ended")
        return None
    writer.start(404, TEXT)
    writer.end(b"no route")
    return None
