"""The stream transport API (TCP and Unix sockets), pinned to what asyncio's selector
transports do on this Python, on the oracle and both ringloop backends.

Every test runs over TCP and over a Unix socket (``family``). Most use a *plain-socket peer*
(``raw_peer``) driven through the loop's ``sock_*`` coroutines, so what the peer sees does not
depend on the transport under test; a few connect two transports of the loop to each other.

What is pinned here (asyncio 3.11 semantics, which native transports must keep):

* ``write``/``writelines`` take bytes, bytearray and memoryview (a snapshot: mutating the
  buffer after ``write`` returns changes nothing), ignore empty data, and refuse anything else
  with stock asyncio's ``TypeError`` of the running Python ("data argument must be a
  bytes-like object, not '<type>'" before 3.14); a ``writelines`` that fails sends nothing;
  ``writelines(None)`` or of an empty list does nothing (3.12+), and from 3.14 a falsy item
  (None) is skipped, as stock asyncio does;
* ``write_eof()`` sends FIN after everything already buffered; later writes raise
  ``RuntimeError``; the transport stays open for reading;
* ``close()`` flushes the buffer, then reports ``connection_lost(None)`` once; ``abort()``
  drops the buffer; neither calls ``connection_lost`` synchronously, and after either no
  ``data_received`` is delivered;
* ``pause_reading``/``resume_reading`` are idempotent and hold data back while paused;
* write-buffer limits default to (16 KiB, 64 KiB) and refuse low > high with ``ValueError``;
  ``pause_writing`` runs inside the ``write()`` (or ``set_write_buffer_limits()``) that takes
  the buffer above the high mark, ``resume_writing`` once it has drained to the low mark;
* ``get_extra_info`` keys, TCP_NODELAY on TCP, BufferedProtocol with tiny buffers,
  ``set_protocol``, the order of the protocol callbacks, and exceptions raised by protocol
  callbacks (reported to the loop's exception handler, then the transport is closed with
  that exception).
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import sys

import pytest
from transport_helpers import (
    DEFAULT_LIMITS,
    Recorder,
    fill_write_buffer,
    pattern,
    raw_peer,
    recv_exactly,
    recv_until_eof,
    run,
    settle,
    transport_pair,
)

pytestmark = pytest.mark.timeout(90)


# -- write / writelines --------------------------------------------------------------------------


def test_write_accepts_bytes_like_and_ignores_empty(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.write(b"ab")
            tr.write(bytearray(b"cd"))
            tr.write(memoryview(b"-ef-")[1:3])
            tr.write(b"")
            tr.write(bytearray())
            tr.write(memoryview(b""))
            tr.writelines([b"gh", bytearray(b"ij"), memoryview(b"kl")])
            tr.writelines([])
            tr.writelines([b"", b""])
            tr.writelines(iter([b"mn"]))
            tr.writelines(bytes([c]) for c in b"op")
            tr.write_eof()
            assert await recv_until_eof(loop, peer) == b"abcdefghijklmnop"
            assert tr.get_write_buffer_size() == 0
            assert proto.compact() == ["made"]

    run(loop, main())


@pytest.mark.skip_kinds(
    "asyncio",
    condition=sys.version_info >= (3, 12),
    reason="CPython 3.12+'s selector transport queues the caller's bytearray uncopied",
)
def test_write_takes_a_snapshot_of_mutable_buffers(loop, family):
    """Data that cannot be sent at once is buffered *by value*: mutating the caller's
    bytearray afterwards must not change what the peer receives."""

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=1 << 30)  # no pause_writing noise
            written = await fill_write_buffer(tr)
            ba = bytearray(b"original")
            tr.write(ba)
            ba[:] = b"MUTATED!"
            mv_src = bytearray(b"second")
            tr.write(memoryview(mv_src))
            mv_src[:] = b"XXXXXX"
            tr.writelines([bytearray(b"third")])
            tr.write_eof()
            got = await recv_until_eof(loop, peer)
            assert len(got) == written + len(b"originalsecondthird")
            assert got.endswith(b"originalsecondthird")

    run(loop, main())


def _stock_rejection(bad) -> tuple[str, bool]:
    """What stock asyncio's selector transport on this Python does with `bad`: the message of
    `write(bad)`'s TypeError, and whether `writelines([b"x", bad])` raises (3.14 skips a falsy
    item such as None instead)."""
    loop = asyncio.SelectorEventLoop(selectors.EpollSelector())
    a, b = socket.socketpair()
    try:
        tr, _ = loop.run_until_complete(loop.create_connection(asyncio.Protocol, sock=a))
        with pytest.raises(TypeError) as info:
            tr.write(bad)
        try:
            tr.writelines([b"x", bad])
            writelines_raises = False
        except TypeError:
            writelines_raises = True
        tr.abort()
        loop.run_until_complete(asyncio.sleep(0))
        return str(info.value), writelines_raises
    finally:
        b.close()
        loop.close()


def test_writelines_of_nothing_is_a_no_op(loop, family):
    # From 3.12 asyncio returns at once for a falsy argument, None included, but only after
    # its write_eof check; 3.11's writelines is b"".join, which refuses None.
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            if sys.version_info >= (3, 12):
                tr.writelines(None)
            else:
                with pytest.raises(TypeError):
                    tr.writelines(None)
            tr.writelines([])
            tr.write(b"only")
            tr.write_eof()
            if sys.version_info >= (3, 12):
                with pytest.raises(RuntimeError, match="after write_eof"):
                    tr.writelines(None)
            assert await recv_until_eof(loop, peer) == b"only"

    run(loop, main())


@pytest.mark.parametrize(
    "bad, type_name",
    [("text", "str"), (42, "int"), (None, "NoneType"), ([b"x"], "list")],
    ids=["str", "int", "None", "list"],
)
def test_write_rejects_non_bytes(loop, family, bad, type_name):
    # The oracle is stock asyncio on the running Python: its message moved in 3.14, and its
    # writelines() skips a falsy item such as None there. ringloop does the same on each.
    if (
        sys.version_info >= (3, 15)
        and bad is not None
        and isinstance(loop, asyncio.SelectorEventLoop)
    ):
        pytest.xfail(
            "CPython 3.15's writelines buffers the items before a bad one, then raises: they"
            " stay queued with no writer registered (a reference defect; ringloop keeps"
            " writelines all or nothing)"
        )
    message, writelines_raises = _stock_rejection(bad)
    assert f"not {type_name!r}" in message

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            with pytest.raises(TypeError) as info:
                tr.write(bad)
            assert str(info.value) == message
            if writelines_raises:
                # writelines() is all or nothing: the good item before the bad one is not sent.
                with pytest.raises(TypeError):
                    tr.writelines([b"never", bad])
                expected = b"after"
            else:
                tr.writelines([b"skips ", bad])
                expected = b"skips after"
            assert not tr.is_closing()
            tr.write(b"after")
            tr.write_eof()
            assert await recv_until_eof(loop, peer) == expected

    run(loop, main())


# -- write_eof -----------------------------------------------------------------------------------


def test_write_eof_half_closes(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            assert tr.can_write_eof() is True
            tr.write(b"request")
            tr.write_eof()
            assert not tr.is_closing()
            assert await recv_until_eof(loop, peer) == b"request"
            with pytest.raises(RuntimeError, match="write_eof"):
                tr.write(b"more")
            with pytest.raises(RuntimeError, match="write_eof"):
                tr.writelines([b"more"])
            tr.write_eof()  # a second write_eof is a no-op
            # Still open for reading: the peer answers, then closes its side.
            await loop.sock_sendall(peer, b"reply")
            await proto.received(5)
            peer.shutdown(socket.SHUT_WR)
            assert await proto.lost is None
            assert bytes(proto.data) == b"reply"
            assert proto.compact() == ["made", "data", "eof", "lost"]
            assert tr.is_closing()

    run(loop, main())


def test_write_eof_waits_for_the_buffer(loop, family):
    """FIN goes out after everything already buffered, not at the time of the call."""

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=1 << 30)
            written = await fill_write_buffer(tr)
            tr.write(b"<tail>")
            tr.write_eof()
            assert tr.get_write_buffer_size() > 0
            assert not tr.is_closing()
            got = await recv_until_eof(loop, peer)
            assert len(got) == written + 6 and got.endswith(b"<tail>")
            assert tr.get_write_buffer_size() == 0
            assert not proto.lost.done()

    run(loop, main())


# -- close / abort / is_closing ------------------------------------------------------------------


def test_close_idle_transport(loop, loop_kind, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            assert not tr.is_closing()
            tr.close()
            assert tr.is_closing()
            # connection_lost is never called from inside close() itself.
            assert proto.lost_calls == 0
            tr.close()
            assert await proto.lost is None
            assert await recv_until_eof(loop, peer) == b""
            await settle(loop)
            assert proto.lost_calls == 1
            assert proto.events == ["made", "lost"]
            # Writing to a closed transport is silently dropped, not an error.
            tr.write(b"dropped")
            if loop_kind != "asyncio" or sys.version_info < (3, 12):
                # CPython 3.12+'s writelines on a closed transport raises TypeError (a bug).
                tr.writelines([b"dropped"])
            assert proto.after_lost == []

    run(loop, main())


def test_close_flushes_pending_data_before_connection_lost(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=1 << 30)
            payload = pattern(4 * 1024 * 1024)
            tr.write(payload)
            assert tr.get_write_buffer_size() > 0, "expected the kernel to take only part"
            tr.close()
            assert tr.is_closing()
            await settle(loop)
            # The peer reads nothing yet, so the buffer cannot drain: not lost yet.
            assert tr.get_write_buffer_size() > 0
            assert proto.lost_calls == 0
            assert await recv_until_eof(loop, peer) == payload
            assert await proto.lost is None
            await settle(loop)
            assert proto.lost_calls == 1
            assert proto.events == ["made", "lost"]

    run(loop, main())


def test_no_data_received_after_close(loop, family):
    """close() stops reading at once, even while the buffer is still being flushed."""

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=1 << 30)
            payload = pattern(4 * 1024 * 1024)
            tr.write(payload)
            assert tr.get_write_buffer_size() > 0
            tr.close()
            await loop.sock_sendall(peer, b"ignored")
            await settle(loop)
            assert proto.events == ["made"]
            # The transport closes its socket with b"ignored" unread, so the kernel may answer
            # with RST and the peer may lose the tail: only a prefix is guaranteed.
            got = bytearray()
            try:
                while chunk := await loop.sock_recv(peer, 256 * 1024):
                    got += chunk
            except ConnectionResetError:
                pass
            assert got == payload[: len(got)]
            assert await proto.lost is None
            await settle(loop)
            assert proto.events == ["made", "lost"]

    run(loop, main())


def test_abort_drops_the_buffer(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            payload = pattern(16 * 1024 * 1024)
            tr.write(payload)
            assert tr.get_write_buffer_size() > 0
            assert proto.pauses == 1
            tr.abort()
            assert tr.is_closing()
            assert tr.get_write_buffer_size() == 0
            assert proto.lost_calls == 0, "abort() must not call connection_lost synchronously"
            assert await proto.lost is None
            tr.write(b"dropped")  # after abort: silently dropped
            try:
                got = await recv_until_eof(loop, peer)
            except ConnectionResetError:
                got = None
            if got is not None:
                # What the kernel had already taken arrives; the transport's buffer does not.
                assert len(got) < len(payload)
                assert got == payload[: len(got)]
            await settle(loop)
            assert proto.lost_calls == 1
            # No resume_writing for a buffer that was dropped, nothing after connection_lost.
            assert proto.events == ["made", "pause", "lost"]

    run(loop, main())


def test_peer_eof_closes_transport_unless_kept_open(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"bye")
            peer.shutdown(socket.SHUT_WR)
            await proto.eof
            # eof_received returned a false value: the transport closes itself.
            assert await proto.lost is None
            assert tr.is_closing()
            assert proto.compact() == ["made", "data", "eof", "lost"]
            assert bytes(proto.data) == b"bye"
            assert await recv_until_eof(loop, peer) == b""

    run(loop, main())


def test_eof_received_true_keeps_the_write_half_open(loop, family):
    async def main():
        proto = Recorder(eof_keep_open=True)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"question")
            peer.shutdown(socket.SHUT_WR)
            await proto.eof
            await settle(loop)
            assert not tr.is_closing()
            assert not proto.lost.done()
            # The half-open transport still delivers writes to the peer.
            tr.write(b"answer")
            assert await recv_exactly(loop, peer, 6) == b"answer"
            tr.write(b" and more")
            tr.close()
            assert await recv_until_eof(loop, peer) == b" and more"
            assert await proto.lost is None
            assert proto.compact() == ["made", "data", "eof", "lost"]
            assert bytes(proto.data) == b"question"

    run(loop, main())


# -- pause_reading / resume_reading --------------------------------------------------------------


def test_pause_and_resume_reading(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            await proto.made
            assert tr.is_reading()
            tr.pause_reading()
            assert not tr.is_reading()
            tr.pause_reading()  # idempotent
            assert not tr.is_reading()
            await loop.sock_sendall(peer, b"sent while paused")
            await settle(loop, rounds=5)
            assert proto.events == ["made"], "data_received while reading was paused"
            tr.resume_reading()
            assert tr.is_reading()
            tr.resume_reading()  # idempotent
            await proto.received(17)
            assert bytes(proto.data) == b"sent while paused"

            # Pause again mid-stream: what arrives meanwhile comes after resume, in order.
            tr.pause_reading()
            await loop.sock_sendall(peer, b"|second")
            await settle(loop)
            assert len(proto.data) == 17
            tr.resume_reading()
            await proto.received(24)
            assert bytes(proto.data) == b"sent while paused|second"

            tr.close()
            assert not tr.is_reading()
            tr.pause_reading()  # no-ops on a closing transport, not errors
            tr.resume_reading()
            assert not tr.is_reading()
            await proto.lost

    run(loop, main())


def test_pause_reading_holds_back_eof(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            await proto.made
            tr.pause_reading()
            await loop.sock_sendall(peer, b"last words")
            peer.shutdown(socket.SHUT_WR)
            await settle(loop, rounds=5)
            assert proto.events == ["made"]
            assert not tr.is_closing()
            tr.resume_reading()
            assert await proto.lost is None
            assert proto.compact() == ["made", "data", "eof", "lost"]
            assert bytes(proto.data) == b"last words"

    run(loop, main())


# -- write buffer limits and flow control -------------------------------------------------------


def test_write_buffer_limits(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            assert tr.get_write_buffer_limits() == DEFAULT_LIMITS
            assert tr.get_write_buffer_size() == 0
            tr.set_write_buffer_limits(high=100)
            assert tr.get_write_buffer_limits() == (25, 100)
            tr.set_write_buffer_limits(low=10)
            assert tr.get_write_buffer_limits() == (10, 40)
            tr.set_write_buffer_limits(high=50, low=50)
            assert tr.get_write_buffer_limits() == (50, 50)
            tr.set_write_buffer_limits(high=0)
            assert tr.get_write_buffer_limits() == (0, 0)
            tr.set_write_buffer_limits()
            assert tr.get_write_buffer_limits() == DEFAULT_LIMITS
            for bad in ({"high": 10, "low": 20}, {"low": -1}, {"high": -1}):
                with pytest.raises(ValueError, match="must be >="):
                    tr.set_write_buffer_limits(**bad)
                # A refused call leaves the limits alone.
                assert tr.get_write_buffer_limits() == DEFAULT_LIMITS
            assert proto.pauses == 0

    run(loop, main())


def test_flow_control_against_a_peer_that_does_not_read(loop, family):
    high, low, chunk_size = 64 * 1024, 16 * 1024, 16 * 1024

    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=high, low=low)
            chunks = []
            i = 0
            while not proto.pauses:
                chunk = pattern(chunk_size, seed=i)
                chunks.append(chunk)
                tr.write(chunk)
                i += 1
                size = tr.get_write_buffer_size()
                # pause_writing runs inside write(), exactly when the buffer crosses `high`.
                assert proto.pauses == (1 if size > high else 0), (size, proto.pauses)
                assert i < 100_000, "writer never paused"
                if size == 0:
                    await asyncio.sleep(0)  # let the kernel buffers fill for real
            assert high < proto.size_at_pause[0] <= high + chunk_size
            await settle(loop)
            assert proto.resumes == 0, "resume_writing while the peer has not read anything"
            assert high < tr.get_write_buffer_size() <= high + chunk_size

            proto.resumed = loop.create_future()
            expected = b"".join(chunks)
            reader = loop.create_task(recv_exactly(loop, peer, len(expected)))
            await proto.resumed
            assert proto.size_at_resume == [proto.size_at_resume[0]]
            assert proto.size_at_resume[0] <= low
            assert await reader == expected
            assert proto.events == ["made", "pause", "resume"]

    run(loop, main())


def test_lowering_the_high_water_mark_pauses_at_once(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            tr.set_write_buffer_limits(high=1 << 30)
            written = await fill_write_buffer(tr)
            size = tr.get_write_buffer_size()
            assert proto.pauses == 0
            # The new mark is below what is buffered: pause_writing runs inside the call.
            tr.set_write_buffer_limits(high=size - 1, low=0)
            assert proto.pauses == 1
            assert proto.size_at_pause == [size]
            proto.resumed = loop.create_future()
            reader = loop.create_task(recv_exactly(loop, peer, written))
            await proto.resumed
            assert proto.size_at_resume == [0]
            assert len(await reader) == written

    run(loop, main())


# -- get_extra_info ------------------------------------------------------------------------------


def test_repr_shows_the_reading_state(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            await proto.made
            assert "read=polling" in repr(tr)
            assert "write=<idle, bufsize=0>" in repr(tr)
            tr.pause_reading()
            assert "read=idle" in repr(tr)
            tr.resume_reading()
            assert "read=polling" in repr(tr)
            tr.close()
            await proto.lost
            assert "closed" in repr(tr)

    run(loop, main())


def test_get_extra_info(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            sock = tr.get_extra_info("socket")
            assert isinstance(sock, asyncio.trsock.TransportSocket)
            assert sock.family == family.af
            assert sock.type == socket.SOCK_STREAM
            assert sock.fileno() >= 0
            assert tr.get_extra_info("sockname") == sock.getsockname() == peer.getpeername()
            assert tr.get_extra_info("peername") == sock.getpeername() == peer.getsockname()
            if family.name == "tcp":
                assert tr.get_extra_info("peername")[0] == "127.0.0.1"
                # asyncio turns Nagle off on every TCP transport: small writes go out at once.
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            else:
                assert tr.get_extra_info("sockname") == ""  # the client is not bound
            assert tr.get_extra_info("no such key") is None
            assert tr.get_extra_info("no such key", "dflt") == "dflt"
            assert tr.get_extra_info("sslcontext") is None
            names = tr.get_extra_info("sockname"), tr.get_extra_info("peername")
            tr.close()
            await proto.lost
            # The addresses are cached: still answered after the socket is closed.
            assert (tr.get_extra_info("sockname"), tr.get_extra_info("peername")) == names

    run(loop, main())


def test_get_extra_info_server_side(loop, family):
    async def main():
        async with transport_pair(loop, family) as p:
            server_sock = p.server_tr.get_extra_info("socket")
            assert server_sock.type == socket.SOCK_STREAM
            assert p.server_tr.get_extra_info("peername") == p.client_tr.get_extra_info("sockname")
            assert p.server_tr.get_extra_info("sockname") == p.client_tr.get_extra_info("peername")
            if family.name == "tcp":
                assert server_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0

    run(loop, main())


# -- BufferedProtocol ----------------------------------------------------------------------------


class SmallBuffers(asyncio.BufferedProtocol):
    """Hands out tiny buffers: a fixed 7-byte one, or (``slices``) consecutive memoryview
    slices of one big bytearray with sizes cycling 1..13, so data must land exactly in the
    buffer handed out, at the right place."""

    def __init__(self, total: int, *, slices: bool, eof_keep_open: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self.slices = slices
        self.eof_keep_open = eof_keep_open
        self.small = bytearray(7)
        self.big = bytearray(total + 16)
        self.pos = 0
        self.calls = 0
        self.current = None
        self.events: list[str] = []
        self.bad_sizes: list[int] = []
        self.eof = loop.create_future()
        self.lost = loop.create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")

    def get_buffer(self, sizehint: int):
        self.calls += 1
        if self.slices:
            size = 1 + self.calls % 13
            self.current = memoryview(self.big)[self.pos : self.pos + size]
        else:
            self.current = self.small
        return self.current

    def buffer_updated(self, nbytes: int) -> None:
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        if not 0 < nbytes <= len(self.current):
            self.bad_sizes.append(nbytes)
        if not self.slices:
            self.big[self.pos : self.pos + nbytes] = self.small[:nbytes]
        self.pos += nbytes

    def eof_received(self):
        self.events.append("eof")
        self.eof.set_result(None)
        return self.eof_keep_open

    def connection_lost(self, exc) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)

    @property
    def data(self) -> bytes:
        return bytes(self.big[: self.pos])


@pytest.mark.parametrize("slices", [False, True], ids=["fixed7", "slices"])
def test_buffered_protocol_small_buffers(loop, family, slices):
    async def main():
        payload = pattern(200_000, seed=7)
        proto = SmallBuffers(len(payload), slices=slices)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, payload)
            peer.shutdown(socket.SHUT_WR)
            assert await proto.lost is None
            assert proto.bad_sizes == []
            assert proto.data == payload
            assert proto.calls >= len(payload) // 13
            assert proto.events == ["made", "data", "eof", "lost"]

    run(loop, main())


class PausingBuffered(SmallBuffers):
    """Hands out 4 KiB slices and pauses reading inside the ``buffer_updated`` that reaches
    ``pause_at`` bytes: what the transport had already read must wait, in order, for
    ``resume_reading``."""

    def __init__(self, total: int, pause_at: int) -> None:
        super().__init__(total, slices=False)
        self.pause_at = pause_at
        self.paused_at: int | None = None

    def get_buffer(self, sizehint: int):
        self.calls += 1
        self.current = memoryview(self.big)[self.pos : self.pos + 4096]
        return self.current

    def buffer_updated(self, nbytes: int) -> None:
        if self.events[-1] != "data":
            self.events.append("data")
        self.pos += nbytes
        if self.paused_at is None and self.pos >= self.pause_at:
            self.paused_at = self.pos
            self.transport.pause_reading()


def test_buffered_protocol_pause_inside_buffer_updated_keeps_the_rest(loop, family):
    async def main():
        payload = pattern(600_000, seed=3)
        proto = PausingBuffered(len(payload), pause_at=50_000)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            # More than the socket buffers hold while paused: the send finishes after resume.
            sender = asyncio.ensure_future(loop.sock_sendall(peer, payload))
            for _ in range(500):
                if proto.paused_at is not None:
                    break
                await asyncio.sleep(0.01)
            await settle(loop, rounds=10)
            assert proto.paused_at is not None
            assert proto.pos == proto.paused_at, "buffer_updated after pause_reading()"
            tr.resume_reading()
            await sender
            peer.shutdown(socket.SHUT_WR)
            assert await proto.lost is None
            assert proto.data == payload
            assert proto.events == ["made", "data", "eof", "lost"]

    run(loop, main())


@pytest.mark.parametrize("api", ["protocol", "buffered"])
def test_a_large_send_arrives_whole_without_more_traffic(loop, family, api):
    """Large reads may be held back an iteration while more of them arrives (io_uring); the
    last piece must still come without the peer sending anything else or closing."""

    async def main():
        payload = pattern(1_000_000, seed=11)
        proto = Recorder() if api == "protocol" else SmallBuffers(3 * len(payload), slices=False)
        if api == "buffered":
            proto.small = bytearray(256 * 1024)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            for _ in range(3):
                start = len(proto.data)
                await loop.sock_sendall(peer, payload)
                deadline = loop.time() + 10
                while len(proto.data) < start + len(payload) and loop.time() < deadline:
                    await asyncio.sleep(0.005)
                assert proto.data[start:] == payload
            tr.close()

    run(loop, main())


def test_buffered_protocol_eof_keep_open(loop, family):
    async def main():
        proto = SmallBuffers(100, slices=False, eof_keep_open=True)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"0123456789")
            peer.shutdown(socket.SHUT_WR)
            await proto.eof
            await settle(loop)
            assert not tr.is_closing()
            tr.write(b"still writable")
            tr.close()
            assert await recv_until_eof(loop, peer) == b"still writable"
            assert await proto.lost is None
            assert proto.data == b"0123456789"
            assert proto.events == ["made", "data", "eof", "lost"]

    run(loop, main())


def test_buffered_protocol_empty_buffer_is_fatal(loop, family, loop_errors):
    class EmptyBuffer(SmallBuffers):
        def get_buffer(self, sizehint):
            return bytearray()

    async def main():
        proto = EmptyBuffer(0, slices=False)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"data")
            exc = await proto.lost
            assert isinstance(exc, RuntimeError), exc
            assert tr.is_closing()
            assert [ctx["exception"] for ctx in loop_errors] == [exc]
            assert loop_errors[0]["transport"] is tr
            assert loop_errors[0]["protocol"] is proto
            loop_errors.clear()
            assert proto.events == ["made", "lost"]

    run(loop, main())


def test_set_protocol_switches_delivery(loop, family):
    """set_protocol() hands the transport to another protocol (what start_tls and protocol
    upgrades rely on): later data goes to the new one, through the new one's interface
    (here a Protocol is replaced by a BufferedProtocol); connection_made is not repeated."""

    async def main():
        async with raw_peer(loop, family) as (tr, first, peer):
            assert tr.get_protocol() is first
            await loop.sock_sendall(peer, b"to first")
            await first.received(8)
            second = SmallBuffers(100, slices=False)
            tr.set_protocol(second)
            assert tr.get_protocol() is second
            await loop.sock_sendall(peer, b"to second")
            peer.shutdown(socket.SHUT_WR)
            assert await second.lost is None
            assert second.data == b"to second"
            assert second.events == ["data", "eof", "lost"]
            assert first.events == ["made", "data"]
            assert bytes(first.data) == b"to first"

    run(loop, main())


# -- protocol callbacks: order, exceptions -------------------------------------------------------


def test_callback_order_client_side(loop, family):
    async def main():
        async with raw_peer(loop, family) as (tr, proto, peer):
            # connection_made has run, with this very transport, when create_connection returns.
            assert proto.events == ["made"]
            assert proto.made.result() is tr
            for part in (b"one ", b"two ", b"three"):
                await loop.sock_sendall(peer, part)
                await settle(loop, rounds=1)
            peer.shutdown(socket.SHUT_WR)
            assert await proto.lost is None
            assert bytes(proto.data) == b"one two three"
            assert proto.compact() == ["made", "data", "eof", "lost"]
            assert proto.lost_calls == 1

    run(loop, main())


def test_callback_order_both_ends_on_the_loop(loop, family):
    async def main():
        async with transport_pair(loop, family) as p:
            assert p.server.made.result() is p.server_tr
            p.client_tr.write(b"hello")
            p.client_tr.write_eof()
            await p.server.lost  # server: data, EOF -> closes itself (eof_received false)
            await p.client.lost  # client: sees the server's FIN -> closes itself too
            assert bytes(p.server.data) == b"hello"
            assert p.server.compact() == ["made", "data", "eof", "lost"]
            assert p.client.compact() == ["made", "eof", "lost"]

    run(loop, main())


class Boom(Exception):
    pass


class Raises(Recorder):
    """Raises ``Boom`` from the callback named ``where`` (the first time it runs)."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.raised: Boom | None = None

    def _maybe_raise(self, name: str) -> None:
        if name == self.where and self.raised is None:
            self.raised = Boom(name)
            raise self.raised

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._maybe_raise("data_received")

    def eof_received(self):
        super().eof_received()
        self._maybe_raise("eof_received")


