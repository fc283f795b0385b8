"""add_reader / add_writer / remove_reader / remove_writer on socketpairs and pipes.

asyncio facts encoded here (epoll, level-triggered):

* a reader is called once per iteration for as long as the fd stays readable -- a reader that
  consumes one byte per call is called exactly once per byte, then no more;
* ``add_reader`` on an fd that already has one replaces it (the old callback never runs again);
* ``remove_*`` returns True if a callback was registered, else False;
* readers and writers on the same fd are independent;
* file objects with ``fileno()`` are accepted as well as fd numbers;
* EOF on a pipe makes its reader fire (``os.read`` returns b"").
"""

from __future__ import annotations

import os
import socket

import pytest
from loop_helpers import run_forever_with_watchdog

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    fds = [r, w]
    yield fds
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def test_level_triggered_reader_one_byte_per_call(loop, pair):
    a, b = pair
    got = []

    def reader():
        got.append(a.recv(1))
        if len(got) == 10:
            # Drained: stay registered a little to prove no further calls happen.
            loop.call_later(0.05, loop.stop)

    loop.add_reader(a.fileno(), reader)
    b.send(b"0123456789")
    assert not run_forever_with_watchdog(loop)
    assert b"".join(got) == b"0123456789" and len(got) == 10
    assert loop.remove_reader(a.fileno()) is True


def test_reader_args_and_file_object(loop, pair):
    a, b = pair
    got = []

    def reader(x, y):
        got.append((x, y, a.recv(100)))
        loop.stop()

    loop.add_reader(a, reader, "x", 2)  # a socket object, not an int
    b.send(b"hi")
    assert not run_forever_with_watchdog(loop)
    assert got == [("x", 2, b"hi")]
    assert loop.remove_reader(a) is True


def test_replacing_reader(loop, pair):
    a, b = pair
    got = []
    loop.add_reader(a, lambda: got.append("old"))
    loop.add_reader(a, lambda: (got.append(("new", a.recv(10))), loop.stop()))
    b.send(b"x")
    assert not run_forever_with_watchdog(loop)
    assert got == [("new", b"x")]
    assert loop.remove_reader(a) is True


def test_remove_returns_bool(loop, pair):
    a, _ = pair
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is False
    loop.add_reader(a, print)
    loop.add_writer(a, print)
    assert loop.remove_reader(a) is True
    assert loop.remove_reader(a) is False
    assert loop.remove_writer(a) is True
    assert loop.remove_writer(a) is False


def test_removed_reader_not_called(loop, pair):
    a, b = pair
    got = []
    loop.add_reader(a, got.append, "called")
    assert loop.remove_reader(a)
    b.send(b"x")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert got == []


def test_remove_reader_from_callback_of_same_iteration(loop, pair):
    # Both fds ready in the same iteration; the first callback to run removes the other's
    # reader. asyncio may already have queued the other handle, but cancels it on removal.
    a, b = pair
    c, d = socket.socketpair()
    try:
        got = []

        def first(own, other):
            got.append("first")
            loop.remove_reader(other)
            loop.remove_reader(own)

        loop.add_reader(a, first, a, c)
        loop.add_reader(c, first, c, a)
        b.send(b"x")
        d.send(b"x")
        loop.call_later(0.05, loop.stop)
        assert not run_forever_with_watchdog(loop)
        assert got == ["first"]
    finally:
        loop.remove_reader(a)
        loop.remove_reader(c)
        c.close()
        d.close()


def test_writer_fires_when_writable(loop, pair):
    a, _ = pair
    got = []

    def writer(tag):
        got.append(tag)
        loop.remove_writer(a)
        loop.stop()

    loop.add_writer(a.fileno(), writer, "w")
    assert not run_forever_with_watchdog(loop)
    assert got == ["w"]
    assert loop.remove_writer(a) is False


def test_writer_waits_while_buffer_full(loop, pair):
    a, b = pair
    # Fill a's send buffer completely.
    sent = 0
    while True:
        try:
            sent += a.send(b"x" * 65536)
        except BlockingIOError:
            break
    got = []

    def writer():
        got.append("writable")
        loop.remove_writer(a)
        loop.stop()

    loop.add_writer(a, writer)
    loop.call_later(0.05, lambda: got.append("still-full"))

    def drain():
        received = 0
        while received < sent:
            try:
                received += len(b.recv(1 << 20))
            except BlockingIOError:
                break

    loop.call_later(0.1, drain)
    assert not run_forever_with_watchdog(loop)
    assert got == ["still-full", "writable"]


def test_reader_and_writer_on_same_fd_are_independent(loop, pair):
    a, b = pair
    got = []

    def writer():
        got.append("w")
        loop.remove_writer(a)
        b.send(b"r")

    def reader():
        got.append(("r", a.recv(1)))
        loop.remove_reader(a)
        loop.stop()

    loop.add_reader(a, reader)
    loop.add_writer(a, writer)
    assert not run_forever_with_watchdog(loop)
    assert got == ["w", ("r", b"r")]


def test_pipe_reader_writer_and_eof(loop, pipe):
    r, w = pipe
    got = []

    def writer():
        os.write(w, b"through the pipe")
        loop.remove_writer(w)
        os.close(w)
        pipe.remove(w)

    def reader():
        data = os.read(r, 4)
        got.append(data)
        if data == b"":
            loop.remove_reader(r)
            loop.stop()

    loop.add_writer(w, writer)
    loop.add_reader(r, reader)
    assert not run_forever_with_watchdog(loop)
    assert b"".join(got) == b"through the pipe" and got[-1] == b""


def test_many_socketpairs(loop):
    n = 200
    pairs = [socket.socketpair() for _ in range(n)]
    try:
        got = {}

        def reader(i, s):
            got[i] = s.recv(100)
            loop.remove_reader(s)
            if len(got) == n:
                loop.stop()

        for i, (a, _b) in enumerate(pairs):
            a.setblocking(False)
            loop.add_reader(a, reader, i, a)
        for i, (_a, b) in enumerate(pairs):
            b.send(b"msg%d" % i)
        assert not run_forever_with_watchdog(loop, 20), f"{len(got)}/{n} delivered"
        assert got == {i: b"msg%d" % i for i in range(n)}
    finally:
        for a, b in pairs:
            loop.remove_reader(a)
            a.close()
            b.close()


def test_reader_registered_while_running_sees_data_already_there(loop, pair):
    a, b = pair
    b.send(b"early")
    got = []

    def register():
        loop.add_reader(a, lambda: (got.append(a.recv(10)), loop.remove_reader(a), loop.stop()))

    loop.call_soon(register)
    assert not run_forever_with_watchdog(loop)
    assert got == [b"early"]


def test_reader_survives_reregistration_after_remove(loop, pair):
    a, b = pair
    got = []
    for round_ in range(3):
        loop.add_reader(a, lambda: (got.append(a.recv(10)), loop.remove_reader(a), loop.stop()))
        b.send(b"r%d" % round_)
        assert not run_forever_with_watchdog(loop)
    assert got == [b"r0", b"r1", b"r2"]
