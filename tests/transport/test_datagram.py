"""UDP datagram transports (``create_datagram_endpoint``), pinned to asyncio's behaviour.

Linux and asyncio facts encoded here:

* datagram boundaries are kept and loopback neither drops nor reorders what fits in the
  receive buffer (these tests send a handful of small datagrams at a time);
* a *connected* UDP socket (``remote_addr=``) receives the ICMP port-unreachable answer to a
  datagram as ``ECONNREFUSED`` on a later socket call; asyncio hands it to
  ``error_received`` and keeps the endpoint open;
* a datagram above the IPv4 maximum (65,507 bytes of payload) fails with ``EMSGSIZE``: asyncio
  reports it to ``error_received``, the endpoint stays usable;
* ``sendto`` on a connected endpoint accepts ``addr`` None or the connected address and
  refuses any other with ``ValueError``; non-bytes data is a ``TypeError``;
* ``close()``/``abort()`` report ``connection_lost(None)`` on a later iteration; sends on a
  closed connected endpoint are dropped silently.
"""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest
from transport_helpers import DEFAULT_LIMITS, HOST, run, settle

pytestmark = pytest.mark.timeout(60)


class Datagrams(asyncio.DatagramProtocol):
    """Queues what it receives: (data, addr) for datagrams, (exc, None) for errors; logs
    callbacks so order and after-close silence can be checked."""

    def __init__(self, *, echo: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self.echo = echo
        self.got: asyncio.Queue = asyncio.Queue()
        self.events: list[str] = []
        self.lost = loop.create_future()
        self.lost_calls = 0
        self.transport = None

    def connection_made(self, transport) -> None:
        self.events.append("made")
        self.transport = transport

    def datagram_received(self, data, addr) -> None:
        self.events.append("datagram")
        if self.echo:
            self.transport.sendto(data.upper(), addr)
        self.got.put_nowait((data, addr))

    def error_received(self, exc) -> None:
        self.events.append("error")
        self.got.put_nowait((exc, None))

    def connection_lost(self, exc) -> None:
        self.events.append("lost")
        self.lost_calls += 1
        if not self.lost.done():
            self.lost.set_result(exc)


async def endpoint(loop, **kw):
    proto = Datagrams(echo=kw.pop("echo", False))
    tr, _ = await loop.create_datagram_endpoint(lambda: proto, **kw)
    return tr, proto


async def closed(tr, proto) -> None:
    tr.close()
    assert await proto.lost is None


def test_sendto_recvfrom_unconnected(loop):
    async def main():
        a_tr, a = await endpoint(loop, local_addr=(HOST, 0))
        b_tr, b = await endpoint(loop, local_addr=(HOST, 0))
        a_addr, b_addr = a_tr.get_extra_info("sockname"), b_tr.get_extra_info("sockname")
        assert a_tr.get_extra_info("peername") is None
        assert a.events == ["made"], "connection_made runs before the endpoint is returned"
        for data in (b"one", bytearray(b"two"), memoryview(b"-three-")[1:-1]):
            a_tr.sendto(data, b_addr)
        # Boundaries kept, order kept, the sender's address reported.
        for want in (b"one", b"two", b"three"):
            assert await b.got.get() == (want, a_addr)
        b_tr.sendto(b"reply", a_addr)
        assert await a.got.get() == (b"reply", b_addr)
        assert a_tr.get_write_buffer_size() == 0
        await closed(a_tr, a)
        await closed(b_tr, b)
        assert a.events == ["made", "datagram", "lost"]

    run(loop, main())


def test_sendto_connected_remote_addr(loop):
    async def main():
        srv_tr, srv = await endpoint(loop, local_addr=(HOST, 0), echo=True)
        srv_addr = srv_tr.get_extra_info("sockname")
        tr, proto = await endpoint(loop, remote_addr=srv_addr)
        assert tr.get_extra_info("peername") == srv_addr
        sock = tr.get_extra_info("socket")
        assert sock.type == socket.SOCK_DGRAM and sock.family == socket.AF_INET
        assert tr.get_extra_info("sockname") == sock.getsockname()
        assert tr.get_extra_info("no such key", "dflt") == "dflt"
        tr.sendto(b"implicit")
        tr.sendto(b"explicit", srv_addr)
        assert await proto.got.get() == (b"IMPLICIT", srv_addr)
        assert await proto.got.get() == (b"EXPLICIT", srv_addr)
        with pytest.raises(ValueError):
            tr.sendto(b"elsewhere", (HOST, srv_addr[1] + 1 if srv_addr[1] < 65535 else 1))
        assert not tr.is_closing()
        await closed(tr, proto)
        await closed(srv_tr, srv)

    run(loop, main())


@pytest.mark.parametrize(
    "bad, type_name", [("text", "str"), (7, "int"), (None, "NoneType")], ids=["str", "int", "None"]
)
def test_sendto_rejects_non_bytes(loop, bad, type_name):
    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        with pytest.raises(TypeError) as info:
            tr.sendto(bad, tr.get_extra_info("sockname"))
        assert str(info.value) == f"data argument must be a bytes-like object, not {type_name!r}"
        assert not tr.is_closing()
        await closed(tr, proto)

    run(loop, main())


def test_connected_peer_gone_reports_error_received(loop):
    async def main():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
            gone.bind((HOST, 0))
            addr = gone.getsockname()
        tr, proto = await endpoint(loop, remote_addr=addr)
        tr.sendto(b"anyone?")
        exc, _ = await proto.got.get()
        assert isinstance(exc, ConnectionRefusedError), repr(exc)
        assert exc.errno == errno.ECONNREFUSED
        assert not tr.is_closing()
        # Still usable: the next datagram meets the same fate, reported the same way.
        tr.sendto(b"still nobody?")
        exc, _ = await proto.got.get()
        assert isinstance(exc, ConnectionRefusedError), repr(exc)
        assert not tr.is_closing() and not proto.lost.done()
        await closed(tr, proto)
        assert proto.events == ["made", "error", "error", "lost"]

    run(loop, main())


def test_sendto_too_large_datagram(loop):
    async def main():
        b_tr, b = await endpoint(loop, local_addr=(HOST, 0))
        b_addr = b_tr.get_extra_info("sockname")
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        tr.sendto(b"x" * 70_000, b_addr)  # above the 65,507-byte IPv4 payload limit
        exc, _ = await proto.got.get()
        assert isinstance(exc, OSError) and exc.errno == errno.EMSGSIZE, repr(exc)
        assert not tr.is_closing()
        assert tr.get_write_buffer_size() == 0
        # The largest legal datagram goes through whole.
        tr.sendto(b"y" * 65_507, b_addr)
        data, _ = await b.got.get()
        assert data == b"y" * 65_507
        await closed(tr, proto)
        await closed(b_tr, b)
        assert b.events == ["made", "datagram", "lost"]

    run(loop, main())


def test_write_buffer_size_and_limits(loop):
    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        assert tr.get_write_buffer_size() == 0
        assert tr.get_write_buffer_limits() == DEFAULT_LIMITS
        tr.set_write_buffer_limits(high=100)
        assert tr.get_write_buffer_limits() == (25, 100)
        with pytest.raises(ValueError, match="must be >="):
            tr.set_write_buffer_limits(high=1, low=2)
        assert tr.get_write_buffer_limits() == (25, 100)
        for _ in range(10):
            tr.sendto(b"z" * 1000, tr.get_extra_info("sockname"))
        # Loopback takes small datagrams at once: nothing stays buffered.
        assert tr.get_write_buffer_size() == 0
        for _ in range(10):
            data, _ = await proto.got.get()
            assert data == b"z" * 1000
        await closed(tr, proto)

    run(loop, main())


@pytest.mark.parametrize("how", ["close", "abort"])
def test_close_and_abort(loop, how):
    async def main():
        srv_tr, srv = await endpoint(loop, local_addr=(HOST, 0))
        srv_addr = srv_tr.get_extra_info("sockname")
        tr, proto = await endpoint(loop, remote_addr=srv_addr)
        tr.sendto(b"before")
        assert (await srv.got.get())[0] == b"before"
        getattr(tr, how)()
        assert tr.is_closing()
        assert proto.lost_calls == 0, f"{how}() must not call connection_lost synchronously"
        getattr(tr, how)()  # a second call is a no-op
        tr.sendto(b"after")  # dropped silently on a closed connected endpoint
        assert await proto.lost is None
        # The peer answers to the closed endpoint's port: nothing reaches the protocol.
        srv_tr.sendto(b"too late", tr.get_extra_info("sockname"))
        await settle(loop)
        assert proto.lost_calls == 1
        assert proto.events == ["made", "lost"]
        assert srv.got.empty(), "a datagram was sent after close"
        await closed(srv_tr, srv)

    run(loop, main())


def test_allow_broadcast(loop):
    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0), allow_broadcast=True)
        sock = tr.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) != 0
        plain_tr, plain = await endpoint(loop, local_addr=(HOST, 0))
        plain_sock = plain_tr.get_extra_info("socket")
        assert plain_sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 0
        await closed(tr, proto)
        await closed(plain_tr, plain)

    run(loop, main())


