"""aiohttp's server with its own WebSocket API: ``python app_aiohttp.py PORT``.

``/echo`` echoes; ``/sub`` responses are kept in a set; a ``/pub`` message is sent to each
with ``await ws.send_bytes`` (aiohttp has no broadcast helper). On uvloop, as the HTTP
suite runs aiohttp; compression off.
"""

import sys

import uvloop
from aiohttp import WSMsgType, web

SUBSCRIBERS = set()


async def index(request):
    return web.Response(text="ws suite")


async def echo(request):
    ws = web.WebSocketResponse(compress=False, max_msg_size=1 << 24)
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
        elif msg.type == WSMsgType.TEXT:
            await ws.send_str(msg.data)
    return ws


async def sub(request):
    ws = web.WebSocketResponse(compress=False)
    await ws.prepare(request)
    SUBSCRIBERS.add(ws)
    try:
        async for _msg in ws:
            pass
    finally:
        SUBSCRIBERS.discard(ws)
    return ws


async def pub(request):
    ws = web.WebSocketResponse(compress=False, max_msg_size=1 << 24)
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.BINARY:
            for subscriber in list(SUBSCRIBERS):
                await subscriber.send_bytes(msg.data)
    return ws


if __name__ == "__main__":
    app = web.Application()
    app.add_routes(
        [web.get("/", index), web.get("/echo", echo), web.get("/sub", sub), web.get("/pub", pub)]
    )
    web.run_app(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )
