"""socketify's own WebSocket API (uWebSockets underneath): ``python app_socketify.py PORT``.

``/echo`` sends each message back; ``/sub`` connections subscribe to a topic and a ``/pub``
message is published to it with ``app.publish``, uWebSockets' own fan-out (the idiomatic
way there: the C++ side writes to every subscriber). Compression off; a 16 MiB payload
limit (its default, 16 KiB, would refuse the 64 KiB scenario).
"""

import sys

from socketify import App, AppListenOptions, CompressOptions, OpCode

TOPIC = "broadcast"


def index(res, req):
    res.end("ws suite")


def behaviour(**handlers):
    return {
        "compression": CompressOptions.DISABLED,
        "max_payload_length": 1 << 24,
        "max_backpressure": 1 << 24,
        "idle_timeout": 600,
        **handlers,
    }


def echo_message(ws, message, opcode):
    ws.send(message, opcode)


def sub_open(ws):
    ws.subscribe(TOPIC)


def pub_message(ws, message, opcode):
    app.publish(TOPIC, message, OpCode.BINARY)


app = App()

if __name__ == "__main__":
    app.get("/", index)
    app.ws("/echo", behaviour(message=echo_message))
    app.ws("/sub", behaviour(open=sub_open))
    app.ws("/pub", behaviour(message=pub_message))
    app.listen(AppListenOptions(port=int(sys.argv[1]), host="127.0.0.1"), None)
    app.run()
