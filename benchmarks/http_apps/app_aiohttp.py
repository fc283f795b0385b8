"""aiohttp's own server and handlers (``aiohttp.web``) on uvloop: ``python app_aiohttp.py
RESPONSE PORT PATH``. One route, at the path the scenario requests, so no pattern matching
runs; no access log, keep-alive timeout 60 s."""

import sys

import uvloop
from aiohttp import web

HELLO = b"Hello, world!"
BIG = b"x" * 65536


async def hello(request):
    return web.Response(body=HELLO, content_type="text/plain")


async def big(request):
    return web.Response(body=BIG, content_type="application/octet-stream")


async def upload(request):
    body = await request.read()
    return web.Response(body=str(len(body)).encode(), content_type="text/plain")


if __name__ == "__main__":
    response, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    handler = {"hello": hello, "big": big, "upload": upload}[response]
    app = web.Application(client_max_size=2 * 1024 * 1024)  # the 1 MiB upload fits
    app.router.add_route("*", path, handler)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        keepalive_timeout=60,
        loop=uvloop.new_event_loop(),
    )
