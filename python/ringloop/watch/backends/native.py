"""ringloop's native loop: the dispatcher times every slice itself.

Contract with ``ringloop.Loop`` (see docs/watch.md):

- ``loop._watch_set(threshold_ns, on_slow)`` turns timing on; ``loop._watch_set(0, None)`` off.
  After any slice with ``duration_ns >= threshold_ns`` the dispatcher calls
  ``on_slow(handle, start_ns, duration_ns)`` on the loop thread, outside the slice and before
  the next slice starts. ``handle._callback``/``handle._args`` are as on ``asyncio.Handle``.
- ``loop._slice_seq`` increments at each slice start; ``loop._slice_start_ns`` is the slice's
  ``CLOCK_MONOTONIC`` start (the clock of ``time.monotonic_ns()``), 0 between slices.

Strict mode needs I/O events from slices shorter than the reporting threshold too; those are
flushed by a ``call_soon`` scheduled when the first event of a slice is recorded.

Two native extras are used when the build provides them:

- ``loop._watch_sampler_start(arm_ns, interval_ns)`` starts a watchdog thread that samples the
  loop thread's stack *without the GIL* (``_Py_DumpTraceback``), so a C call that holds the GIL
  is seen at its line; ``loop._native_samples(seq)`` returns what it took during slice ``seq``.
  Those samples are taken while the slice is still blocked, so they replace the Python
  watchdog's (which can only sample once it gets the GIL, i.e. possibly after the C call).
- ``_core.audit_hook_install(hook)`` + ``loop._watch_audit(True)``: a C-level audit hook that
  reaches Python only for I/O events raised inside a timed slice of this loop; the Python-level
  hook then skips ringloop loops (``audit.native_loops``, this backend's record of it too).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import audit
from ..slice_io import record_buffered
from ..slices import NativeSliceState
from ..stacks import frames_from_tuples


class NativeBackend:
    name = "ringloop"

    def __init__(self, loop: Any, monitor: Any) -> None:
        self.loop = loop
        self.monitor = monitor
        self.state = NativeSliceState(monitor, monitor.thread_id, loop)
        self._threshold_ns = 0
        self._started = False
        self._native_sampler = False
        self._sampler_cfg: tuple[int, int] | None = None

    def start(self) -> None:
        self._started = True
        self._apply()
        if hasattr(self.loop, "_watch_audit") and audit.install_native_hook():
            audit.native_loops.add(self.loop)
            self._apply_audit_mode()
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
        if self._native_audit:
            self.loop._watch_audit(0)
            audit.native_loops.discard(self.loop)
        if self._native_sampler:
            self.loop._watch_sampler_stop()
            self._native_sampler = False
            self._sampler_cfg = None

    @property
    def _native_audit(self) -> bool:
        # Whether the C hook reports this loop's I/O: `audit.native_loops` is the one record.
        return self.loop in audit.native_loops

    def retune(self, threshold_ns: int) -> None:
        self._threshold_ns = threshold_ns
        if self._started:
            self._apply()

    def _apply_audit_mode(self) -> None:
        # Strict mode must see I/O in short slices too, as it happens (eager); otherwise the
        # hook buffers natively and only a slow slice's events are ever classified.
        self.loop._watch_audit(2 if self.state.strict else 1)

    def _apply(self) -> None:
        st = self.state
        self.loop._watch_set(max(1, st.slow_ns), self._on_slow, max(1, self._threshold_ns))
        if self._native_audit:
            self._apply_audit_mode()
        cfg = (st.arm_ns, st.sample_interval_ns)
        if (
            st.arm_ns < (1 << 61)
            and cfg != self._sampler_cfg
            and hasattr(self.loop, "_watch_sampler_start")
        ):
            self._sampler_cfg = cfg
            self._native_sampler = bool(self.loop._watch_sampler_start(*cfg))

    def _on_slow(self, handle: Any, start_ns: int, duration_ns: int) -> None:
        st = self.state
        st.count += 1
        st.total_ns += duration_ns
        # Read the clocks first: adopting the native samples below is the watch's own work.
        # The dispatcher read the loop thread's at the slice's end (a block only).
        at_end = getattr(self.loop, "_slice_end_readings", None)
        readings = self.monitor.end_readings(duration_ns, at_end() if at_end else None)
        if self._native_sampler:
            self._adopt_native_samples(self.loop._slice_seq)
            st.signal_delay_ns = self.loop._native_signal_delay(self.loop._slice_seq)
        if self._native_audit:
            record_buffered(st, self.loop._slice_audit_events())
        self.monitor.slice_ended(handle, start_ns, start_ns + duration_ns, readings=readings)

    def _adopt_native_samples(self, seq: int) -> None:
        native = self.loop._native_samples(seq)
        if not native:
            return
        st = self.state
        task = _current_task(self.loop)
        samples = [(frames_from_tuples(frames), task) for _, frames, _ in native]
        samples = [s for s in samples if s[0]]
        if not samples:
            return
        states = [running for _, _, running in native if running is not None]
        with st.lock:
            st.sample_seq = seq
            st.samples = samples
            st.run_share = sum(states) / len(states) if states else None
            st.run_states = [(t, r) for t, _, r in native if r is not None]
            if states:
                # The share's window: from the first native sample, not from the Python
                # watchdog's arming (which may come late: it needs a CPU and the GIL).
                st.arm_wall_ns = min(t for t, _, running in native if running is not None)

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
