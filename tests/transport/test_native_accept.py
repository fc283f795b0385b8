"""Connections accepted natively (docs/native-accept.md), pinned to asyncio's behaviour.

A protocol factory marked `_ringloop_native` (what `ringloop serve` gives `create_server`) has
each connection set up with no Python code on ringloop's loops (io_uring: in the multishot
accept's completion; epoll: in the listener's reader): a `_core.NativeTransport` instead of
asyncio's transport. Each test is written once and runs on every loop kind: stock asyncio
ignores the mark (its own accept path), so it is the oracle the native path must match — the protocol's callbacks in order, peer
and local addresses, flow control, close with data pending, EOF kept open, the
`asyncio.Server`'s count of connections, an error setting one up, `get_extra_info` (the
socket, unknown keys, defaults), the loop's refusal to watch a transport's fd, and
`loop.sendfile` (zero-copy in the clear).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import socket
import sys

import pytest
from transport_helpers import LONG, Recorder, marked_native, run

pytestmark = pytest.mark.timeout(120)


def collecting(cls):
    """A marked factory of `cls` protocols, and the list of those it made."""
    made: list = []

    def factory():
        p = cls()
        made.append(p)
        return p

    return marked_native(factory), made


def active(server: asyncio.AbstractServer) -> int:
    """The connections an asyncio.Server counts (3.13+ keeps the transports)."""
    clients = getattr(server, "_clients", None)
    return len(clients) if clients is not None else server._active_count


class Echo(Recorder):
    """Echoes what it reads; closes at the client's EOF (returns False)."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.transport.write(data)


async def serve(loop, family, factory):
    sock = family.listen_socket()
    server = await loop.create_server(factory, sock=sock)
    return server, sock.getsockname()


def check_native(loop, transport) -> None:
    """On ringloop's loops (io_uring: the multishot accept; epoll: the listener's reader) the
    mark must take effect, else these tests prove nothing; stock asyncio ignores it."""
    native = type(transport).__name__ == "NativeTransport"
    assert native == hasattr(loop, "_native_accepts"), type(transport)


def test_many_connections_each_served_with_its_addresses(loop, family):
    n = 64
    factory, protos = collecting(Echo)

    async def client(addr, i):
        reader, writer = await _open(family, addr)
        msg = b"hello %d\n" % i
        writer.write(msg)
        assert await reader.readexactly(len(msg)) == msg
        own = writer.get_extra_info("sockname")
        writer.close()
        await writer.wait_closed()
        return own

    async def main():
        server, addr = await serve(loop, family, factory)
        names = await asyncio.gather(*(client(addr, i) for i in range(n)))
        await asyncio.wait_for(asyncio.gather(*(p.lost for p in protos)), LONG)
        assert active(server) == 0
        server.close()
        await server.wait_closed()
        return addr, names

    addr, names = run(loop, main())
    assert len(protos) == n
    for p in protos:
        check_native(loop, p.transport)
        assert p.events[0] == "made" and p.events[-2:] == ["eof", "lost"], p.events
        assert p.lost_calls == 1 and not p.after_lost
        assert p.transport.is_closing()
    if family.name == "tcp":
        peers = sorted(p.transport.get_extra_info("peername") for p in protos)
        assert peers == sorted(names)
        assert {p.transport.get_extra_info("sockname") for p in protos} == {addr}
    else:
        assert {p.transport.get_extra_info("sockname") for p in protos} == {addr}


async def _open(family, addr):
    if family.name == "tcp":
        return await asyncio.open_connection(*addr)
    return await asyncio.open_unix_connection(addr)


async def _echoed_once(loop, family, factory):
    """A server of `factory`'s echoing protocols, and a client that has had one byte back."""
    server, addr = await serve(loop, family, factory)
    reader, writer = await _open(family, addr)
    writer.write(b"x")
    assert await reader.readexactly(1) == b"x"
    return server, addr, reader, writer


def test_server_counts_connections_until_they_close(loop, family):
    factory, protos = collecting(Echo)

    async def main():
        server, addr, reader, writer = await _echoed_once(loop, family, factory)
        assert active(server) == 1
        server.close()
        closed = asyncio.ensure_future(server.wait_closed())
        # Still served after the server closed: it no longer accepts, it does not cut.
        writer.write(b"y")
        assert await reader.readexactly(1) == b"y"
        assert active(server) == 1
        if sys.version_info >= (3, 12, 1):  # before, wait_closed() did not wait (gh-79033)
            assert not closed.done()
        with pytest.raises(OSError):
            await _open(family, addr)
        protos[0].transport.close()
        assert await reader.read() == b""
        await asyncio.wait_for(closed, LONG)
        assert active(server) == 0
        writer.close()

    run(loop, main())
    check_native(loop, protos[0].transport)
    assert protos[0].lost_calls == 1


