"""Small apps of each interface for `test_memory_soak.py`: a fixed 200 with a length."""

BODY = b"Hello, world!"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"13")]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    # Read the (empty) body as a real app does, so the receive path is soaked too.
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def wsgi(environ, start_response):
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [BODY]


def _native():
    from ringloop.server.native import Response, native_handler

    @native_handler
    def native(request):
        return Response(200, HEADERS, BODY)

    return native


native = _native()
