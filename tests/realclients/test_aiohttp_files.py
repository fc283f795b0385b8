"""aiohttp's web server and client, both on the loop under test, serving a 20 MiB file.

``web.FileResponse`` and ``add_static`` hand the accepted socket to ``loop.sendfile``, which on
ringloop moves the file with ``os.sendfile`` beside the native transport's own write path:
the transport's buffer must be empty before, and the socket given back after, or the
response's head and tail land in the wrong place. The test wraps ``loop.sendfile`` to prove
that path ran (aiohttp falls back to plain writes on ``NotImplementedError``), reads slowly so
the server meets a full socket buffer mid-file, and checks every byte by SHA-256 or full
equality -- for the whole file and for byte ranges (``Range: bytes=a-b`` and a suffix range),
where the file offset and count passed to sendfile matter.
"""

from __future__ import annotations

import asyncio
import hashlib
import os

import aiohttp
import pytest
from aiohttp import web
from realclient_helpers import HOST, MiB, run

pytestmark = pytest.mark.timeout(60)

FILE_SIZE = 20 * MiB + 12_345  # not a multiple of any page or buffer size


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    path = tmp_path_factory.mktemp("aiohttp-files") / "blob.bin"
    data = os.urandom(FILE_SIZE)
    path.write_bytes(data)
    return path, data


class SendfileSpy:
    """Wraps ``loop.sendfile`` and records the byte count of every call that completed."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.sent: list[int] = []
        original = loop.sendfile

        async def sendfile(transport, file, offset=0, count=None, *, fallback=True):
            n = await original(transport, file, offset, count, fallback=fallback)
            self.sent.append(n)
            return n

        loop.sendfile = sendfile


async def _serve(path):
    app = web.Application()

    async def file_response(request):
        return web.FileResponse(path)

    app.router.add_get("/file", file_response)
    app.router.add_static("/static", path.parent)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    (host, port, *_) = runner.addresses[0]
    return runner, f"http://{host}:{port}"


async def _get(session, url, headers=None) -> tuple[int, dict, bytes]:
    async with session.get(url, headers=headers) as resp:
        parts = []
        reads = 0
        while chunk := await resp.content.readany():
            parts.append(chunk)
            reads += 1
            if reads % 8 == 0:
                # A slow reader: the server's socket buffer fills in the middle of sendfile.
                await asyncio.sleep(0.002)
        return resp.status, dict(resp.headers), b"".join(parts)


@pytest.mark.parametrize("route", ["/file", "/static/blob.bin"])
def test_whole_file(loop, blob, route):
    path, data = blob
    spy = SendfileSpy(loop)

    async def main():
        runner, url = await _serve(path)
        try:
            async with aiohttp.ClientSession() as session:
                return await _get(session, url + route)
        finally:
            await runner.cleanup()

    status, headers, body = run(loop, main())
    assert status == 200
    assert int(headers["Content-Length"]) == FILE_SIZE
    assert len(body) == FILE_SIZE
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    assert spy.sent == [FILE_SIZE], "aiohttp did not move the file with loop.sendfile"


# Ranges that start and end off page boundaries, one crossing most of the file.
RANGES = {
    "middle": ("bytes=100001-2109999", 100_001, 2_110_000),
    "most": ("bytes=4097-", 4097, FILE_SIZE),
    "suffix": ("bytes=-777777", FILE_SIZE - 777_777, FILE_SIZE),
}


@pytest.mark.parametrize("which", list(RANGES))
def test_range(loop, blob, which):
    path, data = blob
    header, start, stop = RANGES[which]
    spy = SendfileSpy(loop)

    async def main():
        runner, url = await _serve(path)
        try:
            async with aiohttp.ClientSession() as session:
                # Two requests on one keep-alive connection: the range must not disturb the
                # connection for the request after it.
                ranged = await _get(session, url + "/static/blob.bin", {"Range": header})
                whole = await _get(session, url + "/file")
                return ranged, whole
        finally:
            await runner.cleanup()

    (status, headers, body), (status2, _, body2) = run(loop, main())
    assert status == 206
    assert headers["Content-Range"] == f"bytes {start}-{stop - 1}/{FILE_SIZE}"
    assert body == data[start:stop]
    assert status2 == 200 and body2 == data
    assert spy.sent == [stop - start, FILE_SIZE]
