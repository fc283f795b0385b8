"""Stock asyncio's per-slice path: the native `AsyncioSlices.run` and the pure-Python wrapper
(used without ringloop's native module) must report the same blocks and leave the same state."""

from __future__ import annotations

import asyncio
import time

import pytest
import ringloop.watch as watch
from ringloop.watch import monitor
from ringloop.watch.backends import asyncio_handles

THRESHOLD = 0.01
BLOCK = 0.06


@pytest.fixture(params=["native", "python"])
def wrapper(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(asyncio_handles, "NATIVE", False)
        monkeypatch.setattr(asyncio_handles, "_wrapper", asyncio_handles._watched_run_py)
    return request.param


def _blocker():
    time.sleep(BLOCK)


def _slow_then_raise():
    time.sleep(BLOCK)
    raise KeyboardInterrupt


def test_slow_callbacks_are_reported_and_counted(wrapper):
    seen = []
    loop = asyncio.new_event_loop()
    watch.start(threshold=THRESHOLD, on_block=seen.append)
    try:
        loop.call_soon(_blocker)
        for _ in range(5):
            loop.call_soon(lambda: None)
        loop.call_soon(loop.stop)
        loop.run_forever()
        st = monitor._monitors[loop].state
        assert isinstance(st, asyncio_handles.CoreSliceState) == (wrapper == "native")
        assert st.count >= 7, st.count  # the blocker, five no-ops, the stop
        assert st.total_ns >= BLOCK * 1e9
        assert (st.start_ns, st.handle) == (0, None)
    finally:
        watch.stop()
        loop.close()
    assert len(seen) == 1, seen
    b = seen[0]
    assert b.duration >= BLOCK * 0.9
    assert "_blocker" in b.callback and b.line is not None and b.line.name == "_blocker", str(b)


def test_a_slow_slice_that_raises_out_of_the_loop_is_still_reported(wrapper):
    """KeyboardInterrupt and SystemExit leave Handle._run: the slice ends all the same."""
    seen = []
    loop = asyncio.new_event_loop()
    watch.start(threshold=THRESHOLD, on_block=seen.append)
    try:
        loop.call_soon(_slow_then_raise)
        with pytest.raises(KeyboardInterrupt):
            loop.run_forever()
        st = monitor._monitors[loop].state
        assert (st.start_ns, st.handle) == (0, None)
        # The loop runs on: the next slice is timed normally.
        loop.call_soon(_blocker)
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        watch.stop()
        loop.close()
    assert len(seen) == 2, seen
    assert all(b.duration >= BLOCK * 0.9 for b in seen)
    assert "_slow_then_raise" in seen[0].callback, str(seen[0])
    assert "_blocker" in seen[1].callback, str(seen[1])
