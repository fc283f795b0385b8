"""Load: many concurrent loopback connections, and many short-lived ones, with zero errors
and no leaked fds or memory.

* ``test_10k_concurrent_echo``: 10,000 TCP connections open at the same time, each echoing
  two distinct messages. Server and clients share the loop under test when RLIMIT_NOFILE can
  hold both ends (20,000+ fds); the test raises the soft limit itself. If the *hard* limit is
  too low for that but holds one end, the clients run in a child process on a loop of the same
  kind (``load_clients.py``) and the server side stays on the loop under test; only a hard
  limit below one end's needs skips.
* ``test_2k_concurrent_streams_echo``: the same through ``asyncio.start_server`` /
  ``open_connection`` (StreamReader/StreamWriter over the transports).
* ``test_100k_short_lived_connections`` (``slow``): connect, echo, close, in batches of a few
  hundred; after a warm-up the fd count must come back to its baseline exactly and RSS must not
  grow by more than ``RSS_BOUND``. About 20 s per loop kind on a 2-core box.

Every server here closes first (see load_clients.py): the TIME_WAIT entries stay on the
server's port and the client side never runs out of ephemeral ports.
"""

from __future__ import annotations

import asyncio
import gc
import json
import pathlib
import subprocess
import sys
import time

import pytest
from load_clients import MSG_LEN, Census, EchoClient, EchoServer, concurrent_clients, message
from transport_helpers import HOST, open_fds, raise_nofile, rss_bytes, run

N_CONCURRENT = 10_000
N_STREAMS = 2_000
SLOTS = 500  # connects in flight at once (below somaxconn, see concurrent_clients)
BACKLOG = 1024
RSS_BOUND = 20 * 1024 * 1024
FD_HEADROOM = 256  # pytest, the loop's own fds, the child pipe, the listener


@pytest.mark.timeout(300)
def test_10k_concurrent_echo(loop, loop_kind):
    n = N_CONCURRENT
    same_loop, why = raise_nofile(2 * n + open_fds() + FD_HEADROOM)
    if not same_loop:
        ok, why_child = raise_nofile(n + open_fds() + FD_HEADROOM)
        if not ok:
            pytest.skip(f"cannot hold {n} connections: {why_child}")
        print(f"{why}: clients run in a child process on a {loop_kind} loop")

    async def main():
        census = Census()
        server = await loop.create_server(
            lambda: EchoServer(census, close_after=2 * MSG_LEN), HOST, 0, backlog=BACKLOG
        )
        addr = server.sockets[0].getsockname()
        async with server:
            if same_loop:
                report = await concurrent_clients(loop, addr, n, SLOTS)
            else:
                report = await loop.run_in_executor(None, _clients_in_child, loop_kind, addr, n)
        return report, census

    started = time.perf_counter()
    report, census = run(loop, main(), timeout=240)
    print(
        f"{loop_kind}: {n} concurrent connections "
        f"({'same loop' if same_loop else 'clients in a child'}) "
        f"in {time.perf_counter() - started:.1f}s"
    )
    assert report["n"] == n
    assert report["errors"] == 0, report["first_errors"]
    assert census.total == n
    assert census.peak == n, "not all connections were open at the same time"
    assert census.live == 0


def _clients_in_child(kind: str, addr, n: int) -> dict:
    script = pathlib.Path(__file__).with_name("load_clients.py")
    out = subprocess.run(
        [sys.executable, str(script), kind, addr[0], str(addr[1]), str(n), str(SLOTS)],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(180)
def test_2k_concurrent_streams_echo(loop):
    n = N_STREAMS
    ok, why = raise_nofile(2 * n + open_fds() + FD_HEADROOM)
    if not ok:
        pytest.skip(why)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        all_in = loop.create_future()
        arrived = 0

        async def one(i: int) -> bytes:
            nonlocal arrived
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            finally:
                arrived += 1
                if arrived == n:
                    all_in.set_result(None)
            try:
                await all_in  # every connection is open before any line is sent
                lines = [b"%d:%d %s\n" % (i, k, b"x" * (i % 97)) for k in range(3)]
                for line in lines:
                    writer.write(line)
                    await writer.drain()
                    assert await reader.readline() == line
                writer.write_eof()
                assert await reader.read() == b""
            finally:
                writer.close()
                await writer.wait_closed()

        server = await asyncio.start_server(handle, HOST, 0, backlog=max(BACKLOG, n + 100))
        port = server.sockets[0].getsockname()[1]
        async with server:
            results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
        errors = [repr(r) for r in results if r is not None]
        assert errors == [], f"{len(errors)} errors, first: {errors[:5]}"

    run(loop, main(), timeout=150)


# -- short-lived connections: nothing leaks ------------------------------------------------------


async def _short_lived(loop, addr, first: int, count: int, batch: int) -> None:
    """``count`` connections, ``batch`` at a time: connect, send one message, read the echo
    until the server closes, close."""

    async def one(i: int) -> None:
        proto = EchoClient()
        tr, _ = await loop.create_connection(lambda: proto, *addr)
        tr.write(message(i, 0))
        exc = await proto.lost
        assert exc is None, f"connection {i}: connection_lost({exc!r})"
        assert proto.data == message(i, 0), f"connection {i}: {bytes(proto.data)!r}"

    for start in range(first, first + count, batch):
        stop = min(start + batch, first + count)
        results = await asyncio.gather(
            *(one(i) for i in range(start, stop)), return_exceptions=True
        )
        errors = [r for r in results if r is not None]
        assert not errors, f"{len(errors)} errors in batch at {start}, first: {errors[0]!r}"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_100k_short_lived_connections(loop, loop_kind):
    total = 100_000
    warmup, batch = 5_000, 250

    async def main():
        census = Census()
        server = await loop.create_server(
            lambda: EchoServer(census, close_after=MSG_LEN), HOST, 0, backlog=BACKLOG
        )
        addr = server.sockets[0].getsockname()
        async with server:
            await _short_lived(loop, addr, 0, warmup, batch)
            gc.collect()
            base_fds, base_rss = open_fds(), rss_bytes()
            started = time.perf_counter()
            await _short_lived(loop, addr, warmup, total - warmup, batch)
            elapsed = time.perf_counter() - started
            # The server closes first, so its transports may still be finishing when the
            # clients are done; wait for them (events, not time).
            while census.live:
                await asyncio.sleep(0)
            gc.collect()
            end_fds, end_rss = open_fds(), rss_bytes()
        return census, base_fds, end_fds, base_rss, end_rss, elapsed

    census, base_fds, end_fds, base_rss, end_rss, elapsed = run(loop, main(), timeout=360)
    grown = end_rss - base_rss
    print(
        f"{loop_kind}: {total} short-lived connections, {total - warmup} measured in "
        f"{elapsed:.1f}s; fds {base_fds} -> {end_fds}; "
        f"RSS {base_rss / 2**20:.1f} -> {end_rss / 2**20:.1f} MiB ({grown / 2**20:+.1f} MiB)"
    )
    assert census.total == total and census.live == 0
    # A leak shows as more fds at the end; fewer happens when an fd the process held before the
    # count (a previous test's, closed by its garbage being collected meanwhile) goes away.
    assert end_fds <= base_fds, f"fd leak: {base_fds} -> {end_fds}"
    assert grown < RSS_BOUND, f"RSS grew by {grown / 2**20:.1f} MiB over {total - warmup}"