def test_reuse_port(loop):
    async def main():
        a_tr, a = await endpoint(loop, local_addr=(HOST, 0), reuse_port=True)
        addr = a_tr.get_extra_info("sockname")
        assert a_tr.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        # A second endpoint on the very same port is allowed with reuse_port ...
        b_tr, b = await endpoint(loop, local_addr=addr, reuse_port=True)
        assert b_tr.get_extra_info("sockname") == addr
        # ... and refused without it.
        with pytest.raises(OSError) as info:
            await endpoint(loop, local_addr=addr)
        assert info.value.errno == errno.EADDRINUSE
        # Both bound endpoints work: a datagram to the shared port reaches one of them.
        c_tr, c = await endpoint(loop, local_addr=(HOST, 0))
        c_tr.sendto(b"to the group", addr)
        winner = await asyncio.wait_for(_first_datagram(a, b), 30)
        assert winner == b"to the group"
        for tr, proto in ((a_tr, a), (b_tr, b), (c_tr, c)):
            await closed(tr, proto)

    run(loop, main())


async def _first_datagram(*protos: Datagrams) -> bytes:
    gets = [asyncio.ensure_future(p.got.get()) for p in protos]
    done, pending = await asyncio.wait(gets, return_when=asyncio.FIRST_COMPLETED)
    for g in pending:
        g.cancel()
    data, _ = done.pop().result()
    return data


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_ipv6_addresses_are_the_socket_modules_tuples(loop):
    """An IPv6 sender's address is the 4-tuple the socket module gives, equal to the
    sender's own sockname (ringloop builds it natively)."""

    async def main():
        a_tr, a = await endpoint(loop, local_addr=("::1", 0))
        b_tr, b = await endpoint(loop, local_addr=("::1", 0))
        a_addr, b_addr = a_tr.get_extra_info("sockname"), b_tr.get_extra_info("sockname")
        assert len(a_addr) == 4
        a_tr.sendto(b"v6", b_addr)
        assert await b.got.get() == (b"v6", a_addr)
        # A 2-tuple address works for sending too, as with socket.sendto.
        b_tr.sendto(b"back", a_addr[:2])
        assert await a.got.get() == (b"back", b_addr)
        await closed(a_tr, a)
        await closed(b_tr, b)

    run(loop, main())