class Flood(Recorder):
    """Writes `size` bytes at once, then closes: the buffer drains before the end."""

    # More than loopback's socket buffers can take (tcp_wmem + tcp_rmem maxima): the write
    # must leave most of it in the transport's buffer.
    size = 32 * 1024 * 1024

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.payload = bytes(range(256)) * (self.size // 256)
        transport.write(self.payload)
        transport.close()


def test_close_with_data_pending_delivers_it_all_with_flow_control(loop):
    factory, protos = collecting(Flood)

    async def main():
        server, addr = await serve(loop, _Tcp(), factory)
        sock = socket.create_connection(addr)
        sock.setblocking(False)
        got = bytearray()
        while True:
            chunk = await loop.sock_recv(sock, 1 << 16)
            if not chunk:
                break
            got += chunk
        sock.close()
        await asyncio.wait_for(protos[0].lost, LONG)
        server.close()
        return bytes(got)

    got = run(loop, main())
    p = protos[0]
    check_native(loop, p.transport)
    assert hashlib.sha256(got).digest() == hashlib.sha256(p.payload).digest()
    assert p.pauses >= 1 and p.resumes == p.pauses, (p.pauses, p.resumes)
    assert p.events[0] == "made" and p.events[-1] == "lost" and p.lost_calls == 1


class KeepOpen(Recorder):
    """At EOF keeps the connection open, answers, and half-closes."""

    def eof_received(self):
        super().eof_received()
        self.transport.write(b"bye")
        self.transport.write_eof()
        return True


def test_eof_kept_open_answers_then_half_closes(loop, family):
    factory, protos = collecting(KeepOpen)

    async def main():
        server, addr = await serve(loop, family, factory)
        reader, writer = await _open(family, addr)
        writer.write(b"hi")
        writer.write_eof()
        assert await reader.read() == b"bye"  # then EOF
        assert not protos[0].lost.done()
        protos[0].transport.close()
        await asyncio.wait_for(protos[0].lost, LONG)
        writer.close()
        server.close()

    run(loop, main())
    p = protos[0]
    check_native(loop, p.transport)
    assert bytes(p.data) == b"hi"
    assert p.events == ["made", "data", "eof", "lost"]


def test_a_factory_that_fails_is_reported_in_debug_mode(loop, loop_errors):
    called = loop.create_future()

    def factory():
        called.set_result(None)
        raise ValueError("no protocol today")

    async def main():
        server, addr = await serve(loop, _Tcp(), factory)
        reader, writer = await asyncio.open_connection(*addr)
        # The report is made in the same step that called the factory, before this resumes.
        await called
        writer.close()
        server.close()

    loop.set_debug(True)  # asyncio reports it in debug mode only
    run(loop, main())
    made = [
        c
        for c in loop_errors
        if c.get("message") == "Error on transport creation for incoming connection"
    ]
    assert len(made) == 1 and isinstance(made[0]["exception"], ValueError), loop_errors
    loop_errors.clear()


class Asks(Echo):
    """Echoes; at its first read, notes what `get_extra_info` answers and what the loop says
    to watching the transport's fd."""

    def data_received(self, data: bytes) -> None:
        t = self.transport
        if not hasattr(self, "answers"):
            ts = t.get_extra_info("socket")
            self.socket = ts
            self.answers = {
                "same": ts is t.get_extra_info("socket", "other"),
                "kind": type(ts).__name__,
                "family": ts.family,
                "type": ts.type,
                "timeout": ts.gettimeout(),
                "peer": ts.getpeername() == t.get_extra_info("peername"),
                "local": ts.getsockname() == t.get_extra_info("sockname"),
                "unknown": t.get_extra_info("no such key"),
                "unknown_default": t.get_extra_info("no such key", 7),
                "peer_default": t.get_extra_info("peername", 7) == t.get_extra_info("peername"),
                "tls": [
                    t.get_extra_info(k, "d")
                    for k in ("ssl_object", "peercert", "cipher", "compression", "sslcontext")
                ],
            }
            try:
                asyncio.get_running_loop().add_reader(ts.fileno(), lambda: None)
            except RuntimeError as e:
                self.answers["add_reader"] = str(e).split(" is used")[0] + " is used"
        super().data_received(data)


def test_extra_info_and_the_fd_known_to_the_loop(loop, family):
    factory, protos = collecting(Asks)

    async def main():
        server, _addr, reader, writer = await _echoed_once(loop, family, factory)
        p = protos[0]
        fd = p.socket.fileno()
        # sock_* on the transport's fd is refused as add_reader is (nothing is there to read:
        # asyncio tries the recv first and checks on EAGAIN).
        own = socket.socket(fileno=fd)
        own.setblocking(False)
        try:
            with pytest.raises(RuntimeError, match="is used by transport"):
                await loop.sock_recv(own, 1)
        finally:
            own.detach()
        # The socket object collected while the connection lives closes nothing.
        del p.socket
        gc.collect()
        writer.write(b"y")
        assert await reader.readexactly(1) == b"y"
        ts = p.transport.get_extra_info("socket")
        assert ts.fileno() == fd
        p.transport.close()
        await asyncio.wait_for(p.lost, LONG)
        writer.close()
        server.close()
        await server.wait_closed()
        return fd, ts

    fd, ts = run(loop, main())
    p = protos[0]
    check_native(loop, p.transport)
    want_family = socket.AF_INET if family.name == "tcp" else socket.AF_UNIX
    assert p.answers == {
        "same": True,
        "kind": "TransportSocket",
        "family": want_family,
        "type": socket.SOCK_STREAM,
        "timeout": 0.0,
        "peer": True,
        "local": True,
        "unknown": None,
        "unknown_default": 7,
        "peer_default": True,
        "tls": ["d"] * 5,
        "add_reader": f"File descriptor {fd} is used",
    }
    # Closed with the transport: the socket object handed out lets go of the fd (asyncio's
    # closes its socket), so collecting it later cannot close an fd reused since.
    assert ts.fileno() == -1


class SendsFile(Recorder):
    """Writes a head, then `loop.sendfile`s part of a file larger than the socket buffers
    (so the transfer waits for the client), tries a write meanwhile, and closes."""

    def __init__(self, path) -> None:
        super().__init__()
        self.path = path
        self.result: asyncio.Future = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        asyncio.ensure_future(self.send())

    async def send(self) -> None:
        loop = asyncio.get_running_loop()
        t = self.transport
        with open(self.path, "rb") as f:
            t.write(b"head")
            task = asyncio.ensure_future(loop.sendfile(t, f, 3, FILE_SIZE - 10))
            await asyncio.sleep(0)  # the task's first step: the transfer has begun
            try:
                t.write(b"x")
                during = None
            except RuntimeError as e:
                during = str(e)
            sent = await task
            self.result.set_result((sent, f.tell(), during))
        t.close()


FILE_SIZE = 24 * 1024 * 1024 + 5  # more than loopback's socket buffers hold


def test_sendfile_sends_the_file_after_what_was_written(loop, family, tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(hashlib.sha256(b"seed").digest() * (FILE_SIZE // 32) + b"tail!")
    if hasattr(loop, "_native_accepts"):
        from ringloop import _native_sendfile

        async def read_and_write(*args):
            raise AssertionError("in the clear the file must go by sendfile(2)")

        monkeypatch.setattr(_native_sendfile, "_read_and_write", read_and_write)
    factory, protos = collecting(lambda: SendsFile(path))

    async def main():
        server, addr = await serve(loop, family, factory)
        reader, writer = await _open(family, addr)
        got = await reader.read()
        result = await asyncio.wait_for(protos[0].result, LONG)
        await asyncio.wait_for(protos[0].lost, LONG)
        writer.close()
        server.close()
        await server.wait_closed()
        return got, result

    got, (sent, position, during) = run(loop, main())
    check_native(loop, protos[0].transport)
    want = path.read_bytes()[3 : FILE_SIZE - 7]
    assert sent == len(want) and position == FILE_SIZE - 7
    assert got[:4] == b"head" and hashlib.sha256(got[4:]).digest() == hashlib.sha256(want).digest()
    assert during == "unable to write; sendfile is in progress"


class _Tcp:
    name = "tcp"

    def listen_socket(self, backlog: int = 128) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
        sock.setblocking(False)
        return sock
