"""Echo server and clients of the load tests (imported as ``load_clients``; not a test module).

The clients run on the test's own loop, or in a child process when RLIMIT_NOFILE cannot hold
both ends of every connection in one process (10,000 connections are 20,000 fds plus the
listener and the process's own): ``python load_clients.py KIND HOST PORT N SLOTS`` runs
``concurrent_clients`` on a fresh loop of KIND and prints its report as JSON.

The echo protocol is framed so that the *server* closes first: the server closes a connection
once it has echoed ``close_after`` bytes, the client reads to EOF and then closes. The active
closer keeps the TIME_WAIT entry; on the server side all those entries share the listening
port, so tens of thousands of short connections never exhaust the client's ephemeral ports.
"""

from __future__ import annotations

import asyncio
import json
import sys

MSG_LEN = 16


def message(i: int, phase: int) -> bytes:
    """Client ``i``'s distinct 16-byte message for ``phase``."""
    msg = f"c{i:08d}/p{phase}/".ljust(MSG_LEN, "#").encode()
    assert len(msg) == MSG_LEN
    return msg


class Census:
    """Live and peak number of server-side connections."""

    def __init__(self) -> None:
        self.live = self.peak = self.total = 0


class EchoServer(asyncio.Protocol):
    """Echoes what it gets; closes after ``close_after`` bytes (the server closes first)."""

    def __init__(self, census: Census, close_after: int) -> None:
        self.census = census
        self.left = close_after

    def connection_made(self, transport) -> None:
        self.transport = transport
        c = self.census
        c.live += 1
        c.total += 1
        c.peak = max(c.peak, c.live)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)
        self.left -= len(data)
        if self.left <= 0:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.census.live -= 1


class EchoClient(asyncio.Protocol):
    """Collects what it gets; ``until(n)`` waits for n bytes, ``lost`` for the end."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.lost = loop.create_future()
        self._want = 0
        self._enough: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self._enough is not None and len(self.data) >= self._want:
            self._enough.set_result(None)
            self._enough = None

    def connection_lost(self, exc) -> None:
        self.lost.set_result(exc)
        if self._enough is not None:
            self._enough.set_exception(
                AssertionError(f"lost ({exc!r}) with {bytes(self.data)!r} received")
            )

    async def until(self, n: int) -> None:
        if len(self.data) < n:
            self._want = n
            self._enough = asyncio.get_running_loop().create_future()
            await self._enough


async def concurrent_clients(loop, addr, n: int, slots: int) -> dict:
    """``n`` clients, all connected at once before any of them finishes.

    Phase 1: connect and echo a first message, at most ``slots`` at a time (the echo proves
    the server accepted, so the listen backlog never overflows into SYN retransmits). Then
    every client waits until all ``n`` are connected. Phase 2, all at once: a second message
    each, the echo of both, and the server's close. Returns a report of the errors.
    """
    gate = asyncio.Semaphore(slots)
    all_in = loop.create_future()
    arrived = 0

    async def one(i: int) -> None:
        nonlocal arrived
        proto = EchoClient()
        tr = None
        try:
            try:
                async with gate:
                    tr, _ = await loop.create_connection(lambda: proto, *addr)
                    tr.write(message(i, 1))
                    await proto.until(MSG_LEN)
            finally:
                arrived += 1  # failed clients count too, or the others would wait forever
                if arrived == n:
                    all_in.set_result(None)
            await all_in
            tr.write(message(i, 2))
            exc = await proto.lost
            assert exc is None, f"client {i}: connection_lost({exc!r})"
            want = message(i, 1) + message(i, 2)
            assert proto.data == want, f"client {i}: got {bytes(proto.data)!r}, want {want!r}"
        finally:
            if tr is not None and not tr.is_closing():
                tr.abort()

    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    errors = [repr(r) for r in results if r is not None]
    return {"n": n, "errors": len(errors), "first_errors": errors[:5]}


def _make_loop(kind: str) -> asyncio.AbstractEventLoop:
    # The same loops as tests/conftest.py's make_loop (not importable from here: this
    # directory has a conftest.py of its own that would shadow it).
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    import ringloop

    loop = ringloop.Loop(backend=kind.removeprefix("ringloop-"))
    assert loop.backend == kind.removeprefix("ringloop-")
    return loop


def main() -> None:
    kind, host, port, n, slots = sys.argv[1:]
    loop = _make_loop(kind)
    try:
        report = loop.run_until_complete(
            concurrent_clients(loop, (host, int(port)), int(n), int(slots))
        )
    finally:
        loop.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
