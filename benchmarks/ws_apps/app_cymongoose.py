"""cymongoose's own API (Mongoose, in C): ``python app_cymongoose.py PORT``.

One event handler: an HTTP request on ``/echo``, ``/sub`` or ``/pub`` is upgraded with
``conn.ws_upgrade``; on ``/echo`` each message is sent back with ``conn.ws_send``; ``/sub``
connections are kept by id; a ``/pub`` message is sent to each of them with ``ws_send``
(Mongoose has no topic API: iterating the connections is how its examples broadcast).
"""

import sys

from cymongoose import (
    MG_EV_CLOSE,
    MG_EV_HTTP_MSG,
    MG_EV_WS_MSG,
    WEBSOCKET_OP_BINARY,
    WEBSOCKET_OP_TEXT,
    Manager,
)

ROLE = {}  # connection id -> "echo", "sub" or "pub"
SUBSCRIBERS = {}  # connection id -> connection


def handler(conn, event, data):
    if event == MG_EV_HTTP_MSG:
        role = data.uri.lstrip("/")
        if role in ("echo", "sub", "pub"):
            conn.ws_upgrade(data)
            ROLE[conn.id] = role
            if role == "sub":
                SUBSCRIBERS[conn.id] = conn
        else:
            conn.reply(200, b"ws suite", {"Content-Type": "text/plain"})
    elif event == MG_EV_WS_MSG:
        role = ROLE.get(conn.id)
        op = WEBSOCKET_OP_BINARY if data.flags & WEBSOCKET_OP_BINARY else WEBSOCKET_OP_TEXT
        if role == "echo":
            conn.ws_send(data.data, op)
        elif role == "pub":
            message = data.data
            for subscriber in SUBSCRIBERS.values():
                subscriber.ws_send(message, WEBSOCKET_OP_BINARY)
    elif event == MG_EV_CLOSE:
        ROLE.pop(conn.id, None)
        SUBSCRIBERS.pop(conn.id, None)


if __name__ == "__main__":
    manager = Manager(handler)
    manager.listen(f"http://127.0.0.1:{int(sys.argv[1])}")
    manager.run()
