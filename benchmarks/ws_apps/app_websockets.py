"""The ``websockets`` library's own asyncio server: ``python app_websockets.py PORT``.

``/echo`` echoes; ``/sub`` connections are kept in a set; a ``/pub`` message goes to all of
them through ``websockets.broadcast``, the library's documented way (it writes to each
connection without waiting for any). Compression off, like every subject of the suite (the
load generator does not offer it). On uvloop, as its documentation suggests for speed.
"""

import sys

import uvloop
from websockets.asyncio.server import broadcast, serve

SUBSCRIBERS = set()


async def handler(ws):
    path = ws.request.path
    if path == "/echo":
        async for message in ws:
            await ws.send(message)
    elif path == "/sub":
        SUBSCRIBERS.add(ws)
        try:
            await ws.wait_closed()
        finally:
            SUBSCRIBERS.discard(ws)
    elif path == "/pub":
        async for message in ws:
            broadcast(SUBSCRIBERS, message)


async def main(port):
    # max_size: the 64 KiB scenario must fit (its default is 1 MiB, so this only documents
    # it); ping_interval None: no keep-alive pings in the middle of a measurement.
    async with serve(
        handler, "127.0.0.1", port, compression=None, max_size=1 << 24, ping_interval=None
    ) as server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
