"""What the HTTP/2 suites' ASGI applications (`srv_h2_app`, `srv_hints_app`,
`srv_h2_conformance_app`) share: the lifespan protocol answered, a query parameter, a whole
answer. Not a test module."""

from __future__ import annotations

from urllib.parse import parse_qs


async def lifespan(receive, send) -> None:
    """Answer the lifespan protocol: startup and shutdown complete."""
    while True:
        m = await receive()
        if m["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif m["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def q(scope, name: str, default=None):
    """The first value of query parameter `name`, else `default`."""
    values = parse_qs(scope["query_string"].decode("latin-1")).get(name)
    return values[0] if values else default


async def answer(send, body: bytes, status: int = 200, ctype: bytes = b"text/plain") -> None:
    """A whole response: `body` with its content-type and content-length."""
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