def test_sendto_a_host_name(loop):
    """A host name (not a numeric address) is resolved as socket.sendto resolves it."""

    async def main():
        a_tr, a = await endpoint(loop, local_addr=(HOST, 0))
        b_tr, b = await endpoint(loop, local_addr=(HOST, 0))
        port = b_tr.get_extra_info("sockname")[1]
        a_tr.sendto(b"by name", ("localhost", port))
        data, addr = await b.got.get()
        assert data == b"by name" and addr == a_tr.get_extra_info("sockname")
        await closed(a_tr, a)
        await closed(b_tr, b)

    run(loop, main())


def test_native_datagram_transport_is_used(loop, loop_kind):
    """ringloop's UDP endpoints run on its native transport (asyncio's on stock asyncio)."""

    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        name = type(tr).__module__ + "." + type(tr).__name__
        if loop_kind == "asyncio":
            assert name == "asyncio.selector_events._SelectorDatagramTransport"
        else:
            assert name == "ringloop._datagrams.DatagramTransport"
        await closed(tr, proto)

    run(loop, main())


def test_native_reading_mechanism(loop, loop_kind):
    """On io_uring a multishot recvmsg reads (no reader callback on the fd); on epoll a
    native reader callback does. Closing stops either."""

    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        await settle(loop)
        fd = tr.get_extra_info("socket").fileno()
        if loop_kind == "asyncio":
            assert loop._selector.get_key(fd) is not None
        else:
            reader, _ = loop._fd_callbacks(fd)
            assert tr._io.reading
            assert (reader is None) == (loop_kind == "ringloop-io_uring"), reader
        assert "read=polling" in repr(tr)
        await closed(tr, proto)
        if loop_kind != "asyncio":
            assert not tr._io.reading

    run(loop, main())


