"""Helpers shared by the transport tests (imported as ``transport_helpers``; not a test module).

Two ways to get a transport under test:

* ``raw_peer(loop, family, protocol)`` -- a client transport made by ``create_connection``
  whose peer is a *plain* non-blocking socket accepted outside any transport. The peer is
  driven with the loop's ``sock_*`` coroutines, so what the test observes on the peer side
  never depends on the transport implementation under test (a peer that "does not read" simply
  never calls ``sock_recv``);
* ``transport_pair(loop, family, client, server)`` -- both ends are transports of the loop
  (``create_connection`` against ``create_server``), for tests about how two transports of
  the same loop talk to each other.

``Recorder`` is the protocol most tests use: it logs every callback in order, counts
``connection_lost`` calls and any callback that arrives after it, and offers futures to await
("N bytes received", "EOF", "lost") instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import resource
import socket
import struct
import tempfile
from dataclasses import dataclass, field

# Upper bound for anything that must happen promptly; far below the pytest timeouts so that a
# hang is reported as a TimeoutError with a traceback pointing at what never happened.
LONG = 30.0
HOST = "127.0.0.1"

# asyncio's documented defaults for the write-buffer water marks (transports._FlowControlMixin).
DEFAULT_LIMITS = (16 * 1024, 64 * 1024)


def marked_native(factory, *args, **kw):
    """`factory` as `ringloop serve` hands its protocol factory over: ringloop then sets each
    connection up natively (docs/native-accept.md); stock asyncio ignores the mark."""
    f = functools.partial(factory, *args, **kw)
    f._ringloop_native = True
    return f


def run(loop: asyncio.AbstractEventLoop, aw, timeout: float = LONG):
    """Run ``aw`` on ``loop``; a hang becomes TimeoutError after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(aw, timeout))


# -- stream families ---------------------------------------------------------------------------


@dataclass
class StreamFamily:
    """TCP on 127.0.0.1 or a Unix socket in a short private directory (AF_UNIX paths are
    limited to 107 bytes, too short for pytest's tmp_path names)."""

    name: str
    _dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="rl-tr-", dir="/tmp"))
    _n: int = 0

    @property
    def af(self) -> int:
        return socket.AF_INET if self.name == "tcp" else socket.AF_UNIX

    def new_address(self):
        """A fresh address to listen on (port 0 for TCP: the kernel picks one)."""
        if self.name == "tcp":
            return (HOST, 0)
        self._n += 1
        return os.path.join(self._dir, f"s{self._n}")

    def listen_socket(self, backlog: int = 128) -> socket.socket:
        """A plain listening socket (non-blocking), not owned by any transport."""
        sock = socket.socket(self.af, socket.SOCK_STREAM)
        try:
            if self.name == "tcp":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(self.new_address())
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    async def create_server(self, loop, factory, **kw) -> tuple[asyncio.AbstractServer, object]:
        """``loop.create_server`` / ``create_unix_server``; returns (server, address)."""
        if self.name == "tcp":
            server = await loop.create_server(factory, HOST, 0, **kw)
        else:
            server = await loop.create_unix_server(factory, self.new_address(), **kw)
        return server, server.sockets[0].getsockname()

    async def create_connection(self, loop, factory, addr):
        if self.name == "tcp":
            return await loop.create_connection(factory, *addr)
        return await loop.create_unix_connection(factory, addr)

    async def open_connection(self, addr, **kw):
        if self.name == "tcp":
            return await asyncio.open_connection(*addr, **kw)
        return await asyncio.open_unix_connection(addr, **kw)

    def cleanup(self) -> None:
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)


# -- protocols -----------------------------------------------------------------------------------


