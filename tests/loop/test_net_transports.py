"""Network transports (TCP, Unix sockets, UDP, TLS, servers, streams), on the asyncio oracle
and both ringloop backends.

On ringloop these run asyncio's own selector transports over the native fd watchers (the
interim layer in ``ringloop._nettransports``); the same tests must keep passing when the
native transports replace it.

Linux and asyncio facts encoded here:

* ``transport.write()`` sends what the kernel takes at once and buffers the rest; crossing the
  high-water mark calls ``pause_writing()`` *synchronously, inside* ``write()``, and draining to
  the low-water mark calls ``resume_writing()``. A reader that stops reading
  (``pause_reading()``) lets the peer's socket buffers fill, so its writer does buffer;
* ``write_eof()`` shuts down the write half (FIN): the peer's ``eof_received()`` runs, and if
  it returns true the connection stays open for the other direction;
* closing a TCP socket with ``SO_LINGER`` on and a zero timeout sends RST instead of FIN: the
  peer's next receive fails with ``ECONNRESET`` and its transport reports
  ``connection_lost(ConnectionResetError)``;
* connecting to a TCP port that has a bound but not listening socket is answered with RST:
  ``ConnectionRefusedError``, without any timeout involved;
* ``abort()`` drops the write buffer and reports ``connection_lost(None)`` on a later iteration;
* ``Server.close()`` stops listening (new connections are refused) and leaves accepted
  connections alive; before 3.12 ``wait_closed()`` returns at once after ``close()``, from
  3.12 on it waits for the accepted connections to close, so the test closes them first.

No test sleeps or races the clock: each waits for the event it asserts, and a hang is a
TimeoutError after ``LONG`` seconds well before the pytest timeout.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import sys
import tempfile

import pytest
from loop_helpers import run_with_timeout

pytestmark = pytest.mark.timeout(60)

LONG = 30.0
HOST = "127.0.0.1"


def run(loop, aw, timeout: float = LONG):
    return run_with_timeout(loop, aw, timeout)


# -- protocols -------------------------------------------------------------------------------


class EchoServer(asyncio.Protocol):
    """Echoes everything back; keeps the write half open after the peer's EOF, then closes
    once its reply is written (half-close)."""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)

    def eof_received(self):
        self.transport.write(b"<eof>")
        self.transport.close()
        return True


class Client(asyncio.Protocol):
    """Records what a client transport reports; ``lost`` resolves with connection_lost's arg."""

    def __init__(self, loop) -> None:
        self.loop = loop
        self.transport = None
        self.data = bytearray()
        self.events: list[str] = []
        self.lost = loop.create_future()
        self.paused = 0
        self.resumed = loop.create_future()
        self.want: int | None = None
        self.got_enough = loop.create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.data += data
        if self.want is not None and len(self.data) >= self.want and not self.got_enough.done():
            self.got_enough.set_result(None)

    def eof_received(self):
        self.events.append("eof")

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        if not self.resumed.done():
            self.resumed.set_result(None)

    def connection_lost(self, exc) -> None:
        self.events.append("lost")
        if not self.lost.done():
            self.lost.set_result(exc)


class ServerSide(asyncio.Protocol):
    """A server connection whose transport and events a test drives from outside."""

    def __init__(self, loop, made) -> None:
        self.made = made  # a future resolved with this protocol on connection_made
        self.lost = loop.create_future()
        self.data = bytearray()
        self.data_waiter = loop.create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.made.done():
            self.made.set_result(self)

    def data_received(self, data: bytes) -> None:
        self.data += data
        if not self.data_waiter.done():
            self.data_waiter.set_result(None)

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


async def _tcp_server(loop, factory, **kw):
    server = await loop.create_server(factory, HOST, 0, **kw)
    return server, server.sockets[0].getsockname()[1]


async def _one_server_side(loop):
    """A server accepting exactly the connections a test makes; returns (server, port, made)
    where ``made`` resolves with the first connection's ServerSide protocol."""
    made = loop.create_future()
    server, port = await _tcp_server(loop, lambda: ServerSide(loop, made))
    return server, port, made


