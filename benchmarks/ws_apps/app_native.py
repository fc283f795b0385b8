"""The WebSocket suite's app on ringloop's native handler API (``ringloop serve
app_native:app``): ``WebSocketHandler`` callbacks called straight from the connection.

``/echo`` sends every message back; ``/sub`` sessions join a set; a ``/pub`` message goes to
every subscriber with one ``broadcast`` call (a native loop over the set). Plain HTTP gets a
200, so the runner sees the server is up.
"""

from __future__ import annotations

from ringloop.server.native import Response, WebSocketHandler, broadcast, native_handler


class Suite(WebSocketHandler):
    def __init__(self) -> None:
        self.subscribers: set = set()

    def on_open(self, ws) -> None:
        if ws.request.path == "/sub":
            self.subscribers.add(ws)

    def on_message(self, ws, data) -> None:
        path = ws.request.path
        if path == "/echo":
            ws.send(data)
        elif path == "/pub":
            broadcast(self.subscribers, data)

    def on_close(self, ws, code, reason) -> None:
        self.subscribers.discard(ws)


@native_handler(websocket=Suite())
def app(request):
    return Response(200, body=b"ws suite")
