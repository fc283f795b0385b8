"""The loop's sock_* coroutines on non-blocking sockets.

asyncio facts encoded here:

* sock_recv returns b"" at EOF; sock_recv_into / sock_recvfrom_into return byte counts;
* sock_accept returns a connection that is already non-blocking;
* connecting to a bound but non-listening TCP port raises ConnectionRefusedError;
* a blocking socket is refused with ValueError -- asyncio only checks this in debug mode
  (without debug it would block the loop), so these tests run with ``set_debug(True)``;
* cancelling a pending sock_recv consumes nothing: the next sock_recv gets the bytes.
"""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from loop_helpers import PROMPT, run_with_timeout

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def udp_pair():
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    yield socks
    for s in socks:
        s.close()


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.setblocking(False)
    yield srv
    srv.close()


def test_sock_recv_waits_for_data(loop, pair):
    a, b = pair

    async def main():
        task = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0.01)
        assert not task.done()
        await loop.sock_sendall(b, b"hello")
        return await task

    assert run_with_timeout(loop, main()) == b"hello"


def test_sock_recv_eof(loop, pair):
    a, b = pair

    async def main():
        task = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0.01)
        b.shutdown(socket.SHUT_WR)
        return await task

    assert run_with_timeout(loop, main()) == b""


def test_sock_recv_into(loop, pair):
    a, b = pair
    buf = bytearray(10)

    async def main():
        task = asyncio.ensure_future(loop.sock_recv_into(a, buf))
        await asyncio.sleep(0.01)
        b.send(b"abc")
        n = await task
        b.send(b"0123456789ABCDEF")
        m = await loop.sock_recv_into(a, memoryview(buf)[2:])
        return n, m

    n, m = run_with_timeout(loop, main())
    assert n == 3 and m == 8
    assert bytes(buf) == b"ab01234567"


def test_sock_sendto_recvfrom(loop, udp_pair):
    s1, s2 = udp_pair
    addr1, addr2 = s1.getsockname(), s2.getsockname()

    async def main():
        task = asyncio.ensure_future(loop.sock_recvfrom(s2, 100))
        await asyncio.sleep(0.01)
        assert not task.done()
        sent = await loop.sock_sendto(s1, b"datagram", addr2)
        data, frm = await task
        return sent, data, frm

    sent, data, frm = run_with_timeout(loop, main())
    assert (sent, data, frm) == (8, b"datagram", addr1)


def test_sock_recvfrom_into(loop, udp_pair):
    s1, s2 = udp_pair
    buf = bytearray(64)

    async def main():
        task = asyncio.ensure_future(loop.sock_recvfrom_into(s2, buf))
        await asyncio.sleep(0.01)
        await loop.sock_sendto(s1, b"into", s2.getsockname())
        n1, frm = await task
        await loop.sock_sendto(s1, b"limited", s2.getsockname())
        n2, _ = await loop.sock_recvfrom_into(s2, memoryview(buf)[10:], 3)
        return n1, frm, n2

    n1, frm, n2 = run_with_timeout(loop, main())
    assert (n1, frm) == (4, s1.getsockname())
    assert n2 == 3
    assert bytes(buf[:4]) == b"into" and bytes(buf[10:13]) == b"lim"


def test_sock_sendall_large_payload(loop, pair):
    a, b = pair
    payload = os.urandom(1 << 16) * 64  # 4 MiB, larger than any socket buffer

    async def reader():
        chunks, n = [], 0
        while n < len(payload):
            chunk = await loop.sock_recv(b, 1 << 16)
            assert chunk, "EOF before the payload arrived"
            chunks.append(chunk)
            n += len(chunk)
        return b"".join(chunks)

    async def main():
        rtask = asyncio.ensure_future(reader())
        result = await loop.sock_sendall(a, payload)
        return result, await rtask

    result, received = run_with_timeout(loop, main(), 20)
    assert result is None
    assert len(received) == len(payload) and received == payload


def test_sock_connect_and_accept(loop, listener):
    addr = listener.getsockname()

    async def main():
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        try:
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await asyncio.sleep(0.01)
            assert not accept.done()
            assert await loop.sock_connect(client, addr) is None
            conn, peer = await accept
            try:
                assert peer == client.getsockname()
                assert conn.gettimeout() == 0  # non-blocking, ready for sock_*
                await loop.sock_sendall(client, b"ping")
                assert await loop.sock_recv(conn, 10) == b"ping"
                await loop.sock_sendall(conn, b"pong")
                return await loop.sock_recv(client, 10)
            finally:
                conn.close()
        finally:
            client.close()

    assert run_with_timeout(loop, main()) == b"pong"