# -- TCP -------------------------------------------------------------------------------------


def test_tcp_echo_protocol_and_half_close(loop):
    async def main():
        server, port = await _tcp_server(loop, EchoServer)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            assert tr.get_extra_info("peername") == (HOST, port)
            assert isinstance(tr.get_extra_info("socket"), asyncio.trsock.TransportSocket)
            assert tr.can_write_eof()
            client.want = 5
            tr.write(b"hello")
            await client.got_enough
            # Half-close: our FIN reaches the server, which still answers, then closes.
            tr.write_eof()
            exc = await client.lost
            assert exc is None
            assert bytes(client.data) == b"hello<eof>"
            assert client.events == ["made", "eof", "lost"]

    run(loop, main())


def test_tcp_echo_streams(loop):
    async def handle(reader, writer):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(HOST, port)
            for i in range(20):
                line = f"line {i}\n".encode()
                writer.write(line)
                assert await reader.readline() == line
            writer.write_eof()
            assert await reader.read() == b""
            writer.close()
            await writer.wait_closed()

    run(loop, main())


def test_create_connection_options(loop):
    """sock=, local_addr=, happy eyeballs and connect_accepted_socket all end in the same
    socket transport."""

    async def main():
        server, port = await _tcp_server(loop, EchoServer)
        async with server:
            # happy_eyeballs_delay/interleave take the staggered-connect path.
            client = Client(loop)
            tr, _ = await loop.create_connection(
                lambda: client, HOST, port, happy_eyeballs_delay=0.25, interleave=1
            )
            client.want = 2
            tr.write(b"he")
            await client.got_enough
            tr.close()
            await client.lost

            # local_addr= binds the client side first.
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port, local_addr=(HOST, 0))
            assert tr.get_extra_info("sockname")[0] == HOST
            tr.close()
            await client.lost

            # sock=: an already connected socket.
            sock = socket.socket()
            sock.setblocking(False)
            await loop.sock_connect(sock, (HOST, port))
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, sock=sock)
            # The socket now belongs to the transport: sock_* calls on it are refused.
            with pytest.raises(RuntimeError, match="used by transport"):
                await loop.sock_recv(sock, 1)
            client.want = 3
            tr.write(b"abc")
            await client.got_enough
            tr.close()
            await client.lost

        # connect_accepted_socket: wrap the accepting side of a plain socket pair.
        lsock = socket.create_server((HOST, 0))
        lsock.setblocking(False)
        with lsock:
            csock = socket.socket()
            csock.setblocking(False)
            connect = loop.create_task(loop.sock_connect(csock, lsock.getsockname()))
            conn, _ = await loop.sock_accept(lsock)
            await connect
            server_tr, proto = await loop.connect_accepted_socket(EchoServer, conn)
            with csock:
                await loop.sock_sendall(csock, b"xyz")
                assert await loop.sock_recv(csock, 3) == b"xyz"
                server_tr.close()
                assert await loop.sock_recv(csock, 10) == b""

    run(loop, main())


def test_buffered_protocol(loop):
    class Buffered(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(7)  # small on purpose: many get_buffer() calls
            self.data = bytearray()
            self.lost = loop.create_future()

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, nbytes):
            self.data += self.buf[:nbytes]

        def eof_received(self):
            return False

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        payload = os.urandom(100_000)

        async def send(reader, writer):
            writer.write(payload)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(send, HOST, 0)
        async with server:
            proto = Buffered()
            await loop.create_connection(lambda: proto, HOST, server.sockets[0].getsockname()[1])
            assert await proto.lost is None
            assert bytes(proto.data) == payload

    run(loop, main())


