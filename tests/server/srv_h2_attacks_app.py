"""The HTTP/2 attack suite's application (`test_server_http2_attacks.py`; not a test module):
the suite's app (`srv_h2_app`), with every HTTP call counted by path, so that a test can tell
how many of its streams reached the application (`/calls?path=P`).
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from srv_h2_app import app as inner

CALLS: dict[str, int] = {}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return await inner(scope, receive, send)
    path = scope["path"]
    if path == "/calls":
        want = parse_qs(scope["query_string"].decode("latin-1")).get("path", [""])[0]
        body = json.dumps(CALLS.get(want, 0)).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return None
    CALLS[path] = CALLS.get(path, 0) + 1
    return await inner(scope, receive, send)
