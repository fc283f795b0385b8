"""Any loop (uvloop, ringloop without hooks): detect blocks by heartbeat lag.

uvloop runs its callbacks from Cython; there is no Python-level dispatch to wrap. Instead the
loop gets a heartbeat timer: ``call_later(interval, beat)``. While nothing blocks, every beat
fires on time. When something holds the loop thread, the next beat is late, and the watchdog
(which sees the beat overdue: ``state.start_ns`` is the last beat, ``state.idle_ns`` the
interval) samples the loop thread's stack meanwhile, remembering which task was current.

Limits, compared with per-slice timing (also in docs/watch.md):
- the duration is the beat's lateness: a lower bound of the block, short by at most one
  interval (the block may have started up to an interval before the beat was due);
- what ran is the task current when samples were taken, or unknown for a plain callback;
- several short callbacks that together hold the loop longer than the threshold, in one
  iteration, look like one block (their samples show different lines);
- the loop wakes up every interval (threshold / 4, at least 1 ms) even when idle.
"""

from __future__ import annotations

import time
from typing import Any

from ..slices import SliceState

_MIN_INTERVAL_NS = 1_000_000
_MAX_INTERVAL_NS = 100_000_000


class HeartbeatBackend:
    name = "heartbeat"

    def __init__(self, loop: Any, monitor: Any) -> None:
        self.loop = loop
        self.monitor = monitor
        self.state = SliceState(monitor, monitor.thread_id)
        self._timer = None
        self._interval_ns = 25_000_000
        self.state.idle_ns = self._interval_ns

    def retune(self, threshold_ns: int) -> None:
        self._interval_ns = min(max(threshold_ns // 4, _MIN_INTERVAL_NS), _MAX_INTERVAL_NS)
        st = self.state
        # arm_ns was computed by the monitor with the old idle_ns: shift it to the new one.
        st.arm_ns += self._interval_ns - st.idle_ns
        st.idle_ns = self._interval_ns

    def start(self) -> None:
        st = self.state
        st.seq += 1
        st.start_ns = time.monotonic_ns()
        self._timer = self.loop.call_later(self._interval_ns / 1e9, self._beat)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.state.start_ns = 0

    def io_noted(self) -> None:
        pass  # I/O events are handed over at the next beat

    def _beat(self) -> None:
        now = time.monotonic_ns()
        st = self.state
        due = st.start_ns + st.idle_ns
        st.count += 1
        lag = now - due
        if lag > 0:
            st.total_ns += lag
        if lag >= st.slow_ns or (st.strict and st.io_events):
            st.on_slow(None, min(due, now), now)
        st.seq += 1
        st.start_ns = time.monotonic_ns()
        self._timer = self.loop.call_later(self._interval_ns / 1e9, self._beat)