def test_flow_control_with_slow_reader(loop):
    async def main():
        server, port, made = await _one_server_side(loop)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            srv = await made
            srv.transport.pause_reading()
            tr.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
            assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)

            chunk = b"x" * 16 * 1024
            sent = 0
            # pause_writing() runs inside write() once the buffer crosses the high-water
            # mark; the kernel's socket buffers are finite, so that must happen.
            while not client.paused:
                tr.write(chunk)
                sent += len(chunk)
                assert sent < 512 * 1024 * 1024, "writer never paused"
                if tr.get_write_buffer_size() == 0:
                    # Everything went to the kernel: let the loop run so it can fill up.
                    await asyncio.sleep(0)
            assert client.paused == 1
            # Bounded: the writer stopped right after crossing the mark.
            assert 64 * 1024 < tr.get_write_buffer_size() <= 64 * 1024 + len(chunk)
            assert not client.resumed.done()

            srv.transport.resume_reading()
            await client.resumed
            assert tr.get_write_buffer_size() <= 16 * 1024
            while len(srv.data) < sent:
                srv.data_waiter = loop.create_future()
                await srv.data_waiter
            assert len(srv.data) == sent
            tr.close()
            await client.lost

    run(loop, main())


def test_peer_reset_mid_read(loop):
    async def main():
        server, port, made = await _one_server_side(loop)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            srv = await made
            tr.write(b"ping")
            await srv.data_waiter
            # SO_LINGER on with a zero timeout: close() sends RST instead of FIN.
            srv.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            srv.transport.abort()
            exc = await client.lost
            assert isinstance(exc, ConnectionResetError), exc
            assert tr.is_closing()

    run(loop, main())


def test_connection_refused(loop):
    async def main():
        # Bound, never listening: the kernel answers SYN with RST at once.
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(asyncio.Protocol, HOST, port)
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(HOST, port)

    run(loop, main())


def test_abort_mid_write(loop):
    async def main():
        server, port, made = await _one_server_side(loop)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            srv = await made
            srv.transport.pause_reading()
            while tr.get_write_buffer_size() == 0:
                tr.write(b"y" * 1024 * 1024)
                await asyncio.sleep(0)
            tr.abort()
            assert tr.is_closing()
            assert await client.lost is None
            assert "lost" in client.events
            # Writes after abort are dropped, never raised.
            tr.write(b"late")
            srv.transport.resume_reading()
            exc = await srv.lost
            assert exc is None or isinstance(exc, ConnectionResetError), exc

    run(loop, main())


def test_server_api_close_with_live_clients(loop):
    async def main():
        made = loop.create_future()
        server = await loop.create_server(
            lambda: ServerSide(loop, made), HOST, 0, start_serving=False
        )
        assert not server.is_serving()
        assert server.get_loop() is loop
        (sock,) = server.sockets
        port = sock.getsockname()[1]
        await server.start_serving()
        assert server.is_serving()

        client = Client(loop)
        tr, _ = await loop.create_connection(lambda: client, HOST, port)
        srv = await made

        server.close()
        assert not server.is_serving()
        assert server.sockets == ()
        # The accepted connection outlives close().
        tr.write(b"still here")
        await srv.data_waiter
        assert bytes(srv.data) == b"still here"

        tr.close()
        srv.transport.close()
        await client.lost
        await srv.lost
        await server.wait_closed()

    run(loop, main())


def test_server_close_refuses_new_connections_at_once(loop):
    # On io_uring an armed poll holds a reference to the listening socket's file: the
    # reactor must process the poll's removal before close() returns, or the port keeps
    # accepting for one more iteration (clients see ECONNRESET, not ECONNREFUSED).
    async def main():
        server, port = await _tcp_server(loop, EchoServer)
        server.close()
        # No longer listening: the port is closed, connecting is refused.
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, HOST, port)
        await server.wait_closed()

    run(loop, main())


@pytest.mark.skipif(sys.version_info < (3, 13), reason="Server.close_clients is 3.13+")
def test_server_close_and_abort_clients(loop):
    async def main():
        made = loop.create_future()
        server, port = await _tcp_server(loop, lambda: ServerSide(loop, made))
        client = Client(loop)
        await loop.create_connection(lambda: client, HOST, port)
        await made
        server.close()
        server.close_clients()
        await client.lost
        await server.wait_closed()

    run(loop, main())


