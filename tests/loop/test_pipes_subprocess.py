"""Pipe transports and subprocesses, on the asyncio oracle and both ringloop backends.

Linux and asyncio facts encoded here:

* a read-pipe transport delivers data, then ``eof_received()``, then ``connection_lost(None)``
  once the last write end is closed;
* a write-pipe transport writes what the pipe takes at once and buffers the rest
  (``get_write_buffer_size``); over the high-water mark it calls ``pause_writing()``, and
  ``resume_writing()`` once the buffer drains to the low-water mark;
* ``write_eof()``/``close()`` flush the buffer first, then close the pipe (the reader sees EOF);
* when the read end is closed, the kernel flags the write end with POLLERR; asyncio watches the
  write end for "readability" to notice it, and reports ``connection_lost(BrokenPipeError)``
  if data was still buffered, ``connection_lost(None)`` otherwise;
* a child's return code is its exit status, or ``-signum`` when a signal killed it;
* asyncio watches children from any thread (the default watcher does not need SIGCHLD).

No test sleeps or races the clock: each waits for the event it asserts, and a hang is a
TimeoutError after ``LONG`` seconds (the loop runs with a watchdog) well before the pytest
timeout.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import signal
import sys
import threading
import warnings
from asyncio import unix_events

import pytest
from loop_helpers import run_with_timeout

pytestmark = pytest.mark.timeout(90)

# Generous: children start a Python interpreter each, on a shared 2-core machine.
LONG = 60.0
PY = sys.executable


def run(loop, aw, timeout: float = LONG):
    return run_with_timeout(loop, aw, timeout)


# -- pipes ---------------------------------------------------------------------------------


class PipeProto(asyncio.Protocol):
    """Records a pipe transport's callbacks; ``lost`` resolves with connection_lost's arg."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: list[str] = []
        self.data = bytearray()
        self.lost = loop.create_future()
        self.transport = None
        self.pauses = 0
        self.resumes = 0
        self._writable: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        if self.events[-1] != "data":
            self.events.append("data")
        self.data += data

    def eof_received(self):
        self.events.append("eof")

    def pause_writing(self) -> None:
        self.pauses += 1
        self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        self.resumes += 1
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    async def writable(self) -> None:
        if self._writable is not None:
            await self._writable

    def connection_lost(self, exc) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)