class Recorder(asyncio.Protocol):
    """Logs every callback in order (``events``) and lets a test await what it expects.

    ``eof_keep_open`` is what ``eof_received`` returns. Anything reported after
    ``connection_lost`` lands in ``after_lost`` (a transport must never do that). With
    ``keep_data=False`` only the byte count (``nbytes``) is kept, for long streams.
    """

    def __init__(self, *, eof_keep_open: bool = False, keep_data: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self.eof_keep_open = eof_keep_open
        self.keep_data = keep_data
        self.transport = None
        self.events: list[str] = []
        self.data = bytearray()
        self.nbytes = 0
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self.lost_calls = 0
        self.after_lost: list[str] = []
        self.pauses = 0
        self.resumes = 0
        self.size_at_pause: list[int] = []
        self.size_at_resume: list[int] = []
        self.resumed: asyncio.Future | None = None
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def _log(self, what: str) -> None:
        if self.lost_calls:
            self.after_lost.append(what)
        self.events.append(what)

    def connection_made(self, transport) -> None:
        self._log("made")
        self.transport = transport
        self.made.set_result(transport)

    def data_received(self, data: bytes) -> None:
        self._log("data")
        assert isinstance(data, bytes), type(data)
        assert data, "data_received(b'') is never legal: EOF is eof_received()"
        self.nbytes += len(data)
        if self.keep_data:
            self.data += data
        self._wake()

    def eof_received(self):
        self._log("eof")
        if not self.eof.done():
            self.eof.set_result(None)
        return self.eof_keep_open

    def pause_writing(self) -> None:
        self._log("pause")
        self.pauses += 1
        self.size_at_pause.append(self.transport.get_write_buffer_size())

    def resume_writing(self) -> None:
        self._log("resume")
        self.resumes += 1
        self.size_at_resume.append(self.transport.get_write_buffer_size())
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    def connection_lost(self, exc) -> None:
        self._log("lost")
        self.lost_calls += 1
        if not self.lost.done():
            self.lost.set_result(exc)
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(AssertionError(f"connection lost ({exc!r}) before the data"))

    def _wake(self) -> None:
        for n, fut in self._waiters:
            if self.nbytes >= n and not fut.done():
                fut.set_result(None)
        self._waiters = [(n, f) for n, f in self._waiters if not f.done()]

    async def received(self, n: int) -> None:
        """Wait until at least ``n`` bytes arrived (fails at once if the connection is lost)."""
        if self.nbytes >= n:
            return
        if self.lost.done():
            raise AssertionError(f"connection lost with {self.nbytes}/{n} bytes received")
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        await fut

    def compact(self) -> list[str]:
        """``events`` with runs of "data" folded into one entry: order without chunking."""
        out: list[str] = []
        for e in self.events:
            if not (e == "data" and out and out[-1] == "data"):
                out.append(e)
        return out


# -- connections -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def raw_peer(loop, family: StreamFamily, protocol: asyncio.BaseProtocol | None = None):
    """Yield (transport, protocol, peer): a client transport and its plain-socket peer.

    The connection is established by the kernel before ``accept`` (loopback handshakes complete
    into the listen backlog), so connecting first and accepting second cannot deadlock. On exit
    the transport is aborted if still open, ``connection_lost`` awaited, the peer closed.
    """
    proto = protocol if protocol is not None else Recorder()
    lsock = family.listen_socket()
    try:
        tr, _ = await family.create_connection(loop, lambda: proto, lsock.getsockname())
        peer, _ = await loop.sock_accept(lsock)
    finally:
        lsock.close()
    peer.setblocking(False)
    try:
        yield tr, proto, peer
    finally:
        try:
            if not tr.is_closing():
                tr.abort()
            # Already lost, or handed to another protocol (set_protocol): nothing to await.
            if isinstance(proto, Recorder) and tr.get_protocol() is proto:
                await asyncio.wait_for(asyncio.shield(proto.lost), LONG)
        finally:
            peer.close()


@dataclass
class Pair:
    client_tr: asyncio.Transport
    client: asyncio.BaseProtocol
    server_tr: asyncio.Transport
    server: asyncio.BaseProtocol


@contextlib.asynccontextmanager
async def transport_pair(loop, family: StreamFamily, client=None, server=None):
    """Yield a ``Pair``: both ends of one connection are transports of ``loop``.

    ``client``/``server`` are protocol instances (default: ``Recorder()``). The listening
    server is closed as soon as the connection is accepted (accepted connections outlive
    ``Server.close()``); on exit both transports are aborted and their loss awaited.
    """
    client = client if client is not None else Recorder()
    server = server if server is not None else Recorder()
    accepted = loop.create_future()

    def factory():
        if accepted.done():
            raise AssertionError("transport_pair's server accepted a second connection")
        accepted.set_result(None)
        return server

    srv, addr = await family.create_server(loop, factory)
    try:
        client_tr, _ = await family.create_connection(loop, lambda: client, addr)
        await accepted
        server_tr = await server.made if isinstance(server, Recorder) else server.transport
    finally:
        srv.close()
    try:
        yield Pair(client_tr, client, server_tr, server)
    finally:
        for tr, proto in ((client_tr, client), (server_tr, server)):
            if not tr.is_closing():
                tr.abort()
            if isinstance(proto, Recorder):
                await asyncio.wait_for(asyncio.shield(proto.lost), LONG)
        await srv.wait_closed()


# -- peer-side I/O -----------------------------------------------------------------------------


async def recv_until_eof(loop, sock: socket.socket, limit: int = 1 << 30) -> bytes:
    """Everything the peer socket receives until EOF (fails past ``limit`` bytes)."""
    out = bytearray()
    while chunk := await loop.sock_recv(sock, 256 * 1024):
        out += chunk
        assert len(out) <= limit, f"peer received more than {limit} bytes"
    return bytes(out)


async def recv_exactly(loop, sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = await loop.sock_recv(sock, n - len(out))
        assert chunk, f"EOF after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


async def settle(loop, rounds: int = 3) -> None:
    """Let the loop process I/O that is already pending, without sleeping on the clock.

    Each round is a loopback ping through a socketpair using the loop's own ``sock_*``
    operations, so it completes only after the loop has polled (or reaped) I/O at least once
    more. Used only to give a *wrong* implementation the chance to misbehave before asserting
    that something did not happen; a correct one passes however long this takes.
    """
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    with a, b:
        for _ in range(rounds):
            await loop.sock_sendall(a, b"!")
            assert await loop.sock_recv(b, 1) == b"!"
            await asyncio.sleep(0)


async def fill_write_buffer(tr, chunk_size: int = 256 * 1024) -> int:
    """Write to a transport whose peer does not read until data stays in the transport's
    buffer (the kernel's socket buffers are full). Returns the number of bytes written."""
    chunk = b"f" * chunk_size
    written = 0
    while tr.get_write_buffer_size() == 0:
        tr.write(chunk)
        written += chunk_size
        assert written < 1 << 30, "the transport never buffered: is the peer reading?"
        # Everything went to the kernel: let the loop run so the buffers fill up for real.
        await asyncio.sleep(0)
    return written


def set_rst_on_close(sock) -> None:
    """SO_LINGER on with a zero timeout: close() sends RST instead of FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` bytes that differ at every offset modulo a large period (so a reordering, loss or
    duplication shows up in the comparison, unlike b"x" * n)."""
    block = hashlib.sha512(seed.to_bytes(8, "big")).digest() * 64  # 4096 bytes
    reps, rest = divmod(n, len(block) - 1)  # period 4095: not a power of two, so misaligned
    return (block[:-1] * reps + block[:rest])[:n]


# -- process resources ------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_table() -> dict[int, str]:
    """fd -> what it is (the /proc/self/fd link target), to name a leak, not just count it."""
    table = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            table[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the fd of the directory listing itself, closed by now
            pass
    return table


def fd_diff(before: dict[int, str], after: dict[int, str]) -> str:
    gone = {fd: t for fd, t in before.items() if after.get(fd) != t}
    new = {fd: t for fd, t in after.items() if before.get(fd) != t}
    return f"closed {gone}, opened {new}"


def rss_bytes() -> int:
    """Resident set size of this process (VmRSS from /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def raise_nofile(need: int) -> tuple[bool, str]:
    """Raise RLIMIT_NOFILE's soft limit to at least ``need`` (never above the hard limit).

    Returns (ok, explanation). The soft limit is left raised: it is a per-process ceiling,
    not a resource, and every later test in the process is happy with a higher one.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return True, f"soft limit {soft} >= {need}"
    if hard != resource.RLIM_INFINITY and hard < need:
        return False, f"RLIMIT_NOFILE hard limit {hard} < {need} needed"
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return True, f"soft limit raised {soft} -> {need} (hard {hard})"