def test_serve_forever_cancelled_closes_server(loop):
    async def main():
        server, port = await _tcp_server(loop, EchoServer)
        task = loop.create_task(server.serve_forever())
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"hi")
        assert await reader.readexactly(2) == b"hi"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not server.is_serving()
        writer.close()
        await writer.wait_closed()
        await server.wait_closed()

    run(loop, main())


def test_500_concurrent_connections(loop):
    n = 500

    async def handle(reader, writer):
        data = await reader.readexactly(8)
        writer.write(data)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def one(port, i):
        reader, writer = await asyncio.open_connection(HOST, port)
        msg = i.to_bytes(8, "big")
        writer.write(msg)
        got = await reader.readexactly(8)
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
        return got == msg

    async def main():
        # A backlog above n: connects are never dropped into SYN retransmission (1 s waits).
        server = await asyncio.start_server(handle, HOST, 0, backlog=n + 100)
        port = server.sockets[0].getsockname()[1]
        async with server:
            results = await asyncio.gather(
                *(one(port, i) for i in range(n)), return_exceptions=True
            )
        errors = [r for r in results if r is not True]
        assert errors == []

    run(loop, main())


def test_sendfile_over_transport(loop, tmp_path):
    async def main():
        payload = os.urandom(300_000)
        path = tmp_path / "blob"
        path.write_bytes(payload)
        server, port, made = await _one_server_side(loop)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            srv = await made
            with open(path, "rb") as f:
                tr.write(b"head")
                sent = await loop.sendfile(tr, f, offset=10, count=200_000)
                tr.write(b"tail")
            assert sent == 200_000
            want = b"head" + payload[10:200_010] + b"tail"
            while len(srv.data) < len(want):
                srv.data_waiter = loop.create_future()
                await srv.data_waiter
            assert bytes(srv.data) == want
            tr.close()
            await client.lost

    run(loop, main())


# -- Unix sockets ----------------------------------------------------------------------------


def test_unix_echo(loop):
    async def handle(reader, writer):
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    async def main():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sock")
            server = await asyncio.start_unix_server(handle, path)
            async with server:
                assert server.sockets[0].getsockname() == path
                reader, writer = await asyncio.open_unix_connection(path)
                writer.write(b"over unix")
                assert await reader.read() == b"over unix"
                writer.close()
                await writer.wait_closed()

                client = Client(loop)
                tr, _ = await loop.create_unix_connection(lambda: client, path)
                tr.write(b"again")
                await client.lost
                assert bytes(client.data) == b"again"

    run(loop, main())


def test_unix_server_close_and_its_socket_file(loop):
    """What stays on disk after a Unix server closes is what asyncio of this Python leaves:
    3.13+ removes the path (``cleanup_socket=True``, the default) unless the path was
    replaced meanwhile or cleanup was turned off; earlier versions leave it."""
    cleans = sys.version_info >= (3, 13)

    async def main():
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sock")
            server = await loop.create_unix_server(asyncio.Protocol, path)
            server.close()
            await server.wait_closed()
            assert os.path.exists(path) != cleans

            if cleans:
                # Another file under the path by now: not ours to remove.
                server = await loop.create_unix_server(asyncio.Protocol, path)
                os.unlink(path)
                with open(path, "w"):
                    pass
                server.close()
                await server.wait_closed()
                assert os.path.exists(path)
                os.unlink(path)

                server = await loop.create_unix_server(asyncio.Protocol, path, cleanup_socket=False)
                server.close()
                await server.wait_closed()
                assert os.path.exists(path)

    run(loop, main())


# -- UDP -------------------------------------------------------------------------------------


class Datagram(asyncio.DatagramProtocol):
    def __init__(self, loop, echo: bool = False) -> None:
        self.echo = echo
        self.got = asyncio.Queue()
        self.lost = loop.create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data, addr) -> None:
        if self.echo:
            self.transport.sendto(data.upper(), addr)
        self.got.put_nowait((data, addr))

    def error_received(self, exc) -> None:
        self.got.put_nowait((exc, None))

    def connection_lost(self, exc) -> None:
        self.lost.set_result(exc)


