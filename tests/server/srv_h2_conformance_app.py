"""The ASGI application `httpwg` (the HTTP/2 conformance suite) is run against
(`test_server_h2_conformance.py`; not a test module).

What the suite asks for, as h2spec did: `GET /` and `POST /` answered with a 200 and a
non-empty body. A request body is read whole before the answer, so the cases that send
DATA frames (flow control, content-length mismatches) meet a server that consumes them.
"""

from __future__ import annotations

from srv_asgi_bits import lifespan

BODY = b"ringloop answers"
HEADERS = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    more = True
    while more:
        m = await receive()
        if m["type"] == "http.disconnect":
            return
        more = m.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