@pytest.mark.parametrize("where", ["data_received", "eof_received"])
def test_protocol_exception_goes_to_handler_and_closes(loop, family, loop_errors, where):
    async def main():
        proto = Raises(where)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"first")
            if where == "eof_received":
                peer.shutdown(socket.SHUT_WR)
            exc = await proto.lost
            # connection_lost gets the very exception the callback raised ...
            assert exc is proto.raised and isinstance(exc, Boom)
            assert tr.is_closing()
            # ... after the loop's exception handler saw it, once, with the context.
            assert len(loop_errors) == 1
            ctx = loop_errors.pop()
            assert ctx["exception"] is exc
            assert where in ctx["message"]
            assert ctx["transport"] is tr
            assert ctx["protocol"] is proto
            # The transport is gone: the peer sees the connection closed, and data it sends
            # now reaches no callback.
            try:
                await loop.sock_sendall(peer, b"second")
                assert await recv_until_eof(loop, peer) == b""
            except (ConnectionResetError, BrokenPipeError):
                pass
            await settle(loop)
            assert proto.after_lost == []
            assert bytes(proto.data) == b"first"
            expected = ["made", "data", "lost"]
            if where == "eof_received":
                expected = ["made", "data", "eof", "lost"]
            assert proto.compact() == expected

    run(loop, main())


def test_buffered_protocol_exception_goes_to_handler_and_closes(loop, family, loop_errors):
    class RaisingBuffers(SmallBuffers):
        def buffer_updated(self, nbytes: int) -> None:
            super().buffer_updated(nbytes)
            self.raised = Boom("buffer_updated")
            raise self.raised

    async def main():
        proto = RaisingBuffers(100, slices=False)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            await loop.sock_sendall(peer, b"0123456789")
            exc = await proto.lost
            assert exc is proto.raised
            assert tr.is_closing()
            assert len(loop_errors) == 1
            ctx = loop_errors.pop()
            assert ctx["exception"] is exc and "buffer_updated" in ctx["message"]
            assert ctx["transport"] is tr and ctx["protocol"] is proto
            # One buffer_updated only: the transport stopped reading at the exception.
            assert proto.data == b"0123456"
            assert proto.events == ["made", "data", "lost"]

    run(loop, main())
