"""Strict mode, actions, decorators, reports, production start/stop, sampling and context."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import socket
import subprocess
import sys
import time
import warnings

import pytest
import ringloop.watch as watch
from ringloop.watch import BlockingError, BlockingWarning, no_blocking
from ringloop.watch.backends import asyncio_handles

THRESHOLD = 0.01
BLOCK = 0.06


def test_strict_flags_short_blocking_io(run, tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("x")

    async def main():
        async with no_blocking(1.0, action="log", strict=True) as nb:
            await asyncio.sleep(0)
            path.read_text()  # short, far below the 1 s threshold
            await asyncio.sleep(0)
        return nb.blocks

    blocks = run(main)
    assert len(blocks) == 1
    b = blocks[0]
    assert b.strict and b.kind == "file"
    assert any(str(path) in ev.detail for ev in b.io_events)
    assert "strict mode" in str(b)
    # The short I/O is the application's line: nothing says otherwise (the sentence that did
    # ended in "the rest was " and nothing).
    assert "no application line" not in str(b), str(b)


@pytest.mark.parametrize("loop", ["asyncio", "ringloop"])
def test_strict_flags_short_io_in_a_fresh_process(loop, tmp_path):
    """Strict mode where nothing else was ever watched: before, its eager events went to the
    Python audit source's sink, which only a uvloop (or an earlier test) had connected."""
    code = f"""
import asyncio, ringloop
from ringloop.watch import no_blocking

async def main():
    async with no_blocking(1.0, action="log", strict=True) as nb:
        await asyncio.sleep(0)
        open({__file__!r}).close()
        await asyncio.sleep(0)
    return nb.blocks

blocks = (ringloop.run if {loop!r} == "ringloop" else asyncio.run)(main())
assert [b.kind for b in blocks] == ["file"], blocks
print(blocks[0].io_events[0].detail)
"""
    # A file, not `-c`: the watch does not blame code in "<string>" (library-like).
    script = tmp_path / "fresh.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert __file__ in out.stdout


def test_strict_without_strict_ignores_short_io(run):
    async def main():
        async with no_blocking(1.0, action="log") as nb:
            open(__file__).close()
        return nb.blocks

    assert run(main) == []


def test_asyncio_own_nonblocking_calls_are_not_flagged(run):
    async def main():
        try:
            server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        except (AttributeError, NotImplementedError) as exc:  # a loop still being written
            pytest.skip(f"this loop cannot start a server yet: {exc!r}")
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        async with no_blocking(1.0, strict=True) as nb:
            # sock_connect: connect() on a non-blocking socket, raised on the loop thread.
            s = socket.socket()
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", port))
            s.close()
            # asyncio's subprocess machinery runs Popen on the loop thread.
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
            await proc.wait()
        server.close()
        return nb.blocks

    assert run(main) == []


def test_strict_flags_blocking_connect():
    async def main():
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        # The first getaddrinfo of a process may import encodings.idna (a file open the
        # watch rightly reports; 3.13 no longer imports it at start-up): done before.
        socket.getaddrinfo("127.0.0.1", port)
        with pytest.raises(BlockingError) as info:
            async with no_blocking(1.0, strict=True):
                socket.create_connection(("127.0.0.1", port)).close()
        server.close()
        return info.value.blocks

    (block,) = asyncio.run(main())
    assert {ev.kind for ev in block.io_events} == {"dns", "socket"}  # getaddrinfo, connect
    # The application's share is the I/O; on a busy machine a ~1 ms slice's wait for a CPU
    # (`starved`) can be the larger share, and then the block's kind.
    (app,) = [c for c in block.causes if c.application]
    assert app.cause in ("dns", "socket"), str(block)
    assert block.line.filename == __file__  # the user's line, not socket.py


def test_warn_and_log_and_callable_actions(caplog):
    async def blocker():
        time.sleep(BLOCK)

    seen = []
    with pytest.warns(BlockingWarning, match="blocked"):
        asyncio.run(no_blocking(THRESHOLD, action="warn")(blocker)())
    with caplog.at_level(logging.WARNING, logger="ringloop.watch"):
        asyncio.run(no_blocking(THRESHOLD, action="log")(blocker)())
    assert "event loop blocked" in caplog.text
    asyncio.run(no_blocking(THRESHOLD, action=seen.append)(blocker)())
    assert len(seen) == 1