def test_udp_round_trip(loop):
    async def main():
        srv_tr, _ = await loop.create_datagram_endpoint(
            lambda: Datagram(loop, echo=True), local_addr=(HOST, 0)
        )
        addr = srv_tr.get_extra_info("sockname")
        proto = Datagram(loop)
        tr, _ = await loop.create_datagram_endpoint(lambda: proto, remote_addr=addr)
        for word in (b"one", b"two", b"three"):
            tr.sendto(word)
            data, src = await proto.got.get()
            assert (data, src) == (word.upper(), addr)
        tr.close()
        assert await proto.lost is None
        srv_tr.close()

    run(loop, main())


def test_udp_connected_peer_gone_reports_error(loop):
    """A connected UDP socket gets the ICMP port-unreachable as ECONNREFUSED on its next
    receive: asyncio reports it to ``error_received`` and keeps the endpoint open."""

    async def main():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
            gone.bind((HOST, 0))
            addr = gone.getsockname()
        proto = Datagram(loop)
        tr, _ = await loop.create_datagram_endpoint(lambda: proto, remote_addr=addr)
        tr.sendto(b"anyone?")
        exc, _ = await proto.got.get()
        assert isinstance(exc, ConnectionRefusedError), exc
        assert not tr.is_closing()
        tr.close()
        await proto.lost

    run(loop, main())


# -- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_contexts():
    """(server, client) SSL contexts from CPython's own test certificates (a CA-signed
    certificate for ``localhost``), skipping if this Python ships without its test package."""
    try:
        from test.test_asyncio import utils as tutils
    except ImportError as exc:  # pragma: no cover - distro Pythons may drop the test package
        pytest.skip(f"CPython test certificates not installed: {exc}")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tutils.SIGNED_CERTFILE)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cafile=tutils.SIGNING_CA)
    return server, client


def test_tls_echo(loop, tls_contexts):
    server_ctx, client_ctx = tls_contexts

    async def handle(reader, writer):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(
                HOST, port, ssl=client_ctx, server_hostname="localhost"
            )
            assert writer.get_extra_info("sslcontext") is client_ctx
            assert writer.get_extra_info("peercert")["subject"]
            payload = os.urandom(50_000)
            writer.write(payload)
            assert await reader.readexactly(len(payload)) == payload
            writer.close()
            await writer.wait_closed()

            # A client that does not trust the CA fails the handshake.
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    HOST, port, ssl=ssl.create_default_context(), server_hostname="localhost"
                )

    run(loop, main())


def test_start_tls_upgrade(loop, tls_contexts):
    server_ctx, client_ctx = tls_contexts

    async def handle(reader, writer):
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"OK\n")
        await writer.drain()
        await writer.start_tls(server_ctx)
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(b"STARTTLS\n")
            assert await reader.readline() == b"OK\n"
            await writer.start_tls(client_ctx, server_hostname="localhost")
            assert writer.get_extra_info("ssl_object") is not None
            writer.write(b"secret\n")
            assert await reader.readline() == b"SECRET\n"
            writer.close()
            await writer.wait_closed()

    run(loop, main())


def test_fd_watchers_refuse_a_transports_socket(loop):
    """add_reader & co. on a socket a live transport owns raise RuntimeError (asyncio's
    check); once the transport is closed, the fd is free again."""

    async def main():
        server, port = await _tcp_server(loop, EchoServer)
        async with server:
            client = Client(loop)
            tr, _ = await loop.create_connection(lambda: client, HOST, port)
            fd = tr.get_extra_info("socket").fileno()
            for call in (
                lambda: loop.add_reader(fd, lambda: None),
                lambda: loop.add_writer(fd, lambda: None),
                lambda: loop.remove_reader(fd),
                lambda: loop.remove_writer(fd),
            ):
                with pytest.raises(RuntimeError, match="is used by transport"):
                    call()
            tr.close()
            assert await client.lost is None

    run(loop, main())
