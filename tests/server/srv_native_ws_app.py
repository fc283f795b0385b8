"""The native WebSocket handler of the server suite (`ringloop.server.native`): a
`WebSocketHandler` whose behaviour depends on the path and the message:

* on_connect: `/deny` is refused (403), `/raise` raises (500), `chat` is picked when offered;
* on_message: echoes; `all` broadcasts `to all` to every open session and answers how many
  took it; `boom` raises (the session closes with 1011); `close` closes with 4000 "bye";
  `flood` sends 64 KiB messages until `send` says the buffer is full, and again each time a
  message arrives (a client that never reads must keep the server's memory bounded);
* on_close is recorded; `GET /record` answers the record as JSON (plain HTTP on the same app).
"""

from __future__ import annotations

import json

from ringloop.server.native import Response, WebSocketHandler, broadcast, native_handler

RECORD: dict[str, object] = {"closes": [], "flood_sent": 0, "flood_false": 0}


class Handler(WebSocketHandler):
    def __init__(self) -> None:
        self.members: set = set()

    def on_connect(self, request):
        if request.path == "/deny":
            return False
        if request.path == "/raise":
            raise RuntimeError("on_connect failed on purpose")
        offered = (request.header(b"sec-websocket-protocol") or b"").decode()
        return "chat" if "chat" in [p.strip() for p in offered.split(",")] else None

    def on_open(self, ws):
        self.members.add(ws)

    def on_message(self, ws, data):
        if data == "all":
            ws.send(str(broadcast(list(self.members), "to all")))
        elif data == "boom":
            raise ValueError("on_message failed on purpose")
        elif data == "close":
            ws.close(4000, "bye")
        elif data == "flood":
            self.flood(ws)
        else:
            ws.send(data)

    def flood(self, ws):
        chunk = b"f" * 65536
        while True:
            RECORD["flood_sent"] += 1
            if not ws.send(chunk):
                RECORD["flood_false"] += 1
                return

    def on_close(self, ws, code, reason):
        self.members.discard(ws)
        RECORD["closes"].append([ws.request.path, code, reason])


@native_handler(websocket=Handler())
def app(request):
    if request.path == "/record":
        return Response(200, [(b"content-type", b"application/json")], json.dumps(RECORD))
    return Response(200, body=b"plain http")
