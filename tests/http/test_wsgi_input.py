"""`wsgi.input` (python/ringloop/server/wsgi.py `_Input`) against the bytes it was given:
seeded random sequences of read(n), read() and readline(n) over bodies cut into random
pieces, as `receive` hands them over, must return exactly what a file over the whole body
would."""

from __future__ import annotations

import io
import random

import pytest
from ringloop.server.wsgi import _Input


class _Bridge:
    """The loop's side of `_Input._more`: pieces until `want` bytes or the end."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.trips = 0

    def call(self, _fn, _receive, want: int):
        self.trips += 1
        parts, size = [], 0
        while size < want and self.pieces:
            part = self.pieces.pop(0)
            parts.append(part)
            size += len(part)
        return parts, bool(self.pieces)


def _pieces(rnd: random.Random, data: bytes) -> list[bytes]:
    if len(data) < 2:
        return [data] if data else []
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randrange(0, 8))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("seed", range(400))
def test_reads_match_a_file_over_the_whole_body(seed):
    rnd = random.Random(seed)
    data = bytes(rnd.choice(b"ab\n") for _ in range(rnd.randrange(0, 300)))
    stream = _Input(_Bridge(_pieces(rnd, data)), None, bool(data))
    reference = io.BytesIO(data)
    for _ in range(40):
        op = rnd.randrange(3)
        if op == 0:
            n = rnd.randrange(-1, 60)
            assert stream.read(n) == reference.read(n)
        elif op == 1:
            n = rnd.choice([-1, rnd.randrange(0, 20)])
            assert stream.readline(n) == reference.readline(n)
        else:
            hint = rnd.randrange(-1, 30)
            assert stream.readlines(hint) == reference.readlines(hint)
    assert stream.read() == reference.read()


def test_a_read_of_the_whole_body_is_one_trip():
    bridge = _Bridge([b"x" * 1000 for _ in range(50)])
    stream = _Input(bridge, None, True)
    assert stream.read() == b"x" * 50_000
    assert bridge.trips == 1


def test_a_read_that_matches_a_piece_returns_that_piece():
    piece = b"y" * 4096
    stream = _Input(_Bridge([piece, b"z"]), None, True)
    assert stream.read(4096) is piece