def test_sock_connect_refused(loop):
    # A bound socket that does not listen: the kernel answers SYN with RST.
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setblocking(False)
    try:
        with pytest.raises(ConnectionRefusedError):
            run_with_timeout(loop, loop.sock_connect(client, holder.getsockname()))
    finally:
        client.close()
        holder.close()


def test_sock_sendfile(loop, pair, tmp_path):
    a, b = pair
    data = os.urandom(1 << 20)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)

    async def reader(n):
        chunks, got = [], 0
        while got < n:
            chunk = await loop.sock_recv(b, 1 << 16)
            assert chunk
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    async def main():
        with open(path, "rb") as f:
            rtask = asyncio.ensure_future(reader(len(data)))
            sent = await loop.sock_sendfile(a, f)
            whole = await rtask
            pos_after = f.tell()
            rtask = asyncio.ensure_future(reader(1000))
            sent_part = await loop.sock_sendfile(a, f, offset=10, count=1000)
            part = await rtask
            return sent, whole, pos_after, sent_part, part, f.tell()

    sent, whole, pos_after, sent_part, part, pos_end = run_with_timeout(loop, main(), 20)
    assert sent == len(data) and whole == data and pos_after == len(data)
    assert sent_part == 1000 and part == data[10:1010] and pos_end == 1010


@pytest.mark.parametrize(
    "op",
    [
        "sock_recv",
        "sock_recv_into",
        "sock_sendall",
        "sock_recvfrom",
        "sock_sendto",
        "sock_connect",
        "sock_accept",
    ],
)
def test_blocking_socket_refused(loop, op):
    loop.set_debug(True)  # asyncio only checks in debug mode
    kind = socket.SOCK_DGRAM if op in ("sock_recvfrom", "sock_sendto") else socket.SOCK_STREAM
    s = socket.socket(socket.AF_INET, kind)
    assert s.gettimeout() is None  # blocking
    calls = {
        "sock_recv": lambda: loop.sock_recv(s, 10),
        "sock_recv_into": lambda: loop.sock_recv_into(s, bytearray(10)),
        "sock_sendall": lambda: loop.sock_sendall(s, b"x"),
        "sock_recvfrom": lambda: loop.sock_recvfrom(s, 10),
        "sock_sendto": lambda: loop.sock_sendto(s, b"x", ("127.0.0.1", 9)),
        "sock_connect": lambda: loop.sock_connect(s, ("127.0.0.1", 9)),
        "sock_accept": lambda: loop.sock_accept(s),
    }
    try:
        with pytest.raises(ValueError):
            run_with_timeout(loop, calls[op]())
    finally:
        s.close()


def test_cancelled_sock_recv_consumes_nothing(loop, pair):
    a, b = pair

    async def main():
        for _ in range(3):
            task = asyncio.ensure_future(loop.sock_recv(a, 100))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        b.send(b"after cancel")
        first = await asyncio.wait_for(loop.sock_recv(a, 100), PROMPT)
        # add_reader on the same socket still works after the cancelled operations.
        got = loop.create_future()
        loop.add_reader(a, lambda: got.done() or got.set_result(a.recv(100)))
        b.send(b"via reader")
        try:
            second = await asyncio.wait_for(got, PROMPT)
        finally:
            loop.remove_reader(a)
        b.send(b"again")
        third = await asyncio.wait_for(loop.sock_recv(a, 100), PROMPT)
        return first, second, third

    assert run_with_timeout(loop, main()) == (b"after cancel", b"via reader", b"again")


def test_cancel_then_data_race_in_same_iteration(loop, pair):
    # Data arrives and the pending recv is cancelled before the loop looks again: whatever the
    # backend already read must not be lost.
    a, b = pair

    async def main():
        task = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0.01)
        b.send(b"racy")
        task.cancel()
        try:
            early = await task
        except asyncio.CancelledError:
            early = b""
        rest = b""
        if early != b"racy":
            rest = await asyncio.wait_for(loop.sock_recv(a, 100), PROMPT)
        return early + rest

    assert run_with_timeout(loop, main()) == b"racy"


def test_concurrent_recv_on_many_pairs(loop):
    n = 50
    pairs = [socket.socketpair() for _ in range(n)]
    for a, b in pairs:
        a.setblocking(False)
        b.setblocking(False)

    async def echo(i, a, b):
        rtask = asyncio.ensure_future(loop.sock_recv(b, 100))
        await loop.sock_sendall(a, b"%d" % i)
        return await rtask

    async def main():
        return await asyncio.gather(*(echo(i, a, b) for i, (a, b) in enumerate(pairs)))

    try:
        assert run_with_timeout(loop, main(), 20) == [b"%d" % i for i in range(n)]
    finally:
        for a, b in pairs:
            a.close()
            b.close()
