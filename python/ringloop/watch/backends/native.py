"""ringloop's native loop: the dispatcher times every slice itself.

Contract with ``ringloop.Loop`` (see docs/watch.md):

- ``loop._watch_set(threshold_ns, on_slow)`` turns timing on; ``loop._watch_set(0, None)`` off.
  After any slice with ``duration_ns >= threshold_ns`` the dispatcher calls
  ``on_slow(handle, start_ns, duration_ns)`` on the loop thread, outside the slice and before
  the next slice starts. ``handle._callback``/``handle._args`` are as on ``asyncio.Handle``.
- ``loop._slice_seq`` increments at each slice start; ``loop._slice_start_ns`` is the slice's
  ``CLOCK_MONOTONIC`` start (the clock of ``time.monotonic_ns()``), 0 between slices.

Strict mode needs I/O events from slices shorter than the reporting threshold too; those are
flushed by a ``call_soon`` scheduled when the first event of a slice is recorded, so the
native side needs nothing more than the two hooks above.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..slices import NativeSliceState


class NativeBackend:
    name = "ringloop"

    def __init__(self, loop: Any, monitor: Any) -> None:
        self.loop = loop
        self.monitor = monitor
        self.state = NativeSliceState(monitor, monitor.thread_id, loop)
        self._threshold_ns = 0
        self._started = False

    def start(self) -> None:
        self._started = True
        self._apply()
        loop, st = self.loop, self.state
        if asyncio.events._get_running_loop() is loop and loop._slice_start_ns == 0:
            # Watching begins inside a slice the dispatcher did not time (it only times while
            # watching). Treat it as starting now; the next slice closes it. Not needed if the
            # dispatcher keeps _slice_seq/_slice_start_ns up to date even while not watching.
            st.initial_seq = loop._slice_seq
            st.initial_start_ns = time.monotonic_ns()
            loop.call_soon(self._close_initial, _current_task(loop))

    def _close_initial(self, task: Any) -> None:
        st = self.state
        start, seq = st.initial_start_ns, st.initial_seq
        st.initial_start_ns = 0
        if not start:
            return
        end = self.loop._slice_start_ns or time.monotonic_ns()  # this slice began after it
        io = st.io_seq == seq and st.io_events
        if end - start >= st.slow_ns or (st.strict and io):
            self.monitor.slice_ended(None, start, end, task, seq)

    def stop(self) -> None:
        self._started = False
        self.loop._watch_set(0, None)

    def retune(self, threshold_ns: int) -> None:
        self._threshold_ns = threshold_ns
        if self._started:
            self._apply()

    def _apply(self) -> None:
        self.loop._watch_set(max(1, self.state.slow_ns), self._on_slow)

    def _on_slow(self, handle: Any, start_ns: int, duration_ns: int) -> None:
        self.state.count += 1
        self.state.total_ns += duration_ns
        self.state.on_slow(handle, start_ns, start_ns + duration_ns)

    def io_noted(self) -> None:
        self.loop.call_soon(self._flush, self.state.seq, _current_task(self.loop))

    def _flush(self, seq: int, task: Any) -> None:
        st = self.state
        if st.io_events and st.io_seq == seq:  # not taken by _on_slow: a short slice
            # The slice's real bounds are unknown here; the events' own times bound it below.
            ev = st.io_events
            self.monitor.slice_ended(None, ev[0].time_ns, ev[-1].time_ns, task, seq)


def _current_task(loop: Any) -> Any:
    import asyncio

    try:
        return asyncio.current_task(loop)
    except Exception:
        return None
