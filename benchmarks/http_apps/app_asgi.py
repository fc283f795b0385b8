"""Raw ASGI 3 applications (no framework): what ringloop, granian, uvicorn, socketify and
cymongoose run in the ASGI rows. Lifespan is answered (startup and shutdown complete) so
every server can run them with its default lifespan setting."""

HELLO = b"Hello, world!"
BIG = b"x" * 65536
TEXT_HEADERS = [(b"content-type", b"text/plain"), (b"content-length", str(len(HELLO)).encode())]
BIG_HEADERS = [
    (b"content-type", b"application/octet-stream"),
    (b"content-length", str(len(BIG)).encode()),
]


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return await _lifespan(receive, send)
    # New message dicts per request, as an application makes them (a server may keep or
    # change what it is given); the constant headers and body are shared, as in every app.
    await send({"type": "http.response.start", "status": 200, "headers": TEXT_HEADERS})
    await send({"type": "http.response.body", "body": HELLO})


async def big(scope, receive, send):
    if scope["type"] != "http":
        return await _lifespan(receive, send)
    await send({"type": "http.response.start", "status": 200, "headers": BIG_HEADERS})
    await send({"type": "http.response.body", "body": BIG})


async def upload(scope, receive, send):
    if scope["type"] != "http":
        return await _lifespan(receive, send)
    # The whole body as one bytes object, as an app that uses an upload has it (every app
    # of the suite ends up holding the body whole: RSGI, aiohttp and the native API give it so).
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(len(b"".join(chunks))).encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
