"""Regression tests of issue 10: the read path keeps bytes in order, and the two API bugs
real libraries hit (sendfile on accepted sockets, ``remove_reader`` after ``close``).

The four read shapes are the ones that lost or reordered bytes on io_uring before the fix:
a protocol pausing in ``data_received`` and resuming from ``call_soon``; asyncio streams whose
own flow control pauses (``limit=100``); a ``BufferedProtocol`` pausing in ``buffer_updated``;
and a resume from ``call_later(0)``, which let the EOF overtake held data. Each runs a few
times with both cores busy (the bug hid on a quiet machine) and compares every byte.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import tempfile

import pytest
from read_order_stress import busy_cores, diff
from transport_helpers import run

pytestmark = pytest.mark.timeout(180)

N = 4_000_000
ROUNDS = 3


@pytest.fixture(scope="module")
def busy():
    with busy_cores():
        yield


async def send_in_thread(loop, addr, payload: bytes) -> None:
    """A plain client socket in a thread sends ``payload`` and closes."""

    def send():
        with socket.create_connection(addr) as c:
            c.sendall(payload)

    await loop.run_in_executor(None, send)


async def delivered(loop, serve, done, payload: bytes) -> bytes:
    """Start a server with ``serve()``, send it ``payload`` from a plain socket in a thread,
    and return what its reader collected (``done``'s result)."""
    srv = await serve()
    try:
        await send_in_thread(loop, srv.sockets[0].getsockname(), payload)
        return await asyncio.wait_for(done, 60)
    finally:
        srv.close()


class PausingSink(asyncio.Protocol):
    """Pauses after every read; ``resume`` says how it comes back."""

    def __init__(self, resume: str) -> None:
        self.how = resume
        self.buf = bytearray()
        self.eof_at: int | None = None
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, t) -> None:
        self.t = t

    def data_received(self, data: bytes) -> None:
        assert self.eof_at is None, "data after EOF"
        self.buf += data
        self.t.pause_reading()
        loop = asyncio.get_running_loop()
        if self.how == "soon":
            loop.call_soon(self.t.resume_reading)
        else:
            loop.call_later(0, self.t.resume_reading)

    def eof_received(self):
        self.eof_at = len(self.buf)

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_result(bytes(self.buf))


@pytest.mark.parametrize("resume", ["soon", "later0"])
def test_protocol_paused_in_data_received(loop, busy, resume) -> None:
    """The issue's repro (``call_soon``) and the silent tail loss (``call_later(0)``): every
    byte, in order, and the EOF only after the last one."""

    async def main():
        for i in range(ROUNDS):
            payload = random.Random(i).randbytes(N)
            sink = PausingSink(resume)
            serve = lambda s=sink: loop.create_server(lambda: s, "127.0.0.1", 0)  # noqa: E731
            got = await delivered(loop, serve, sink.done, payload)
            assert got == payload, diff(got, payload)
            assert sink.eof_at == N

    run(loop, main(), timeout=170)


def test_streams_own_flow_control(loop, busy) -> None:
    """``start_server(limit=100)``: StreamReader pauses in ``data_received`` and resumes from
    ``read()``; no user pause at all."""

    async def main():
        for i in range(ROUNDS):
            payload = random.Random(i).randbytes(N)
            rng = random.Random(100 + i)
            done = loop.create_future()

            async def handler(r, w, rng=rng, done=done):
                buf = bytearray()
                while chunk := await r.read(rng.choice((1, 100, 5000, 70_000))):
                    buf += chunk
                w.close()
                done.set_result(bytes(buf))

            serve = lambda h=handler: asyncio.start_server(h, "127.0.0.1", 0, limit=100)  # noqa: E731
            got = await delivered(loop, serve, done, payload)
            assert got == payload, diff(got, payload)

    run(loop, main(), timeout=170)


