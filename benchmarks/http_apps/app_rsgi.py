"""granian's own interface, RSGI: the "native" row for granian (no ASGI message dicts)."""

HELLO = b"Hello, world!"
BIG = b"x" * 65536
TEXT_HEADERS = [("content-type", "text/plain")]
BIG_HEADERS = [("content-type", "application/octet-stream")]


async def hello(scope, proto):
    proto.response_bytes(200, TEXT_HEADERS, HELLO)


async def big(scope, proto):
    proto.response_bytes(200, BIG_HEADERS, BIG)


async def upload(scope, proto):
    body = await proto()
    proto.response_bytes(200, TEXT_HEADERS, str(len(body)).encode())
