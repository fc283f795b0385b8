"""Stream transports under faults: resets, half-closes, aborts, refused connects, a slow
reader, a server closed under live clients, and an fd number reused while reads were in flight.

Linux facts these tests stand on:

* a TCP socket closed with ``SO_LINGER`` (on, 0 s) sends RST; a socket (TCP or Unix) closed
  while data it received is still unread resets the connection too. The peer's next receive
  fails with ``ECONNRESET``, so asyncio reports ``connection_lost(ConnectionResetError)`` and
  never ``eof_received``;
* connecting to a bound TCP port nobody listens on, or to a Unix socket path whose socket is
  not listening, fails at once with ``ECONNREFUSED``; a missing Unix path with ``ENOENT``;
* ``socket()`` returns the lowest free fd number, so a connection opened right after another
  one's socket was closed usually gets the same number: state keyed by fd (a pending read, a
  registered callback) that outlives the close would leak into the new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import pathlib
import socket
import subprocess
import sys

import pytest
from transport_helpers import (
    LONG,
    Recorder,
    fd_diff,
    fd_table,
    pattern,
    raw_peer,
    rss_bytes,
    run,
    set_rst_on_close,
    settle,
    transport_pair,
)

pytestmark = pytest.mark.timeout(120)


class Echo(Recorder):
    """Server side: echoes everything; the default eof_received (false) closes after the
    echo is flushed."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.transport.write(data)


def reset_peer(family, peer: socket.socket) -> None:
    """Close ``peer`` so that the connection is reset rather than shut down cleanly.

    TCP: SO_LINGER 0. Unix sockets have no RST, but Linux reports ECONNRESET to the other end
    when a socket is closed with unread data in its receive queue; the caller arranges that.
    """
    if family.name == "tcp":
        set_rst_on_close(peer)
    peer.close()


# -- resets ------------------------------------------------------------------------------------


