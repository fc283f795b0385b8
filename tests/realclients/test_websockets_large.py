"""The websockets library (its asyncio implementation), server and client both on the loop
under test, echoing 20 MB messages, binary and text, and a stream of 400 small ones, with
``compression="deflate"`` and without; every echo compared in full.

Each case sends a message twice: as one 20 MB frame (the client's reader assembles it from
hundreds of reads) and as a fragmented message of uneven frames, which the server's
assembler queues -- past ``max_queue`` frames it pauses the transport and resumes it as
``recv()`` drains the queue, the flow-control path on which ringloop once reordered bytes.
The text message mixes 2-, 3- and 4-byte UTF-8 characters so that reads and fragments split
characters, and both sides validate UTF-8. The payloads are random but (with deflate)
compressible, so the compressor runs at speed and no two stretches of a message are alike.

The stream of small messages is sent while the echoes come back and are read slowly: the
client's queue passes ``max_queue`` and its reading is paused and resumed over and over with
small reads -- on io_uring those stay on the multishot recv, where the reordering happened
(at ringloop 49fb5f4 this case failed every time with "invalid opcode" or "decompression
failed"; the 20 MB messages, read on readiness, did not show it).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from realclient_helpers import HOST, MiB, run
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

pytestmark = pytest.mark.timeout(60)

SIZE = 20_000_000
# Uneven fragment sizes; a 20 MB message becomes about 40 frames, far above max_queue.
FRAGMENTS = (1_000_003, 7, 65_536, 300_001)
MAX_QUEUE = 4

_messages: dict[tuple[str, bool], bytes | str] = {}

# Text is made of 256 "words" mixing 1-, 2-, 3- and 4-byte UTF-8 characters, picked at random:
# as compressible as prose (deflate finds matches and runs fast), random everywhere.
_WORDS = [
    "".join(
        random.Random(i).choices("abcdefghijklmnopqrstuvwxyz\u00e9\u20ac\U0001d11e", k=1 + i % 9)
    )
    + " "
    for i in range(256)
]


def message(kind: str, compressible: bool) -> bytes | str:
    key = (kind, compressible or kind == "text")  # text is always compressible
    if key not in _messages:
        if kind == "binary":
            raw = os.urandom(SIZE)
            # Low nibble only: 4 bits of entropy, a fast job for deflate, still random.
            _messages[key] = (
                raw.translate(bytes(i & 0x0F for i in range(256))) if compressible else raw
            )
        else:
            _messages[key] = "".join(map(_WORDS.__getitem__, os.urandom(SIZE // 6)))
    return _messages[key]


def fragments(msg: bytes | str):
    pos = i = 0
    while pos < len(msg):
        n = FRAGMENTS[i % len(FRAGMENTS)]
        i += 1
        yield msg[pos : pos + n]
        pos += n


async def _echo(ws) -> None:
    async for msg in ws:
        await ws.send(msg)


async def _round_trips(msg: bytes | str, compression: str | None) -> list[bytes | str]:
    limits = {"max_size": 2 * SIZE * 4, "max_queue": MAX_QUEUE, "compression": compression}
    async with serve(_echo, HOST, 0, **limits) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://{HOST}:{port}", **limits) as ws:
            negotiated = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            assert ("permessage-deflate" in negotiated) == (compression == "deflate"), negotiated
            echoes = []
            await ws.send(msg)
            echoes.append(await ws.recv())
            await ws.send(fragments(msg))
            echoes.append(await ws.recv())
            return echoes


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
@pytest.mark.parametrize("kind", ["binary", "text"])
def test_echo_20mb(loop, kind, compression):
    msg = message(kind, compressible=compression == "deflate")
    whole, fragmented = run(loop, _round_trips(msg, compression))
    for name, got in (("whole", whole), ("fragmented", fragmented)):
        assert type(got) is type(msg), f"{name}: {type(got).__name__} echoed for {kind}"
        assert len(got) == len(msg), f"{name}: {len(got)} echoed of {len(msg)}"
        assert got == msg, f"{name}: the echo differs from the message"
    assert len(msg if kind == "binary" else msg.encode()) >= SIZE > 19 * MiB


SMALL_COUNT = 400


async def _stream(msgs: list[bytes | str], compression: str | None) -> list[bytes | str]:
    limits = {"max_size": SIZE, "max_queue": MAX_QUEUE, "compression": compression}
    async with serve(_echo, HOST, 0, **limits) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://{HOST}:{port}", **limits) as ws:

            async def sender() -> None:
                for m in msgs:
                    await ws.send(m)

            sending = asyncio.create_task(sender())
            echoes = []
            try:
                for _ in msgs:
                    echoes.append(await ws.recv())
                    if len(echoes) % 16 == 0:
                        # A slow reader: echoes queue up past max_queue, reading pauses.
                        await asyncio.sleep(0.002)
            finally:
                if not sending.done():
                    sending.cancel()
            await sending
            return echoes


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_echo_stream_of_small(loop, compression):
    rnd = random.Random(40)
    msgs: list[bytes | str] = [
        os.urandom(rnd.randint(0, 20_000)) if i % 3 else "".join(rnd.choices(_WORDS, k=i % 50))
        for i in range(SMALL_COUNT)
    ]
    echoes = run(loop, _stream(msgs, compression))
    assert len(echoes) == len(msgs)
    for i, (want, got) in enumerate(zip(msgs, echoes, strict=True)):
        assert type(got) is type(want) and got == want, f"echo {i} differs from message {i}"
