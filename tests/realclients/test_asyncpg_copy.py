"""asyncpg against a real PostgreSQL (Debian's, started by the ``postgres`` fixture), on the
loop under test: several MB through ``COPY ... FROM STDIN`` and ``COPY ... TO STDOUT``, and
back through an ordinary query, every row and byte compared.

asyncpg's COPY OUT is flow control at its barest: each batch of ``CopyData`` that arrives
pauses the transport from inside ``data_received``, and the task that hands the batch to the
output sink resumes it -- thousands of pause/resume cycles per COPY, the pattern that once
reordered received bytes on ringloop's io_uring transport (a reordered batch breaks the
protocol or the rows). The sink here also sleeps now and then, so data piles up in the kernel
while reading is paused.

The text-format rows are written in PostgreSQL's canonical output form (integers, text with
no escapes, UTF-8, ``bytea`` in lower-case hex), so the bytes of COPY OUT must equal the
bytes given to COPY IN exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import os
import random

import asyncpg
import pytest
from realclient_helpers import pieces, run

# func_only: the first test also pays for installing and starting PostgreSQL, which the
# fixture bounds with its own time limits.
pytestmark = pytest.mark.timeout(60, func_only=True)

ROWS = 40_000

_WORDS = ["ringloop", "caf\u00e9", "\u20ac10", "\U0001d11e", "x" * 200, "io_uring", "epoll", ""]


def copy_text() -> bytes:
    """About 8 MB of rows ``id, name, blob, note`` in COPY's text format, id order."""
    rnd = random.Random(20)
    lines = []
    for i in range(ROWS):
        name = " ".join(rnd.choices(_WORDS, k=rnd.randint(0, 6)))
        blob = os.urandom(rnd.randint(0, 120)).hex()
        note = "\\N" if i % 17 == 0 else str(rnd.getrandbits(64))
        lines.append(f"{i}\t{name}\t\\\\x{blob}\t{note}\n")
    return "".join(lines).encode()


@contextlib.asynccontextmanager
async def _connection(pg):
    conn = await asyncpg.connect(
        host=pg.host, port=pg.port, user=pg.user, database=pg.database, timeout=30
    )
    try:
        yield conn
    except BaseException:
        # Not close(): it waits for the server, over the connection that may be what broke.
        conn.terminate()
        raise
    await conn.close()


# Pieces that cut rows and multi-byte characters in half: COPY IN reassembles them.
_PIECES = (1, 65_536, 8191, 300_007, 1_000_003)


async def _copy_in_and_out(pg, data: bytes):
    async with _connection(pg) as conn:
        await conn.execute(
            "CREATE TEMP TABLE t (id int PRIMARY KEY, name text, blob bytea, note text)"
        )
        status_in = await conn.copy_to_table("t", source=pieces(data, _PIECES))
        # PostgreSQL's own digest of what it stored, independent of COPY OUT.
        stored = await conn.fetchval(
            "SELECT md5(string_agg(concat_ws(',', id, name, encode(blob, 'hex'), note), '|' "
            "ORDER BY id)) FROM t"
        )
        outs = []
        # Three COPY OUTs, the sink sleeping every 10th batch, every 50th, never: whether a
        # resume meets completions already queued depends on that timing.
        for sleep_every in (10, 50, 0):
            received: list[bytes] = []

            async def sink(chunk: bytes, received=received, every=sleep_every) -> None:
                received.append(chunk)
                if every and len(received) % every == 0:
                    # A slow consumer: the server keeps sending while reading is paused.
                    await asyncio.sleep(0.002)

            status = await conn.copy_from_query("SELECT * FROM t ORDER BY id", output=sink)
            outs.append((status, b"".join(received), len(received)))
        return status_in, stored, outs


def _local_md5(data: bytes) -> str:
    parts = []
    for line in data.decode().split("\n")[:-1]:
        id_, name, blob, note = line.split("\t")
        fields = [id_, name, blob.removeprefix("\\\\x")] + ([] if note == "\\N" else [note])
        parts.append(",".join(fields))
    return hashlib.md5("|".join(parts).encode()).hexdigest()


def test_copy_text_in_and_out(loop, postgres):
    data = copy_text()
    assert len(data) > 6_000_000
    status_in, stored, outs = run(loop, _copy_in_and_out(postgres, data))
    assert status_in == f"COPY {ROWS}"
    assert stored == _local_md5(data), "COPY IN stored other rows than were sent"
    for i, (status_out, out, batches) in enumerate(outs):
        assert status_out == f"COPY {ROWS}"
        assert batches > 10, "COPY OUT came in too few batches to pause and resume reading"
        assert len(out) == len(data)
        assert out == data, f"COPY OUT {i + 1} returned other bytes than COPY IN stored"


def records() -> list[tuple]:
    rnd = random.Random(21)
    base = datetime.datetime(2024, 2, 29, 12, 0, tzinfo=datetime.UTC)
    return [
        (
            i,
            rnd.random() * 1e6,
            "".join(rnd.choices(_WORDS, k=rnd.randint(0, 4))),
            os.urandom(rnd.randint(0, 200)),
            base + datetime.timedelta(microseconds=rnd.getrandbits(40)),
            [rnd.getrandbits(31) for _ in range(rnd.randint(0, 8))],
        )
        for i in range(ROWS)
    ]


async def _binary_round_trip(pg, rows: list[tuple]):
    async with _connection(pg) as conn:
        await conn.execute(
            "CREATE TEMP TABLE r (id int PRIMARY KEY, x float8, s text, b bytea, "
            "ts timestamptz, a int[])"
        )
        status = await conn.copy_records_to_table("r", records=rows)
        fetched = await conn.fetch("SELECT id, x, s, b, ts, a FROM r ORDER BY id")
        return status, [tuple(r) for r in fetched]


def test_copy_records_and_fetch(loop, postgres):
    rows = records()
    status, fetched = run(loop, _binary_round_trip(postgres, rows))
    assert status == f"COPY {ROWS}"
    assert len(fetched) == len(rows)
    # Compared field by field so a failure names the first row that differs.
    for want, got in zip(rows, fetched, strict=True):
        assert got == want
