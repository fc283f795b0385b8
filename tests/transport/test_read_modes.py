"""Reads keep their bytes and their order however the transport reads.

On io_uring a stream transport reads with a multishot recv into the loop's ring buffers. A read
of 64 KiB or more switches it to reading on readiness (one ``recv`` straight into an exact-size
``bytes``, one copy instead of two), and 32 small reads in a row switch it back. Going bulk
stops the multishot recv and installs the reader only after the recv's last read, so nothing
may overtake what the recv still delivers. These tests drive transports through many switches,
with pauses, EOF and BufferedProtocol buffers in between, and compare the bytes. They run on
every loop (asyncio is the oracle); the mode itself is checked on ringloop's io_uring backend.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest
from transport_helpers import Recorder, pattern, raw_peer, run, settle

pytestmark = pytest.mark.timeout(120)

LARGE = 300_000
SMALL = 100
SMALL_ROUNDS = 40  # more than the 32 small reads that switch back


class Collector(asyncio.BufferedProtocol):
    """A BufferedProtocol whose buffers are 16 KiB slices of one big bytearray."""

    def __init__(self, total: int) -> None:
        self.big = bytearray(total + 16 * 1024)
        self.pos = 0
        self.view: memoryview | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int):
        self.view = memoryview(self.big)[self.pos : self.pos + 16 * 1024]
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)

    @property
    def data(self) -> bytes:
        return bytes(self.big[: self.pos])


def read_mode(loop_kind: str, tr) -> str | None:
    """The native transport's read mode on io_uring; ``None`` where there is none to check."""
    return tr._io.read_mode if loop_kind == "ringloop-io_uring" else None


def assert_data_then_eof(events: list[str]) -> None:
    # The transport closes itself after eof_received (which returned None): "lost" may follow.
    eof = events.index("eof")
    assert events[0] == "made" and set(events[1:eof]) == {"data"}, events
    assert events[eof + 1 :] in ([], ["lost"]), events


async def wait_for_len(proto, n: int, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(proto.data) < n:
        assert asyncio.get_running_loop().time() < deadline, f"got {len(proto.data)} of {n} bytes"
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("api", ["protocol", "buffered"])
def test_bytes_stay_in_order_across_read_mode_switches(loop, loop_kind, family, api):
    async def main():
        rounds = 3
        total = rounds * (LARGE + SMALL_ROUNDS * SMALL)
        payload = pattern(total, seed=5)
        proto = Recorder() if api == "protocol" else Collector(total)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            pos = 0
            for _ in range(rounds):
                await loop.sock_sendall(peer, payload[pos : pos + LARGE])
                pos += LARGE
                await wait_for_len(proto, pos)
                await settle(loop)
                if family.name == "tcp":
                    # A Unix socket's reads follow the writer's chunking, which may stay small.
                    assert read_mode(loop_kind, tr) in (None, "readiness")
                for _ in range(SMALL_ROUNDS):
                    # One small read at a time: each is received before the next is sent.
                    await loop.sock_sendall(peer, payload[pos : pos + SMALL])
                    pos += SMALL
                    await wait_for_len(proto, pos)
                assert read_mode(loop_kind, tr) in (None, "multishot")
            assert proto.data == payload
            tr.close()

    run(loop, main())


class RandomPauses(Recorder):
    """Pauses reading after some reads (seeded) and resumes one to three callbacks later,
    so pauses land before, during and after switches of the read mode."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.paused_reads = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_reading() and self.rng.random() < 0.3:
            self.transport.pause_reading()
            self.paused_reads += 1
            self._resume_after(self.rng.randint(1, 3))

    def _resume_after(self, hops: int) -> None:
        loop = asyncio.get_running_loop()
        if hops:
            loop.call_soon(self._resume_after, hops - 1)
        elif not self.transport.is_closing():
            self.transport.resume_reading()


def test_random_pauses_during_switches_lose_nothing(loop, family):
    async def main():
        rng = random.Random(9)
        sizes = [rng.choice([50, 700, 9_000, 70_000, 150_000, 400_000]) for _ in range(120)]
        payload = pattern(sum(sizes), seed=13)
        proto = RandomPauses(seed=21)
        async with raw_peer(loop, family, proto) as (tr, proto, peer):
            pos = 0
            for size in sizes:
                await loop.sock_sendall(peer, payload[pos : pos + size])
                pos += size
                if size < 1_000:
                    # Let small writes arrive as reads of their own.
                    await wait_for_len(proto, pos)
            peer.shutdown(socket.SHUT_WR)
            assert await asyncio.wait_for(proto.eof, 30) is None
            assert bytes(proto.data) == payload
            assert proto.paused_reads > 10
            assert_data_then_eof(proto.events)

    run(loop, main())


def test_eof_right_behind_a_large_send_comes_after_its_bytes(loop, loop_kind, family):
    async def main():
        for seed in range(5):
            payload = pattern(LARGE + seed * 7_777, seed=seed)
            async with raw_peer(loop, family) as (tr, proto, peer):
                await loop.sock_sendall(peer, payload)
                peer.shutdown(socket.SHUT_WR)
                await asyncio.wait_for(proto.eof, 20)
                assert bytes(proto.data) == payload
                assert_data_then_eof(proto.events)

    run(loop, main())
