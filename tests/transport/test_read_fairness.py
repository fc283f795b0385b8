"""Reading is fair: while the loop is busy, every connection with data waiting moves.

Many clients upload at once to a server whose callbacks block (a handler doing synchronous
work, as the PDF-ingest example's blocking endpoint does). On stock asyncio each readable
socket gets one read per iteration, so the uploads finish close together. ringloop's io_uring
loop reads into a ring of 64 provided buffers: when they ran out, a recv ended with ENOBUFS
and was re-armed, but the kernel gave every freed buffer to whichever armed recv saw data
first, so a re-armed one could miss the ring iteration after iteration. Under 100 uploads of
300 KB behind a 20 ms handler the last upload finished 2.5x later than the median one, and
`ringloop serve`'s p99 was 2.4x uvicorn's. The loop now reads a starved recv's socket directly
(see src/eventloop/router.rs), as epoll's readiness read does.

Run on every loop kind; stock asyncio is the reference. Here (100 uploads of 300 KB, 5 ms per
read) the last upload finishes at 1.00x the median's time on asyncio and 1.03-1.05x on
ringloop, and at 1.87x on io_uring before the fix: the bound, 1.4x, leaves room for a loaded
machine on either side.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time

import pytest
from transport_helpers import run

pytestmark = pytest.mark.timeout(120)

CLIENTS = 100
SIZE = 300_000
BLOCK = 0.005


class BlockingSink(asyncio.Protocol):
    """Takes an upload, blocking the loop after every read; notes when its EOF came."""

    def __init__(self, finished: list[float], all_in: asyncio.Future, made: list[int]) -> None:
        self.finished, self.all_in, self.got, self.made = finished, all_in, 0, made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(1)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        time.sleep(BLOCK)

    def eof_received(self) -> None:
        assert self.got == SIZE, f"{self.got} of {SIZE} bytes"
        self.finished.append(time.monotonic())
        if len(self.finished) == CLIENTS and not self.all_in.done():
            self.all_in.set_result(None)


def test_uploads_behind_a_blocking_handler_finish_together(loop) -> None:
    finished: list[float] = []

    async def main() -> float:
        all_in = loop.create_future()
        made: list[int] = []
        server = await loop.create_server(
            lambda: BlockingSink(finished, all_in, made), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        go = threading.Event()
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(CLIENTS)]

        def upload(s: socket.socket) -> None:
            go.wait()
            s.sendall(b"u" * SIZE)
            s.shutdown(socket.SHUT_WR)

        threads = [threading.Thread(target=upload, args=(s,), daemon=True) for s in socks]
        for t in threads:
            t.start()
        # Every connection accepted (its protocol made) before the uploads start: an event,
        # not a pause that a loaded machine may not finish accepting in.
        while len(made) < CLIENTS:
            await asyncio.sleep(0.01)
        start = time.monotonic()
        go.set()
        try:
            await all_in
        finally:
            for t in threads:
                await loop.run_in_executor(None, t.join, 10)
            for s in socks:
                s.close()
            server.close()
            await server.wait_closed()
        return start

    start = run(loop, main(), timeout=90)
    took = sorted(t - start for t in finished)
    median, last = statistics.median(took), took[-1]
    assert last <= 1.4 * median, (
        f"the last upload took {last:.2f} s, {last / median:.2f}x the median {median:.2f} s: "
        f"some connections were left unread while others were read"
    )
