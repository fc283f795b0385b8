"""Real HTTP clients against the plain ASGI application on ringloop's server (both loop
backends) and uvicorn (httptools and h11): the standard library's `http.client`, httpx and
aiohttp — keep-alive reuse, a streamed (chunked) upload from a generator, a large download
read in pieces, and many requests at once through a connection pool.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import zlib

import pytest
from srv_harness import HOST, MiB

pytestmark = pytest.mark.timeout(60)


def test_http_client_keep_alive(asgi):
    conn = http.client.HTTPConnection(HOST, asgi.port, timeout=10)
    try:
        for i in range(10):
            conn.request("POST", "/echo", body=b"x" * i, headers={"X-N": str(i)})
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b"x" * i)
        sock = conn.sock
        conn.request("GET", "/path?last=1")
        assert conn.getresponse().read() == b"GET /path last=1"
        assert conn.sock is sock, "the connection was not kept alive"
    finally:
        conn.close()


def test_http_client_chunked_upload(asgi):
    conn = http.client.HTTPConnection(HOST, asgi.port, timeout=10)
    try:
        parts = [b"a" * 1000, b"b" * 100000, b"c"]
        conn.request("POST", "/echo-info", body=iter(parts), encode_chunked=True)
        data = json.loads(conn.getresponse().read())
        assert data["len"] == sum(map(len, parts))
        assert data["crc"] == zlib.crc32(b"".join(parts))
    finally:
        conn.close()


def test_httpx_streamed_download(asgi):
    httpx = pytest.importorskip("httpx")
    size = 50 * MiB + 3
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", asgi.url(f"/download?size={size}")) as r,
    ):
        assert r.status_code == 200
        got = sum(len(piece) for piece in r.iter_bytes())
    assert got == size


def test_aiohttp_streamed_upload_download_and_pool(asgi):
    aiohttp = pytest.importorskip("aiohttp")

    async def main():
        async def gen():
            for i in range(64):
                yield bytes([i]) * 16384

        want = b"".join(bytes([i]) * 16384 for i in range(64))
        connector = aiohttp.TCPConnector(limit=8)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(asgi.url("/echo"), data=gen()) as r:  # chunked
                assert r.status == 200
                assert hashlib.sha256(await r.read()).digest() == hashlib.sha256(want).digest()
            async with session.get(asgi.url(f"/download?size={20 * MiB}")) as r:
                got = 0
                async for piece in r.content.iter_chunked(65536):
                    got += len(piece)
                assert got == 20 * MiB

            async def one(i):
                async with session.get(asgi.url(f"/path?i={i}")) as r:
                    return await r.read()

            bodies = await asyncio.gather(*(one(i) for i in range(200)))
            assert bodies == [f"GET /path i={i}".encode() for i in range(200)]

    asyncio.run(main())