class SlowReader(PipeProto):
    """Takes one read per loop iteration: pauses after each chunk, resumes on the next turn."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.transport.pause_reading()
        self.loop.call_soon(self.transport.resume_reading)


@pytest.fixture
def pipe():
    """(read file, write file), unbuffered; whichever end a test did not close is closed."""
    r, w = os.pipe()
    rf, wf = os.fdopen(r, "rb", buffering=0), os.fdopen(w, "wb", buffering=0)
    yield rf, wf
    rf.close()
    wf.close()


def pipe_capacity(f) -> int:
    return fcntl.fcntl(f.fileno(), fcntl.F_GETPIPE_SZ)


def test_read_pipe_data_then_eof(loop, pipe):
    rf, wf = pipe

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: PipeProto(loop), rf)
        assert proto.events == ["made"]
        assert tr.get_extra_info("pipe") is rf
        wf.write(b"hello ")
        wf.write(b"world")
        wf.close()
        exc = await proto.lost
        return exc, proto, tr

    exc, proto, tr = run(loop, main())
    assert exc is None
    assert bytes(proto.data) == b"hello world"
    assert proto.events == ["made", "data", "eof", "lost"]
    assert tr.is_closing()


def test_read_pipe_pause_resume_and_close(loop, pipe):
    rf, wf = pipe

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: PipeProto(loop), rf)
        tr.pause_reading()
        assert not tr.is_reading()
        wf.write(b"x" * 1000)
        # Give a paused transport every chance to misbehave: several full loop iterations.
        for _ in range(5):
            await asyncio.sleep(0)
        assert proto.data == b""
        tr.resume_reading()
        while len(proto.data) < 1000:
            await asyncio.sleep(0)
        tr.close()
        return await proto.lost, proto

    exc, proto = run(loop, main())
    assert exc is None
    assert proto.events == ["made", "data", "lost"]


def test_write_pipe_buffers_what_the_pipe_cannot_take(loop, pipe):
    rf, wf = pipe
    cap = pipe_capacity(wf)
    n = 1024 * 1024

    async def main():
        tr, proto = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        assert tr.get_write_buffer_size() == 0
        tr.write(b"a" * n)
        # The first write goes straight to the empty pipe, which takes exactly its capacity.
        assert tr.get_write_buffer_size() == n - cap
        assert proto.pauses == 1  # over the default high-water mark (64 KiB)
        # Drain from the other side; the transport flushes, then resumes the protocol.
        rtr, rproto = await loop.connect_read_pipe(lambda: PipeProto(loop), rf)
        while tr.get_write_buffer_size():
            await proto.writable()
            await asyncio.sleep(0)
        assert proto.resumes == 1
        tr.close()
        assert await proto.lost is None
        assert await rproto.lost is None
        return rproto

    rproto = run(loop, main())
    assert len(rproto.data) == n and rproto.data == b"a" * n


def test_write_pipe_flow_control_with_slow_reader(loop, pipe):
    rf, wf = pipe
    high = 64 * 1024
    chunk = 16 * 1024
    total = 4 * 1024 * 1024
    payload = bytes(range(256)) * (chunk // 256)

    async def main():
        rtr, reader = await loop.connect_read_pipe(lambda: SlowReader(loop), rf)
        wtr, writer = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        wtr.set_write_buffer_limits(high=high)
        assert wtr.get_write_buffer_limits() == (high // 4, high)
        sent = peak = 0
        while sent < total:
            await writer.writable()
            wtr.write(payload)
            sent += len(payload)
            peak = max(peak, wtr.get_write_buffer_size())
        wtr.close()
        assert await writer.lost is None
        assert await reader.lost is None
        return reader, writer, peak

    reader, writer, peak = run(loop, main())
    # Memory stays bounded: the writer stops at the first write past the high-water mark.
    assert peak <= high + chunk
    assert writer.pauses >= 1 and writer.resumes == writer.pauses
    assert len(reader.data) == total
    assert reader.data == payload * (total // chunk)
    assert reader.events == ["made", "data", "eof", "lost"]


def test_write_eof_flushes_then_closes(loop, pipe):
    rf, wf = pipe
    cap = pipe_capacity(wf)

    async def main():
        wtr, writer = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        assert wtr.can_write_eof()
        data = b"z" * (cap + 4096)  # more than the pipe takes: write_eof must flush first
        wtr.write(data)
        wtr.write_eof()
        assert wtr.is_closing()
        rtr, reader = await loop.connect_read_pipe(lambda: PipeProto(loop), rf)
        assert await writer.lost is None
        assert await reader.lost is None
        return data, reader

    data, reader = run(loop, main())
    assert reader.data == data
    assert reader.events == ["made", "data", "eof", "lost"]


@pytest.mark.parametrize("how", ["close", "abort"])
def test_write_pipe_close_and_abort(loop, pipe, how):
    rf, wf = pipe
    cap = pipe_capacity(wf)

    async def main():
        wtr, writer = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        wtr.write(b"q" * (cap + 10))  # the pipe takes `cap` bytes, 10 stay buffered
        getattr(wtr, how)()
        assert wtr.is_closing()
        rtr, reader = await loop.connect_read_pipe(lambda: PipeProto(loop), rf)
        return await writer.lost, await reader.lost, reader

    wexc, rexc, reader = run(loop, main())
    assert wexc is None and rexc is None
    # close() flushes the buffer first; abort() drops it.
    assert len(reader.data) == (cap + 10 if how == "close" else cap)
    assert reader.events == ["made", "data", "eof", "lost"]


def test_reader_closed_with_buffered_data_is_broken_pipe(loop, pipe):
    rf, wf = pipe

    async def main():
        wtr, writer = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        await asyncio.sleep(0)  # the transport's reader (peer-close watch) is registered
        wtr.write(b"b" * (pipe_capacity(wf) * 2))
        assert wtr.get_write_buffer_size() > 0
        rf.close()
        return await writer.lost, wtr

    exc, wtr = run(loop, main())
    assert isinstance(exc, BrokenPipeError)
    assert wtr.is_closing()


def test_reader_closed_with_empty_buffer_closes_cleanly(loop, pipe):
    rf, wf = pipe

    async def main():
        wtr, writer = await loop.connect_write_pipe(lambda: PipeProto(loop), wf)
        wtr.write(b"fits")
        assert wtr.get_write_buffer_size() == 0
        rf.close()
        return await writer.lost, writer

    exc, writer = run(loop, main())
    assert exc is None
    assert writer.events == ["made", "lost"]


def test_pipe_transport_rejects_regular_file(loop, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")

    async def main():
        with open(path, "rb") as f, pytest.raises(ValueError):
            await loop.connect_read_pipe(asyncio.Protocol, f)
        with open(path, "wb") as f, pytest.raises(ValueError):
            await loop.connect_write_pipe(asyncio.Protocol, f)

    run(loop, main())


# -- subprocesses through asyncio's high-level API ------------------------------------------

ECHO = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"
PIPE = asyncio.subprocess.PIPE


def test_exec_echo_communicate(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", ECHO, stdin=PIPE, stdout=PIPE)
        assert proc.pid > 0
        out, err = await proc.communicate(b"ping\n")
        return proc, out, err

    proc, out, err = run(loop, main())
    assert out == b"ping\n" and err is None
    assert proc.returncode == 0


def test_exec_stdin_stdout_interactive(loop):
    prog = (
        "import sys\n"
        "for line in sys.stdin:\n"
        "    sys.stdout.write(line.upper()); sys.stdout.flush()\n"
    )

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", prog, stdin=PIPE, stdout=PIPE)
        replies = []
        for word in (b"one\n", b"two\n", b"three\n"):
            proc.stdin.write(word)
            await proc.stdin.drain()
            replies.append(await proc.stdout.readline())
        proc.stdin.close()
        assert await proc.stdout.read() == b""
        return replies, await proc.wait()

    replies, rc = run(loop, main())
    assert replies == [b"ONE\n", b"TWO\n", b"THREE\n"]
    assert rc == 0


def test_exec_large_output_no_deadlock(loop):
    # 8 MiB each way through pipes of 64 KiB: the child blocks on a full stdout while the
    # parent still writes its stdin, unless communicate() services both at once.
    size = 8 * 1024 * 1024
    data = bytes(range(256)) * (size // 256)

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", ECHO, stdin=PIPE, stdout=PIPE)
        out, _ = await proc.communicate(data)
        return proc.returncode, out

    rc, out = run(loop, main())
    assert rc == 0
    assert len(out) == size and out == data


def test_exec_stderr_and_exit_code(loop):
    prog = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", prog, stdout=PIPE, stderr=PIPE)
        out, err = await proc.communicate()
        return out, err, proc.returncode, await proc.wait()

    out, err, rc, waited = run(loop, main())
    assert out == b"out\n" and err == b"err\n"
    assert rc == waited == 7


def test_exec_stderr_to_stdout(loop):
    prog = "import sys; sys.stdout.write('a'); sys.stdout.flush(); sys.stderr.write('b')"

    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", prog, stdout=PIPE, stderr=asyncio.subprocess.STDOUT
        )
        return await proc.communicate(), proc.returncode

    (out, err), rc = run(loop, main())
    assert out == b"ab" and err is None and rc == 0


@pytest.mark.parametrize("how, sig", [("kill", signal.SIGKILL), ("terminate", signal.SIGTERM)])
def test_kill_and_terminate(loop, how, sig):
    # The child blocks reading its stdin forever: only the signal can end it.
    prog = "import sys; sys.stdout.write('ready'); sys.stdout.flush(); sys.stdin.read()"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", prog, stdin=PIPE, stdout=PIPE)
        assert await proc.stdout.readexactly(5) == b"ready"
        assert proc.returncode is None
        getattr(proc, how)()
        rc = await proc.wait()
        proc.stdin.close()
        return rc, proc.returncode

    rc, returncode = run(loop, main())
    assert rc == returncode == -sig


def test_send_signal(loop):
    prog = (
        "import signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(42))\n"
        "sys.stdout.write('ready'); sys.stdout.flush()\n"
        "while True: signal.pause()\n"
    )

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", prog, stdout=PIPE)
        assert await proc.stdout.readexactly(5) == b"ready"
        proc.send_signal(signal.SIGUSR1)
        return await proc.wait()

    assert run(loop, main()) == 42


def test_shell(loop):
    async def main():
        proc = await asyncio.create_subprocess_shell(
            'read x; echo "got $x"; echo oops >&2; exit 5',
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
        )
        out, err = await proc.communicate(b"it\n")
        return out, err, proc.returncode

    assert run(loop, main()) == (b"got it\n", b"oops\n", 5)


def test_missing_executable(loop, tmp_path):
    async def main():
        with pytest.raises(FileNotFoundError):
            await asyncio.create_subprocess_exec(str(tmp_path / "no-such-program"))
        # The loop is still fine afterwards.
        proc = await asyncio.create_subprocess_exec(PY, "-c", "pass")
        return await proc.wait()

    assert run(loop, main()) == 0


def test_many_concurrent_subprocesses(loop):
    n = 50

    async def one(i: int):
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", 'echo "$0"; exit "$1"', str(i), str(i % 7), stdout=PIPE
        )
        out, _ = await proc.communicate()
        return int(out), proc.returncode

    async def main():
        return await asyncio.gather(*(one(i) for i in range(n)))

    assert run(loop, main()) == [(i, i % 7) for i in range(n)]


def test_subprocess_from_non_main_thread(new_loop):
    outcome: dict = {}

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", ECHO, stdin=PIPE, stdout=PIPE)
        out, _ = await proc.communicate(b"from a thread")
        return out, proc.returncode, threading.current_thread() is threading.main_thread()

    def target():
        try:
            with asyncio.Runner(loop_factory=new_loop) as runner:
                outcome["result"] = runner.run(asyncio.wait_for(main(), LONG))
        except BaseException as exc:  # report in the main thread
            outcome["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join(LONG + 10)
    assert not t.is_alive(), "the loop thread hung"
    if "error" in outcome:
        raise outcome["error"]
    assert outcome["result"] == (b"from a thread", 0, False)


@pytest.mark.skipif(
    not hasattr(asyncio, "PidfdChildWatcher"), reason="asyncio has no child watchers any more"
)
def test_pidfd_child_watcher(loop):
    """The watcher Python 3.12 uses by default (and 3.14+ per loop): it polls the child's pidfd
    with `loop._add_reader(pidfd, cb, *args)`, so the loop's fd readers see pidfds too."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:  # seccomp or an old kernel: asyncio would not pick it either
        pytest.skip(f"pidfd_open refused: {errno.errorcode.get(exc.errno, exc.errno)}")
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        saved = policy._watcher
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(loop)
        policy._watcher = watcher  # set_child_watcher() would close the saved one
    try:

        async def main():
            proc = await asyncio.create_subprocess_exec(PY, "-c", ECHO, stdin=PIPE, stdout=PIPE)
            out, _ = await proc.communicate(b"pidfd")
            rc = await proc.wait()
            killed = await asyncio.create_subprocess_exec(PY, "-c", "input()", stdin=PIPE)
            killed.kill()
            return out, rc, await killed.wait()

        assert run(loop, main()) == (b"pidfd", 0, -signal.SIGKILL)
    finally:
        policy._watcher = saved
        watcher.close()


