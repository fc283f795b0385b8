"""redis-py's asyncio client (``redis.asyncio``) against a real ``redis-server`` (Debian's,
started by the ``redis_server`` fixture), on the loop under test: pub/sub of 400 binary
messages from empty to 3 MiB over two channels, every message compared and in order.

redis-py reads through an ``asyncio.StreamReader``, which pauses the transport from inside
``data_received`` once its buffer passes its limit and resumes it from the reading task --
the flow-control path on which ringloop once reordered received bytes. Multi-MiB messages
arrive as hundreds of reads around many such pauses; the subscriber also sleeps now and then
so the server's output piles up. RESP frames each message with its length, so a reordered
or lost byte shows up as a wrong message, a protocol error or a hang (bounded by a timeout).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest
import redis.asyncio as aioredis
from realclient_helpers import MiB, run

# func_only: the first test also pays for installing and starting redis-server, which the
# fixture bounds with its own time limits.
pytestmark = pytest.mark.timeout(60, func_only=True)

CHANNELS = (b"ringloop:a", b"ringloop:b")
COUNT = 400


def messages() -> list[tuple[bytes, bytes]]:
    """(channel, payload) pairs: mostly small, every 40th at least 1 MiB, and once a run of
    sizes at the edges of common buffer sizes. Each payload of 7 bytes or more starts with its
    index, so a swap is easy to read.

    The long stretches of small messages matter: ringloop's io_uring transport switches to
    readiness reads after a large read and back to its multishot recv after 32 small ones,
    and the reordering this guards against happened on the recv side. (At ringloop 49fb5f4,
    with a medium message every 10th the test passed; with these stretches it failed.)
    """
    rnd = random.Random(30)
    edges = {200: 0, 201: 1, 202: 65_535, 203: 65_536, 204: 65_537, 205: 262_144}
    out = []
    for i in range(COUNT):
        if i in edges:
            size = edges[i]
        elif i % 40 == 39:
            size = rnd.randint(1 * MiB, 3 * MiB)
        else:
            size = rnd.randint(0, 20_000)
        tag = b"%06d:" % i
        payload = tag + os.urandom(size - len(tag)) if size >= len(tag) else os.urandom(size)
        out.append((CHANNELS[i % len(CHANNELS)], payload))
    return out


async def _pubsub(url: str, sent: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    sub = aioredis.Redis.from_url(url)
    pub = aioredis.Redis.from_url(url)
    pubsub = sub.pubsub()
    try:
        await pubsub.subscribe(*CHANNELS)
        for _ in CHANNELS:
            confirm = await pubsub.get_message(timeout=10)
            assert confirm is not None and confirm["type"] == "subscribe", confirm

        async def publish() -> None:
            for channel, payload in sent:
                receivers = await pub.publish(channel, payload)
                assert receivers == 1, f"{receivers} subscribers got the message"

        publisher = asyncio.create_task(publish())
        received = []
        while len(received) < len(sent):
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=10)
            assert msg is not None, f"no message for 10 s after {len(received)} of {len(sent)}"
            received.append((msg["channel"], msg["data"]))
            if len(received) % 16 == 0:
                # A slow subscriber: redis keeps sending while reading is paused.
                await asyncio.sleep(0.002)
        await publisher
        return received
    finally:
        await pubsub.aclose()
        await sub.aclose()
        await pub.aclose()


def test_pubsub_in_order(loop, redis_server):
    sent = messages()
    assert sum(len(p) for _, p in sent) > 20 * MiB
    received = run(loop, _pubsub(redis_server.url, sent))
    assert len(received) == len(sent)
    for i, (want, got) in enumerate(zip(sent, received, strict=True)):
        assert got[0] == want[0], f"message {i} arrived on {got[0]!r}, sent on {want[0]!r}"
        assert len(got[1]) == len(want[1]), f"message {i}: {len(got[1])} bytes of {len(want[1])}"
        assert got[1] == want[1], f"message {i} arrived as {got[1][:16]!r}..., bytes differ"