def test_decorators_sync_and_async():
    deco = no_blocking(THRESHOLD)

    @deco
    async def handler():
        time.sleep(BLOCK)

    with pytest.raises(BlockingError):
        asyncio.run(handler())
    assert len(deco.blocks) == 1

    @no_blocking(THRESHOLD)
    def sync_entry():
        async def inner():
            time.sleep(BLOCK)

        asyncio.run(inner())

    with pytest.raises(BlockingError):
        sync_entry()


def test_body_error_wins_and_gets_the_report_as_note():
    async def main():
        async with no_blocking(THRESHOLD):
            time.sleep(BLOCK)
            raise KeyError("boom")

    with pytest.raises(KeyError) as info:
        asyncio.run(main())
    assert any("blocked" in n for n in info.value.__notes__)


def test_report_to_dict_and_json(run):
    async def main():
        async with no_blocking(THRESHOLD, action="log") as nb:
            time.sleep(BLOCK)
        return nb.blocks[0]

    block = run(main)
    data = json.loads(block.to_json())
    assert data["duration"] == block.duration
    assert data["line"]["lineno"] == block.line.lineno
    assert data["line"]["line"] == "time.sleep(BLOCK)"
    assert data["stack"][-1]["filename"] == __file__
    assert data["samples"] and data["samples"][0]["count"] >= 1
    assert data["task_name"] == block.task_name
    text = str(block)
    assert block.task_name in text and "time.sleep(BLOCK)" in text and block.kind in text


def test_asyncio_dispatch_restored_after_scope():
    async def main():
        async with no_blocking(THRESHOLD, action="log"):
            assert asyncio_handles.is_patched()
        assert not asyncio_handles.is_patched()

    asyncio.run(main())
    assert not asyncio_handles.is_patched()


request_id = contextvars.ContextVar("request_id", default=None)


def test_production_start_stop_activate_context():
    seen = []

    async def request(i):
        request_id.set(f"req-{i}")
        await asyncio.sleep(0)
        time.sleep(BLOCK)

    async def main():
        watch.start(
            threshold=THRESHOLD,
            on_block=seen.append,
            context_providers=[lambda: {"request_id": request_id.get()}],
        )
        try:
            assert watch.is_active()
            await asyncio.create_task(request(1))
            watch.deactivate()
            assert not asyncio_handles.is_patched()
            await asyncio.create_task(request(2))
            watch.activate()
            await asyncio.create_task(request(3))
        finally:
            watch.stop()
        await asyncio.create_task(request(4))

    asyncio.run(main())
    assert [b.context["request_id"] for b in seen] == ["req-1", "req-3"], "\n\n".join(
        map(str, seen)
    )
    assert not watch.is_active()


def test_production_sample_rate_picks_whole_tasks():
    seen = []

    async def request():
        for _ in range(2):
            await asyncio.sleep(0)
            time.sleep(0.015)

    async def main():
        watch.start(threshold=THRESHOLD, on_block=seen.append, sample_rate=0.5)
        try:
            await asyncio.gather(*(asyncio.create_task(request()) for _ in range(16)))
        finally:
            watch.stop()

    asyncio.run(main())
    by_task = {}
    for b in seen:
        by_task.setdefault(b.task_name, 0)
        by_task[b.task_name] += 1
    assert 0 < len(by_task) < 16  # some tasks sampled, not all (16 tasks: P(fail) ~ 2**-15)
    assert set(by_task.values()) == {2}  # a sampled task is reported whole


def test_production_sample_rate_zero_reports_nothing():
    seen = []

    async def main():
        watch.start(threshold=THRESHOLD, on_block=seen.append, sample_rate=0.0)
        try:
            await asyncio.sleep(0)
            time.sleep(BLOCK)
            await asyncio.sleep(0)
        finally:
            watch.stop()

    asyncio.run(main())
    assert seen == []


def test_start_before_loop_watches_later_asyncio_loops():
    seen = []
    watch.start(threshold=THRESHOLD, on_block=seen.append)
    try:

        async def main():
            await asyncio.sleep(0)
            time.sleep(BLOCK)

        asyncio.run(main())
        asyncio.run(main())
    finally:
        watch.stop()
    assert len(seen) == 2
    assert not asyncio_handles.is_patched()


def test_invalid_arguments():
    with pytest.raises(ValueError):
        no_blocking(THRESHOLD, action="explode")
    with pytest.raises(ValueError):
        watch.start(threshold=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch.stop()  # stop without start is fine