class PausingBuffered(asyncio.BufferedProtocol):
    """Random ``get_buffer`` sizes; pauses in ``buffer_updated``, resumes from ``call_soon``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.buf = bytearray()
        self.lost: object = "not yet"
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, t) -> None:
        self.t = t

    def get_buffer(self, sizehint: int):
        self.view = memoryview(bytearray(self.rng.choice((100, 4096, 65536, 200_000))))
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        self.buf += self.view[:nbytes]
        self.t.pause_reading()
        asyncio.get_running_loop().call_soon(self.t.resume_reading)

    def connection_lost(self, exc) -> None:
        self.lost = exc
        self.done.set_result(bytes(self.buf))


def test_buffered_protocol_paused_in_buffer_updated(loop, busy) -> None:
    async def main():
        for i in range(ROUNDS):
            payload = random.Random(i).randbytes(N)
            proto = PausingBuffered(i)
            serve = lambda p=proto: loop.create_server(lambda: p, "127.0.0.1", 0)  # noqa: E731
            got = await delivered(loop, serve, proto.done, payload)
            assert got == payload, diff(got, payload)
            assert proto.lost is None

    run(loop, main(), timeout=170)


# -- bug 2: sendfile on accepted connections ---------------------------------------------------


def test_accepted_sockets_are_non_blocking(loop) -> None:
    """Accepted sockets have timeout 0.0, as asyncio's do, so ``loop.sendfile`` works on them
    (aiohttp's ``FileResponse`` sent an empty body on io_uring)."""
    data = os.urandom(300_000)

    async def main():
        accepted = loop.create_future()

        async def handler(r, w):
            sock = w.transport._sock
            accepted.set_result((sock.gettimeout(), sock.type))
            with tempfile.TemporaryFile() as f:
                f.write(data)
                f.seek(0)
                await loop.sendfile(w.transport, f)
            w.close()

        srv = await asyncio.start_server(handler, "127.0.0.1", 0)
        r, w = await asyncio.open_connection(*srv.sockets[0].getsockname())
        got = await r.read()
        w.close()
        srv.close()
        assert await accepted == (0.0, socket.SOCK_STREAM)
        assert got == data

    run(loop, main())


# -- bug 3: remove_reader after close ---------------------------------------------------------


@pytest.mark.parametrize("direction", ["reader", "writer"])
def test_remove_after_close_finds_the_registration(loop, direction) -> None:
    """anyio closes a socket before removing its reader: asyncio finds the registration
    through the socket object (its fileno() is -1 by then) and returns True."""
    a, b = socket.socketpair()
    add = loop.add_reader if direction == "reader" else loop.add_writer
    remove = loop.remove_reader if direction == "reader" else loop.remove_writer
    add(a, lambda: None)
    a.close()
    assert remove(a) is True
    # Gone now: the closed object names no fd and no registration, so asyncio raises.
    with pytest.raises(ValueError):
        remove(a)
    b.close()


def test_remove_after_close_of_unknown_socket_raises(loop) -> None:
    """A closed socket that was never registered: asyncio's ValueError, as its selector."""
    a, b = socket.socketpair()
    a.close()
    with pytest.raises(ValueError):
        loop.remove_reader(a)
    b.close()


@pytest.mark.only_kinds(
    "ringloop-io_uring",
    "ringloop-epoll",
    reason="asyncio's selector keeps the stale key and fails the new registration instead",
)
def test_stale_reader_never_runs_for_a_reused_fd(loop) -> None:
    """A socket closed without ``remove_reader``: its fd number is reused by a new socket that
    registers a writer. The closed socket's reader must never run for the new one."""
    ran = []

    async def main():
        a, a_peer = socket.socketpair()
        loop.add_reader(a, ran.append, "stale")
        fd = a.fileno()
        a.close()
        b, b_peer = socket.socketpair()
        if b.fileno() != fd:
            os.dup2(b.fileno(), fd)
            b.close()
            b = socket.socket(fileno=fd)
        wrote = loop.create_future()
        loop.add_writer(b, lambda: wrote.done() or wrote.set_result(None))
        b_peer.send(b"readable now")
        await wrote
        for _ in range(5):
            await asyncio.sleep(0)
        loop.remove_writer(b)
        for s in (a_peer, b, b_peer):
            s.close()

    run(loop, main())
    assert ran == []
