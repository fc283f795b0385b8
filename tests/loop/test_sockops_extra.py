"""Socket-operation cases the shared sock tests and CPython's test_sock_lowlevel leave open.

Each test runs on stock asyncio (the oracle) and on ringloop's two backends, except where
ringloop deliberately differs from asyncio; those tests say why and run on ringloop only:

- a blocking socket is refused outside debug mode too;
- `sock_sendall` counts bytes, not items, for buffers with multi-byte items;
- a failed operation leaves no reference cycle behind (asyncio's `_sock_recv` does);
- native `sock_sendfile` refuses non-regular files (asyncio's sends a pipe's `st_size` of 0
  bytes), leaves the file position after the sent bytes when cancelled or when nothing was
  sent (as 3.14's stock does), and moves it with `file.seek()` so that a buffered file object
  sees the move.
"""

from __future__ import annotations

import array
import asyncio
import errno
import gc
import os
import selectors
import socket
import ssl
import struct
import sys
import tempfile

import pytest
import ringloop

LOOPS = ("asyncio", "io_uring", "epoll")
RINGLOOP = ("io_uring", "epoll")


def _make_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "asyncio":
        return asyncio.SelectorEventLoop(selectors.EpollSelector())
    loop = ringloop.Loop(backend=name)
    assert loop.backend == name, (loop.backend, loop.backend_fallback_reason)
    return loop


def _loop_fixture(names):
    @pytest.fixture(params=names)
    def fixture(request):
        loop = _make_loop(request.param)
        yield loop
        loop.close()

    return fixture


any_loop = _loop_fixture(LOOPS)
rl_loop = _loop_fixture(RINGLOOP)


def _run(loop, coro, timeout: float = 10.0):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def _fill(sock) -> int:
    """Fill `sock`'s send buffer (and the peer's receive buffer); return the bytes queued."""
    total = 0
    chunk = b"x" * 65536
    while True:
        try:
            total += sock.send(chunk)
        except BlockingIOError:
            return total


