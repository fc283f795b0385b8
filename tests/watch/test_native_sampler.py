"""ringloop-only: the native GIL-free sampler names the line of a C call that holds the GIL,
and the C-level audit hook reports I/O raised inside a slice of a ringloop loop."""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest

ringloop = pytest.importorskip("ringloop")
from ringloop import _core  # noqa: E402
from ringloop.watch import (  # noqa: E402
    BlockingError,
    audit,
    no_blocking,
)

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        not _core.native_sampler_available(), reason="Python lacks _Py_DumpTraceback"
    ),
]


def _gil_bound_c_call() -> int:
    return sum(range(3 * 10**7))  # LINE: C call holding the GIL


def _line_of(marker: str, fn) -> int:
    import inspect

    src, first = inspect.getsourcelines(fn)
    for i, line in enumerate(src):
        if marker in line:
            return first + i
    raise AssertionError(marker)


@pytest.mark.parametrize("backend", ["io_uring", "epoll"])
def test_c_call_holding_the_gil_is_named_at_its_line(backend):
    if backend == "io_uring" and not ringloop.io_uring_available()[0]:
        pytest.skip("io_uring refused by this kernel")

    async def main():
        with pytest.raises(BlockingError) as ei:
            async with no_blocking(threshold=0.02):
                await asyncio.sleep(0)
                _gil_bound_c_call()
                await asyncio.sleep(0)
        return ei.value.blocks

    loop = ringloop.new_event_loop(backend=backend)
    try:
        blocks = loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(blocks) == 1
    b = blocks[0]
    assert b.line is not None, str(b)
    assert b.line.name == "_gil_bound_c_call"
    assert b.line.lineno == _line_of("LINE: C call", _gil_bound_c_call), str(b)
    assert b.sample_count >= 3, "several samples taken while the call still held the GIL"


def test_native_audit_hook_reports_file_io_in_strict_mode():
    fd, path = tempfile.mkstemp()
    os.close(fd)

    async def main():
        with pytest.raises(BlockingError) as ei:
            async with no_blocking(threshold=10.0, strict=True):
                await asyncio.sleep(0)
                with open(path) as f:  # LINE: open
                    f.read()
                await asyncio.sleep(0)
        return ei.value.blocks

    loop = ringloop.new_event_loop()
    try:
        blocks = loop.run_until_complete(main())
        assert loop not in audit.native_loops, "audit routing restored after the scope"
    finally:
        loop.close()
        os.unlink(path)
    events = [e for b in blocks for e in b.io_events]
    assert any(e.event == "open" and path in e.detail for e in events), [str(b) for b in blocks]


def test_metrics_histogram_counts_every_slice_on_ringloop():
    from ringloop.watch import metrics

    async def main():
        metrics.render()  # reset the lag gauge
        before = metrics.snapshot(reset_lag=False)
        async with no_blocking(threshold=10.0):
            for _ in range(500):
                await asyncio.sleep(0)
            await asyncio.sleep(0.003)  # one timer slice too
            import time

            time.sleep(0.03)  # one slice over 25 ms, far below the 10 s threshold
            await asyncio.sleep(0)
            return before, metrics.snapshot(reset_lag=False)

    loop = ringloop.new_event_loop()
    try:
        before, after = loop.run_until_complete(main())
    finally:
        loop.close()
    assert after["slice_count"] - before["slice_count"] >= 500, (before, after)
    over_25ms = dict(after["buckets"])
    total = after["slice_count"]
    assert total - over_25ms[0.025] >= 1, "the 30 ms slice is in the > 25 ms buckets"
    assert after["loop_lag"] >= 0.03


def _python_busy_loop(seconds: float) -> int:
    """Run Python bytecode for `seconds` of this thread's CPU time: under load the thread gets
    its CPU in bits, and each sample needs it on a CPU to run the signal handler (150 ms of
    wall time gave a starved loop thread 10 ms of CPU and 4 samples)."""
    import time

    n, end = 0, time.thread_time() + seconds
    while time.thread_time() < end:  # LINE: busy
        n += 1
    return n


def test_native_sampling_of_running_python_code_is_safe_and_right():
    # The loop thread runs Python bytecode the whole time it is sampled: the sampler must read
    # its frames from the signal handler on that thread (reading them from another thread
    # while they change crashed the process). Many slices, many samples each.
    async def main():
        found = []
        for _ in range(5):
            with pytest.raises(BlockingError) as ei:
                async with no_blocking(threshold=0.005):
                    await asyncio.sleep(0)
                    _python_busy_loop(0.15)
                    await asyncio.sleep(0)
            found.extend(ei.value.blocks)
        return found

    loop = ringloop.new_event_loop()
    try:
        blocks = loop.run_until_complete(main())
    finally:
        loop.close()
    busy = _line_of("LINE: busy", _python_busy_loop)
    for b in blocks:
        assert b.line is not None and b.line.name == "_python_busy_loop", str(b)
        assert b.line.lineno in (busy, busy + 1), str(b)
        assert b.sample_count >= 5, str(b)


def test_a_blocks_clocks_are_read_as_it_ends():
    """The dispatcher reads the loop thread's clocks as a slice of at least ``block_ns`` ends,
    stamped with the slice's own end: no reporting work lies between (issue 23's breakdown);
    a shorter slow slice (metrics only) reads nothing."""
    import threading
    import time

    loop = ringloop.new_event_loop()
    seen = []

    def on_slow(handle, start_ns, duration_ns):
        seen.append((start_ns + duration_ns, duration_ns, loop._slice_end_readings()))

    def spin(cpu_s):
        end = time.thread_time() + cpu_s
        while time.thread_time() < end:
            pass

    try:
        loop._watch_set(1_000_000, on_slow, 20_000_000)
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            delay0 = int(f.read().split()[1])
        cpu0 = time.thread_time_ns()
        loop.call_soon(spin, 0.03)  # a block: at least 30 ms of CPU
        loop.call_soon(spin, 0.002)  # slow (over 1 ms), under block_ns on a CPU of its own
        loop.call_soon(loop.stop)
        loop.run_forever()
        cpu1 = time.thread_time_ns()
    finally:
        loop._watch_set(0, None)
        loop.close()
    assert len(seen) >= 2, seen
    for _, duration, readings in seen[1:]:  # read for a block only (a loaded CPU may make one)
        assert (readings is not None) == (duration >= 20_000_000), seen
    end, _, block = seen[0]
    assert block is not None
    t_ns, cpu, delay = block
    assert t_ns == end  # the slice's own end, not a moment after it
    assert cpu0 + 30_000_000 <= cpu <= cpu1  # the 30 ms spin is in; later work is not
    assert delay >= delay0
    assert loop._slice_end_readings() is None  # taken