def test_peer_reset_mid_read(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            payload = pattern(300_000)
            tr.write(b"left unread by the peer")  # makes the Unix close a reset as well
            await loop.sock_sendall(peer, payload)
            await proto.received(1)
            reset_peer(family, peer)
            exc = await proto.lost
            assert isinstance(exc, ConnectionResetError), repr(exc)
            assert tr.is_closing()
            # What arrived before the reset is a clean prefix; no EOF was reported.
            assert bytes(proto.data) == payload[: len(proto.data)]
            assert proto.compact() == ["made", "data", "lost"]
            await settle(loop)
            assert proto.lost_calls == 1 and proto.after_lost == []

    run(loop, main())


def test_peer_reset_while_writing(loop, family):
    """A reset that hits a transport with a full write buffer: connection_lost with the
    error (which of ECONNRESET/EPIPE the kernel reports first depends on whether the read or
    the write notices it first), the buffer is dropped, nothing after connection_lost."""

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.write(pattern(8 * 1024 * 1024))
            assert tr.get_write_buffer_size() > 0
            reset_peer(family, peer)  # the peer never read: unread data makes Unix reset too
            exc = await proto.lost
            assert isinstance(exc, (ConnectionResetError, BrokenPipeError)), repr(exc)
            assert tr.get_write_buffer_size() == 0
            tr.write(b"dropped")
            await settle(loop)
            assert proto.lost_calls == 1 and proto.after_lost == []
            assert "eof" not in proto.events

    run(loop, main())


# -- half-close --------------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["client", "server"])
def test_half_close_both_ways(loop, family, first):
    """Each side shuts its write half in turn; both transports stay open (eof_received
    returns True) until each is closed explicitly, and everything written arrives."""

    async def main():
        client = Recorder(eof_keep_open=True)
        server = Recorder(eof_keep_open=True)
        async with transport_pair(loop, family, client, server) as p:
            a_tr, a, b_tr, b = (
                (p.client_tr, client, p.server_tr, server)
                if first == "client"
                else (p.server_tr, server, p.client_tr, client)
            )
            a_tr.write(b"from a")
            a_tr.write_eof()
            await b.eof
            assert bytes(b.data) == b"from a"
            assert not a_tr.is_closing() and not b_tr.is_closing()
            # The side that got EOF still writes; the side that sent EOF still reads.
            b_tr.write(b"from b")
            b_tr.write_eof()
            await a.eof
            assert bytes(a.data) == b"from b"
            await settle(loop)
            assert not a_tr.is_closing() and not b_tr.is_closing()
            assert not a.lost.done() and not b.lost.done()
            a_tr.close()
            b_tr.close()
            assert await a.lost is None
            assert await b.lost is None
            for proto in (a, b):
                assert proto.compact() == ["made", "data", "eof", "lost"]

    run(loop, main())


# -- abort mid-write -----------------------------------------------------------------------------


def test_abort_mid_write_with_traffic_both_ways(loop, family):
    """abort() with a large pending buffer while the peer keeps sending: connection_lost(None)
    once, on a later iteration, and no callback at all after it (no data_received for what
    the peer still sends, no resume_writing for the dropped buffer)."""

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.write(pattern(16 * 1024 * 1024))
            assert proto.pauses == 1
            await loop.sock_sendall(peer, b"incoming" * 1000)
            await proto.received(8000)

            async def keep_sending():
                try:
                    while True:
                        await loop.sock_sendall(peer, b"more" * 4096)
                except (ConnectionResetError, BrokenPipeError):
                    pass

            sender = loop.create_task(keep_sending())
            await settle(loop)
            events_before = list(proto.events)
            tr.abort()
            assert tr.is_closing() and tr.get_write_buffer_size() == 0
            assert proto.lost_calls == 0
            assert await proto.lost is None
            await asyncio.wait_for(sender, LONG)  # the peer notices the reset
            await settle(loop)
            assert proto.events == events_before + ["lost"]
            assert proto.after_lost == []

    run(loop, main())


# -- refused connections -------------------------------------------------------------------------


def test_connection_refused(loop, family):
    async def main():
        with socket.socket(family.af, socket.SOCK_STREAM) as bound:
            bound.bind(family.new_address())  # bound, never listening
            addr = bound.getsockname()
            gc.collect()  # sockets of earlier tests waiting for the collector close now
            fds = fd_table()
            with pytest.raises(ConnectionRefusedError):
                await family.create_connection(loop, Recorder, addr)
            with pytest.raises(ConnectionRefusedError):
                await family.open_connection(addr)
            if family.name == "unix":
                with pytest.raises(FileNotFoundError):
                    await family.create_connection(loop, Recorder, family.new_address())
            after = fd_table()
            # A refused connect must close the socket it made.
            assert after == fds, fd_diff(fds, after)

    run(loop, main())


# -- slow reader: flow control keeps memory bounded ----------------------------------------------


class Pump(asyncio.Protocol):
    """Server side: writes ``total`` bytes in ``chunk``-sized writes, honouring
    pause_writing/resume_writing, recording the largest write buffer and RSS it ever saw."""

    def __init__(self, total: int, chunk: int) -> None:
        self.total, self.chunk = total, chunk
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.pauses = self.resumes = 0
        self.max_buffer = 0
        self.max_rss = 0
        self.sha = hashlib.sha256()
        self.first_pause = asyncio.get_running_loop().create_future()
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        base = pattern(self.chunk)
        for i in range(self.total // self.chunk):
            await self.can_write.wait()
            chunk = i.to_bytes(8, "big") + base[8:]
            self.sha.update(chunk)
            self.transport.write(chunk)
            self.max_buffer = max(self.max_buffer, self.transport.get_write_buffer_size())
            if i % 16 == 0:
                self.max_rss = max(self.max_rss, rss_bytes())
        self.transport.close()

    def pause_writing(self) -> None:
        self.pauses += 1
        self.can_write.clear()
        if not self.first_pause.done():
            self.first_pause.set_result(None)

    def resume_writing(self) -> None:
        self.resumes += 1
        self.can_write.set()

    def connection_lost(self, exc) -> None:
        self.done.set_result(exc)


class SlowReader(asyncio.BufferedProtocol):
    """Client side: reads through a 16 KiB buffer (many small reads), and not at all until
    ``start`` resolves."""

    def __init__(self) -> None:
        self.buf = bytearray(16 * 1024)
        self.received = 0
        self.sha = hashlib.sha256()
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.pause_reading()

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.received += nbytes
        self.sha.update(memoryview(self.buf)[:nbytes])

    def connection_lost(self, exc) -> None:
        self.lost.set_result(exc)


def test_slow_reader_64mib_memory_bounded(loop, family):
    total, chunk = 64 * 1024 * 1024, 256 * 1024
    high = 64 * 1024  # asyncio's default high-water mark, left as is

    async def main():
        accepted = loop.create_future()

        def factory():
            pump = Pump(total, chunk)
            accepted.set_result(pump)  # a second connection would raise here: one only
            return pump

        server, addr = await family.create_server(loop, factory)
        rss_before = rss_bytes()
        async with server:
            reader = SlowReader()
            tr, _ = await family.create_connection(loop, lambda: reader, addr)
            pump = await accepted
            # The client has not read a byte: the pump must hit the high-water mark.
            await pump.first_pause
            assert not pump.task.done()
            tr.resume_reading()
            assert await reader.lost is None
            assert await pump.done is None
            await pump.task
        grown = pump.max_rss - rss_before
        print(
            f"slow reader: {pump.pauses} pauses, max buffer {pump.max_buffer}, "
            f"RSS +{grown / 2**20:.1f} MiB"
        )
        assert reader.received == total
        assert reader.sha.digest() == pump.sha.digest()
        assert pump.pauses >= 1 and pump.resumes == pump.pauses
        # Bounded: the transport never held more than the mark plus the write that crossed it.
        assert pump.max_buffer <= high + chunk, pump.max_buffer
        # And nothing else held the data either (64 MiB went through).
        assert grown < 24 * 1024 * 1024, f"RSS grew by {grown / 2**20:.1f} MiB"

    run(loop, main(), timeout=90)


# -- Server.close with live clients --------------------------------------------------------------


def test_server_close_with_live_clients(loop, family):
    """Server.close() stops listening and leaves accepted connections alone; they keep
    working until closed. wait_closed(): on 3.11 it returns at once after close(); from 3.12
    on it waits until every accepted connection is gone."""

    async def main():
        echoes: list[Echo] = []

        def factory():
            echoes.append(Echo())
            return echoes[-1]

        server, addr = await family.create_server(loop, factory)
        clients = []
        for i in range(3):
            client = Recorder()
            tr, _ = await family.create_connection(loop, lambda c=client: c, addr)
            tr.write(b"hello %d" % i)
            await client.received(7)
            clients.append((tr, client))

        server.close()
        assert not server.is_serving()
        assert not server.sockets
        refused = (ConnectionRefusedError, FileNotFoundError)  # 3.13 unlinks the Unix path
        with pytest.raises(refused if family.name == "unix" else ConnectionRefusedError):
            await family.create_connection(loop, Recorder, addr)
        waiter = loop.create_task(server.wait_closed())
        if sys.version_info >= (3, 12):
            await settle(loop)
            assert not waiter.done(), "wait_closed() returned with live connections"
        else:
            await waiter  # 3.11: does not wait for accepted connections

        for i, (tr, client) in enumerate(clients):
            tr.write(b"|still %d" % i)
            expected = b"hello %d|still %d" % (i, i)
            await client.received(len(expected))
            assert bytes(client.data) == expected
        for tr, client in clients:
            tr.close()
            assert await client.lost is None
        for echo in echoes:
            assert await echo.lost is None
        await waiter
        assert len(echoes) == 3

    run(loop, main())


@pytest.mark.skipif(
    not hasattr(asyncio.Server, "close_clients"), reason="Server.close_clients is 3.13+"
)
@pytest.mark.parametrize("how", ["close_clients", "abort_clients"])
def test_server_close_or_abort_clients(loop, family, how):
    async def main():
        echo = Echo()
        server, addr = await family.create_server(loop, lambda: echo)
        client = Recorder()
        await family.create_connection(loop, lambda: client, addr)
        await echo.made
        server.close()
        getattr(server, how)()
        exc = await client.lost
        assert exc is None or isinstance(exc, ConnectionResetError), repr(exc)
        assert await echo.lost is None
        await server.wait_closed()

    run(loop, main())


# -- an fd closed and reused while reads were in flight -----------------------------------------


@contextlib.contextmanager
def tag_server(family):
    """Run tag_server.py in its own process (see its docstring for why); yield its address."""
    args = [sys.executable, str(pathlib.Path(__file__).with_name("tag_server.py")), family.name]
    if family.name == "unix":
        args.append(family.new_address())
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line, "tag_server.py did not start"
        yield (line[0], int(line[1])) if family.name == "tcp" else line[0]
    finally:
        proc.stdin.close()
        proc.wait(LONG)
        proc.stdout.close()


def test_fd_reuse_after_close_with_reads_in_flight(loop, loop_kind, family):
    """Connection A is closed (or aborted) while its peer streams data at it, so reads are
    in flight; connection B is opened right after A's connection_lost and normally gets A's
    fd number. B must only ever see its own peer's bytes (each peer streams a distinct tag
    byte), and A must get no callback after connection_lost. Whether the fd was reused is
    printed; on the oracle it must be, or the test would not test anything."""
    rounds = 16

    class TagReader(Recorder):
        """Counts the bytes that are not its own peer's tag (keeping no data: on a fast
        loop a stream can deliver many megabytes before the test task runs again)."""

        def __init__(self, tag: bytes) -> None:
            super().__init__(keep_data=False)
            self.tag = tag
            self.foreign = 0

        def data_received(self, data: bytes) -> None:
            self.foreign += len(data) - data.count(self.tag)
            super().data_received(data)

    async def connect(addr, tag: bytes):
        proto = TagReader(tag)
        tr, _ = await family.create_connection(loop, lambda: proto, addr)
        tr.write(tag)
        await proto.received(100_000)  # the stream is flowing: reads are in flight
        return tr, proto

    async def main():
        # Garbage of earlier tests (a socket or loop in a reference cycle) must not be
        # collected mid-test: its fd would be the lowest free one and B would take it.
        gc.collect()
        reused = 0
        seen: list[TagReader] = []
        with tag_server(family) as addr:
            for r in range(rounds):
                tag_a, tag_b = bytes([2 * r + 1]), bytes([2 * r + 2])
                tr_a, a = await connect(addr, tag_a)
                fd_a = tr_a.get_extra_info("socket").fileno()
                # Close while the peer is still sending (abort on odd rounds).
                if r % 2:
                    tr_a.abort()
                else:
                    tr_a.close()
                assert await a.lost is None
                # Right after A's socket is closed: B's socket takes the lowest free fd.
                tr_b, b = await connect(addr, tag_b)
                reused += tr_b.get_extra_info("socket").fileno() == fd_a
                await b.received(300_000)
                seen += [a, b]
                tr_b.close()
                assert await b.lost is None
            await settle(loop)
        for proto in seen:
            assert proto.foreign == 0, f"{proto.foreign} foreign bytes on tag {proto.tag}"
            assert proto.after_lost == [] and proto.lost_calls == 1
        print(f"{loop_kind}/{family.name}: fd reused in {reused}/{rounds} rounds")
        if loop_kind == "asyncio":
            # Validates the setup: on the oracle the fd is reused right away (all but a
            # stray round where the collector frees a lower fd of this test's own garbage).
            assert reused >= rounds - 2, f"fd reused in only {reused}/{rounds} rounds"

    run(loop, main())