@pytest.mark.skipif(
    not hasattr(unix_events, "_PidfdChildWatcher"), reason="before 3.14 the policy owns the watcher"
)
def test_each_loop_owns_its_child_watcher(loop):
    """3.14 removed child watchers from the API: each Unix loop owns one in `loop._watcher`
    (pidfd-based where the kernel allows), which its subprocess transports use. ringloop builds
    the same one, on first use, and reaps through it."""

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", ECHO, stdin=PIPE, stdout=PIPE)
        out, _ = await proc.communicate(b"owned")
        return out, await proc.wait()

    assert run(loop, main()) == (b"owned", 0)
    stock = asyncio.SelectorEventLoop()
    try:
        assert type(loop._watcher) is type(stock._watcher)
    finally:
        stock.close()


# -- subprocesses through the loop's low-level API ------------------------------------------


class ProcProto(asyncio.SubprocessProtocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.events: list = []
        self.data = {1: bytearray(), 2: bytearray()}
        self.done = loop.create_future()

    def connection_made(self, transport) -> None:
        self.events.append("made")

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.data[fd] += data

    def pipe_connection_lost(self, fd: int, exc) -> None:
        self.events.append(("pipe_lost", fd, exc))

    def process_exited(self) -> None:
        self.events.append("exited")

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))
        self.done.set_result(None)


