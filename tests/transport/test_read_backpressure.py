"""Pausing reading holds the peer back: a consumer slower than the sender costs bounded memory.

A protocol that pauses after every read and resumes a millisecond later (uvicorn's body
buffer, an ASGI app reading an upload slowly) must make the sender wait, not make the
transport buffer the difference. On io_uring a resume used to arm the multishot recv while
held reads were still waiting to be delivered: the ring filled from the full socket, all of
it joined the held reads, and every resume added a ring's worth (256 MiB sent: +128 MiB).
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from transport_helpers import rss_bytes, run

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
SENT = 256 * MiB
# The receive side's own buffers (socket, ring, one read) are a few MiB.
BOUND = 48 * MiB


class SlowSink(asyncio.Protocol):
    """Counts what it gets, pausing after each read and resuming 1 ms later."""

    def __init__(self) -> None:
        self.got = 0
        self.reads = 0
        self.peak_rss = 0
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, t) -> None:
        self.t = t

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        self.reads += 1
        if self.reads % 16 == 0:
            self.peak_rss = max(self.peak_rss, rss_bytes())
        self.t.pause_reading()
        asyncio.get_running_loop().call_later(0.001, self.t.resume_reading)

    def eof_received(self) -> None:
        if not self.done.done():
            self.done.set_result(self.got)


def test_slow_consumer_holds_the_sender_back(loop):
    async def main() -> tuple[int, int, int]:
        sink = SlowSink()
        srv = await loop.create_server(lambda: sink, "127.0.0.1", 0)

        def send() -> None:
            block = b"x" * MiB
            with socket.create_connection(srv.sockets[0].getsockname()) as c:
                for _ in range(SENT // MiB):
                    c.sendall(block)

        before = rss_bytes()
        sender = loop.run_in_executor(None, send)
        got = await asyncio.wait_for(sink.done, 90)
        await sender
        srv.close()
        return got, before, sink.peak_rss

    got, before, peak = run(loop, main(), timeout=100)
    assert got == SENT
    assert peak - before < BOUND, (
        f"RSS grew {(peak - before) / MiB:.0f} MiB while receiving 256 MiB"
    )
