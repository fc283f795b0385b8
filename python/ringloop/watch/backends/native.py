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
        self._flush_pending = False

    def start(self) -> None:
        self._started = True
        self._apply()

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
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        st = self.state
        if st.io_events:  # not taken by _on_slow: the slice was short
            # The slice's real bounds are unknown here; the events' own times bound it below.
            self.state.on_slow(None, st.io_events[0].time_ns, st.io_events[-1].time_ns)