def test_a_burst_beyond_the_read_buffers_arrives_whole_and_in_order(loop):
    """More datagrams at once than io_uring's datagram buffer ring holds (256): the read is
    re-armed as buffers come back, and nothing is lost or reordered."""

    async def main():
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        rx.bind((HOST, 0))
        tr, proto = await endpoint(loop, sock=rx)
        await settle(loop)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.bind((HOST, 0))
            for burst in range(3):
                for i in range(600):
                    tx.sendto(b"%d:%d:" % (burst, i) + b"x" * (i % 50), rx.getsockname())
                for i in range(600):
                    data, addr = await asyncio.wait_for(proto.got.get(), 10)
                    assert data == b"%d:%d:" % (burst, i) + b"x" * (i % 50)
                    assert addr == tx.getsockname()
        await closed(tr, proto)

    run(loop, main())


def test_the_largest_ipv4_datagram_arrives_whole(loop):
    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        await settle(loop)
        payload = bytes(range(256)) * 255 + bytes(range(227))  # 65,507 bytes
        assert len(payload) == 65_507
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            tx.sendto(payload, tr.get_extra_info("sockname"))
            tx.sendto(b"", tr.get_extra_info("sockname"))
            data, _ = await asyncio.wait_for(proto.got.get(), 10)
            assert data == payload
            data, _ = await asyncio.wait_for(proto.got.get(), 10)
            assert data == b""
        await closed(tr, proto)

    run(loop, main())


def test_close_under_a_flood_frees_the_port_at_once(loop):
    """A closed endpoint's socket is really closed while a peer keeps flooding it: an
    in-flight read must not keep the file (and so the port) alive."""
    import threading

    async def main():
        tr, proto = await endpoint(loop, local_addr=(HOST, 0))
        addr = tr.get_extra_info("sockname")
        stop = threading.Event()

        def flood():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                while not stop.is_set():
                    try:
                        tx.sendto(b"f" * 512, addr)
                    except OSError:
                        pass

        t = threading.Thread(target=flood, daemon=True)
        t.start()
        try:
            for _ in range(50):
                await proto.got.get()
            tr.close()
            assert await proto.lost is None
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as again:
                again.bind(addr)  # EADDRINUSE if the old socket were still alive
        finally:
            stop.set()
            t.join()

    run(loop, main())