async def _recv_exactly(loop, sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = await loop.sock_recv(sock, n - len(out))
        assert data, "unexpected EOF"
        out += data
    return bytes(out)


# -- argument checks -------------------------------------------------------------------------


def _all_ops(loop, sock):
    return [
        loop.sock_recv(sock, 1),
        loop.sock_recv_into(sock, bytearray(1)),
        loop.sock_recvfrom(sock, 1),
        loop.sock_recvfrom_into(sock, bytearray(1)),
        loop.sock_sendall(sock, b"x"),
        loop.sock_sendto(sock, b"x", ("127.0.0.1", 9)),
        loop.sock_connect(sock, ("127.0.0.1", 9)),
        loop.sock_accept(sock),
    ]


def test_ssl_socket_is_refused(any_loop):
    ctx = ssl.create_default_context()
    with ctx.wrap_socket(socket.socket(), server_hostname="example.com") as sock:
        sock.setblocking(False)
        for coro in _all_ops(any_loop, sock):
            with pytest.raises(TypeError, match="SSLSocket"):
                any_loop.run_until_complete(coro)


def test_blocking_socket_is_refused_outside_debug_mode(rl_loop):
    # asyncio checks only in debug mode; a blocking call would stall the whole loop.
    assert not rl_loop.get_debug()
    with socket.socket() as sock:
        for coro in _all_ops(rl_loop, sock):
            with pytest.raises(ValueError, match="non-blocking"):
                rl_loop.run_until_complete(coro)
        with tempfile.TemporaryFile() as f:
            f.write(b"data")
            f.flush()
            with pytest.raises(ValueError, match="non-blocking"):
                rl_loop.run_until_complete(rl_loop.sock_sendfile(sock, f))


def test_fd_owned_by_transport_is_refused(any_loop, pair):
    class FakeTransport:
        def is_closing(self):
            return False

    a, _ = pair
    tr = FakeTransport()
    any_loop._transports[a.fileno()] = tr
    with pytest.raises(RuntimeError, match="used by transport"):
        any_loop.run_until_complete(any_loop.sock_recv(a, 1))


# -- cancellation ----------------------------------------------------------------------------


def test_cancelled_recv_consumes_nothing(any_loop, pair):
    a, b = pair

    async def main():
        task = asyncio.ensure_future(any_loop.sock_recv(a, 100))
        await asyncio.sleep(0)
        task.cancel()
        b.send(b"hello")  # lands before the cancellation is processed
        with pytest.raises(asyncio.CancelledError):
            await task
        return await any_loop.sock_recv(a, 100)

    assert _run(any_loop, main()) == b"hello"


def test_recv_right_after_cancel_keeps_its_reader(any_loop, pair):
    # The cancelled recv's done-callback runs after the new recv registered its reader: it must
    # not unregister the new one.
    a, b = pair

    async def main():
        task = asyncio.ensure_future(any_loop.sock_recv(a, 100))
        await asyncio.sleep(0)
        task.cancel()
        any_loop.call_later(0.01, b.send, b"late")
        assert await any_loop.sock_recv(a, 100) == b"late"

    _run(any_loop, main())


def test_cancelled_accept_leaves_connection_queued(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)

        async def main():
            task = asyncio.ensure_future(any_loop.sock_accept(listener))
            await asyncio.sleep(0)
            task.cancel()
            client = socket.create_connection(listener.getsockname())
            with pytest.raises(asyncio.CancelledError):
                await task
            conn, addr = await any_loop.sock_accept(listener)
            assert addr == client.getsockname()
            assert conn.gettimeout() == 0
            conn.close()
            client.close()

        _run(any_loop, main())


def test_no_callbacks_left_after_ops(rl_loop, pair):
    a, b = pair

    async def main():
        task = asyncio.ensure_future(rl_loop.sock_recv(a, 1))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        send = asyncio.ensure_future(rl_loop.sock_sendall(a, b"y" * (_fill(a) + 1)))
        await asyncio.sleep(0)
        assert rl_loop._fd_callbacks(a.fileno())[1] is not None
        send.cancel()
        await asyncio.gather(send, return_exceptions=True)
        await asyncio.sleep(0)

    _run(rl_loop, main())
    assert rl_loop._fd_callbacks(a.fileno()) == (None, None)


def test_reader_and_writer_wait_side_by_side(any_loop, pair):
    a, b = pair

    async def main():
        queued = _fill(a)
        payload = b"z" * 100_000
        recv = asyncio.ensure_future(any_loop.sock_recv(a, 10))
        send = asyncio.ensure_future(any_loop.sock_sendall(a, payload))
        await asyncio.sleep(0.01)
        assert not recv.done() and not send.done()
        got = await _recv_exactly(any_loop, b, queued + len(payload))
        assert got.endswith(payload)
        await send
        await any_loop.sock_sendall(b, b"ping")
        assert await recv == b"ping"

    _run(any_loop, main())


# -- data paths ------------------------------------------------------------------------------


def test_sendall_counts_bytes_not_items(rl_loop, pair):
    # asyncio compares bytes sent against len() of the buffer, which counts items.
    a, b = pair
    data = array.array("i", range(300_000))

    async def main():
        send = asyncio.ensure_future(rl_loop.sock_sendall(a, data))
        got = await _recv_exactly(rl_loop, b, data.itemsize * len(data))
        await send
        return got

    assert _run(rl_loop, main()) == data.tobytes()


def test_recvfrom_waits(any_loop):
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tx.setblocking(False)

        async def main():
            any_loop.call_later(0.01, tx.sendto, b"one", rx.getsockname())
            data, addr = await any_loop.sock_recvfrom(rx, 100)
            assert (data, addr) == (b"one", tx.getsockname())
            buf = bytearray(10)
            any_loop.call_later(0.01, tx.sendto, b"twotwo", rx.getsockname())
            n, addr = await any_loop.sock_recvfrom_into(rx, buf, 3)
            assert (n, bytes(buf[:n]), addr) == (3, b"two", tx.getsockname())
            assert await any_loop.sock_sendto(rx, b"back", tx.getsockname()) == 4
            assert await any_loop.sock_recvfrom(tx, 100) == (b"back", rx.getsockname())

        _run(any_loop, main())


def test_connect_refused_message(any_loop):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = s.getsockname()
    with socket.socket() as sock:
        sock.setblocking(False)
        with pytest.raises(ConnectionRefusedError) as info:
            _run(any_loop, any_loop.sock_connect(sock, addr))
    # Linux reports a loopback refusal through SO_ERROR after EINPROGRESS.
    assert str(info.value).endswith(f"Connect call failed {addr}")


def test_connect_resolves_names(any_loop):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.socket() as sock:
            sock.setblocking(False)
            _run(any_loop, any_loop.sock_connect(sock, ("localhost", port)))
            assert sock.getpeername() == ("127.0.0.1", port)


def test_failed_op_leaves_no_cycle(rl_loop):
    # Without `fut = None` the future, its exception, the traceback and the frame holding the
    # future form a cycle that only the GC frees (asyncio's sock_recv leaves one).
    async def reset():
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            c = socket.socket()
            c.setblocking(False)
            await rl_loop.sock_connect(c, listener.getsockname())
            srv, _ = listener.accept()

        def rst():
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            srv.close()

        rl_loop.call_later(0.01, rst)
        try:
            await rl_loop.sock_recv(c, 10)
        except ConnectionResetError:
            pass
        finally:
            c.close()

    async def refused():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = s.getsockname()
        with socket.socket() as c:
            c.setblocking(False)
            try:
                await rl_loop.sock_connect(c, addr)
            except ConnectionRefusedError:
                pass

    _run(rl_loop, refused())  # warm up: first-use caches are not garbage
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        rl_loop.run_until_complete(reset())
        rl_loop.run_until_complete(refused())
        gc.collect()
        leaked = [o for o in gc.garbage if isinstance(o, (asyncio.Future, BaseException))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert leaked == []


# -- sendfile --------------------------------------------------------------------------------

DATA = bytes(range(256)) * 4096  # 1 MiB: several socket buffers


@pytest.fixture
def datafile():
    with tempfile.TemporaryFile() as f:
        f.write(DATA)
        f.seek(0)
        yield f


def test_sendfile_native_whole_file(any_loop, pair, datafile):
    a, b = pair

    async def main():
        send = asyncio.ensure_future(any_loop.sock_sendfile(a, datafile, fallback=False))
        got = await _recv_exactly(any_loop, b, len(DATA))
        assert await send == len(DATA)
        return got

    assert _run(any_loop, main()) == DATA
    assert datafile.tell() == len(DATA)


def test_sendfile_native_offset_and_count(any_loop, pair, datafile):
    a, b = pair
    offset, count = 1000, 300_000

    async def main():
        send = asyncio.ensure_future(
            any_loop.sock_sendfile(a, datafile, offset, count, fallback=False)
        )
        got = await _recv_exactly(any_loop, b, count)
        assert await send == count
        await any_loop.sock_sendall(a, b"end")
        assert await _recv_exactly(any_loop, b, 3) == b"end"
        return got

    assert _run(any_loop, main()) == DATA[offset : offset + count]
    assert datafile.tell() == offset + count


def test_sendfile_from_the_end_moves_file_position(any_loop, pair, datafile):
    # An offset equal to the file's size sends nothing, and still leaves the position at the
    # offset, as the read()+send fallback always did (CPython 3.14's test_sendfile_offset checks
    # it through loop.sendfile). Stock asyncio's native path left the position alone when no
    # byte went out until 3.14 made it agree with its fallback; ringloop agrees on every version.
    a, _ = pair
    datafile.seek(123)
    assert _run(any_loop, any_loop.sock_sendfile(a, datafile, len(DATA), fallback=False)) == 0
    stock_before_314 = not isinstance(any_loop, ringloop.Loop) and sys.version_info < (3, 14)
    assert datafile.tell() == (123 if stock_before_314 else len(DATA))


def test_sendfile_empty_file(any_loop, pair):
    a, _ = pair
    with tempfile.TemporaryFile() as f:
        assert _run(any_loop, any_loop.sock_sendfile(a, f, fallback=False)) == 0
        assert f.tell() == 0


def test_sendfile_pipe_is_not_native(any_loop, pair):
    # ringloop refuses a pipe with SendfileNotAvailableError (the caller may fall back), as
    # stock asyncio does up to 3.13. Stock 3.14 resets the file position before it reports
    # the failed sendfile(2), and lseek() on a pipe raises ESPIPE instead: that is the oracle's
    # behaviour on 3.14, not ringloop's.
    a, _ = pair
    r, w = os.pipe()
    stock_314 = not isinstance(any_loop, ringloop.Loop) and sys.version_info >= (3, 14)
    with open(r, "rb") as pipe, open(w, "wb"):
        with pytest.raises(OSError if stock_314 else asyncio.SendfileNotAvailableError) as info:
            _run(any_loop, any_loop.sock_sendfile(a, pipe, 0, 5, fallback=False))
    if stock_314:
        assert info.value.errno == errno.ESPIPE


def test_sendfile_pipe_without_count_is_not_native(rl_loop, pair):
    # asyncio's native path trusts st_size, so it "sends" a pipe's 0 bytes and reports success
    # without reading it. (BaseEventLoop's fallback cannot send a pipe either: it seeks.)
    a, _ = pair
    r, w = os.pipe()
    with open(r, "rb") as pipe, open(w, "wb") as wf:
        wf.write(b"never read")
        wf.flush()
        with pytest.raises(asyncio.SendfileNotAvailableError):
            _run(rl_loop, rl_loop.sock_sendfile(a, pipe, fallback=False))


def test_sendfile_cancelled_moves_file_position(rl_loop, pair, datafile):
    # asyncio leaves the position untouched when cancelled; ringloop puts it after the bytes
    # that went out, as it does after success or failure.
    a, b = pair

    async def main():
        send = asyncio.ensure_future(rl_loop.sock_sendfile(a, datafile, fallback=False))
        await asyncio.sleep(0.01)  # the buffers fill and sendfile waits
        assert not send.done()
        send.cancel()
        with pytest.raises(asyncio.CancelledError):
            await send

    _run(rl_loop, main())
    received = bytearray()
    while True:
        try:
            chunk = b.recv(1 << 20)
        except BlockingIOError:
            break
        received += chunk
    assert 0 < len(received) < len(DATA)
    assert bytes(received) == DATA[: len(received)]
    assert datafile.tell() == len(received)
    assert rl_loop._fd_callbacks(a.fileno()) == (None, None)


def test_buffered_file_position_after_sendfile(rl_loop, pair, datafile):
    # asyncio moves the position with os.lseek() behind the buffered reader's back, so its
    # tell() and read() then disagree with the file.
    a, b = pair
    reader = open(datafile.fileno(), "rb", closefd=False)  # buffered, with read-ahead
    assert reader.read(10) == DATA[:10]

    async def main():
        send = asyncio.ensure_future(rl_loop.sock_sendfile(a, reader, 10, 5000))
        got = await _recv_exactly(rl_loop, b, 5000)
        assert await send == 5000
        return got

    with reader:
        assert _run(rl_loop, main()) == DATA[10:5010]
        assert reader.tell() == 5010
        assert reader.read(4) == DATA[5010:5014]


def test_sendfile_peer_gone_midway(any_loop, pair, datafile):
    a, b = pair

    async def main():
        send = asyncio.ensure_future(any_loop.sock_sendfile(a, datafile, fallback=False))
        await asyncio.sleep(0.01)
        assert not send.done()
        b.close()
        with pytest.raises(ConnectionError):
            await send

    _run(any_loop, main())