def test_loop_subprocess_exec_protocol(loop):
    prog = "import sys; d = sys.stdin.read(); print(d.upper()); print(d, file=sys.stderr)"

    async def main():
        tr, proto = await loop.subprocess_exec(
            lambda: ProcProto(loop), PY, "-c", prog, stdin=PIPE, stdout=PIPE, stderr=PIPE
        )
        assert proto.events == ["made"]
        stdin = tr.get_pipe_transport(0)
        stdin.write(b"abc")
        stdin.close()
        await proto.done
        rc = tr.get_returncode()
        tr.close()
        return proto, rc

    proto, rc = run(loop, main())
    assert rc == 0
    assert proto.data == {1: b"ABC\n", 2: b"abc\n"}
    # asyncio's order: connection_lost only once the process exited and every pipe closed.
    assert proto.events[0] == "made" and proto.events[-1] == ("lost", None)
    assert "exited" in proto.events
    assert sorted(e[1] for e in proto.events if e[0] == "pipe_lost") == [0, 1, 2]


def test_loop_subprocess_shell_protocol(loop):
    async def main():
        tr, proto = await loop.subprocess_shell(
            lambda: ProcProto(loop), "echo $((6 * 7)); exit 3", stdin=None, stdout=PIPE
        )
        await proto.done
        rc = tr.get_returncode()
        tr.close()
        return proto, rc

    proto, rc = run(loop, main())
    assert rc == 3
    assert proto.data[1] == b"42\n"
    assert proto.events[-1] == ("lost", None)


def test_loop_subprocess_shell_rejects_non_str(loop):
    async def main():
        with pytest.raises(ValueError):
            await loop.subprocess_shell(asyncio.SubprocessProtocol, ["echo", "x"])
        with pytest.raises(ValueError):
            await loop.subprocess_exec(asyncio.SubprocessProtocol, PY, shell=True)

    run(loop, main())
