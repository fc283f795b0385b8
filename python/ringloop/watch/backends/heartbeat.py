"""Any loop (uvloop, ringloop without hooks): detect blocks by heartbeat lag.

uvloop runs its callbacks from Cython; there is no Python-level dispatch to wrap. Instead the
loop gets a heartbeat timer: ``call_later(interval, beat)``. While nothing blocks, every beat
fires on time. When something holds the loop thread, the next beat is late, and the watchdog
(which sees the beat overdue: ``state.start_ns`` is the last beat, ``state.idle_ns`` the
interval) samples the loop thread's stack meanwhile, remembering which task was current.

Where the block began. The beat's lateness alone starts the block at the beat's due time,
but the block began somewhere between the previous beat and that time: up to one interval
earlier. The loop thread's own CPU clock tells more: each beat reads it (one
``clock_gettime(CLOCK_THREAD_CPUTIME_ID)`` per interval, never per callback), and the late beat
reads it again. Between beats the loop thread sleeps in ``epoll_wait`` except for the work it
is given, so the CPU it used since the previous beat is, to a few µs per callback, the
block's own: a block that ran on the CPU began ``cpu`` ns before the late beat. A block that
waited (a sleep, a lock, a socket) uses no CPU, and its start stays the due time: short by
at most one interval. Limits (measured by ``benchmarks/watch_accuracy.py``, see
docs/watch.md):

- a CPU-bound block on a CPU it shares: its run delay is not in its CPU clock, so its start
  comes out late by that delay (never earlier than the due time);
- a waiting block: short by the time between its start and the beat's due time, uniformly
  0 .. interval; the interval is a whole number of ms (libuv's timer resolution: a fraction
  is rounded, and the beat would then fire before the due time computed here);
- what ran is the task current when samples were taken, or unknown for a plain callback;
- several short callbacks that together hold the loop longer than the threshold, in one
  iteration, look like one block (their samples show different lines);
- the loop wakes up every interval (threshold / 8 in whole ms, at least 1 ms) even when idle.
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
        self._cpu_ns = 0
        self._interval_ns = 25_000_000
        self.state.idle_ns = self._interval_ns

    def retune(self, threshold_ns: int) -> None:
        # threshold/8: a waiting block is dated from the due time, short by up to one interval
        # (1 ms at a 10 ms threshold; the loop then wakes 1,000 times a second when idle).
        interval = min(max(threshold_ns // 8, _MIN_INTERVAL_NS), _MAX_INTERVAL_NS)
        self._interval_ns = interval - interval % 1_000_000  # whole ms: libuv's timer unit
        st = self.state
        # arm_ns was computed by the monitor with the old idle_ns: shift it to the new one.
        st.arm_ns += self._interval_ns - st.idle_ns
        st.idle_ns = self._interval_ns

    def start(self) -> None:
        st = self.state
        st.seq += 1
        st.start_ns = time.monotonic_ns()
        self._cpu_ns = time.thread_time_ns()
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
            # On the CPU since the previous beat: the block's own work (see the module docs).
            busy = time.thread_time_ns() - self._cpu_ns
            start = max(st.start_ns, min(due, now - busy))
            # The slice is over: a sample the watchdog takes from here on (it may have been
            # waiting for the GIL the whole block) would show the report's own reads of /proc.
            st.start_ns = 0
            st.slice_cpu = (start, busy)  # the slice's CPU share, whenever it began (monitor)
            st.on_slow(None, start, now)
        st.seq += 1
        st.start_ns = time.monotonic_ns()
        self._cpu_ns = time.thread_time_ns()
        self._timer = self.loop.call_later(self._interval_ns / 1e9, self._beat)
