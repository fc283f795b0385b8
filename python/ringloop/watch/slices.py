"""Per-loop slice state: what the dispatcher writes and the watchdog reads.

A *slice* is one callback run by the loop: a task step, a plain ``call_soon`` callback, a timer,
an I/O or protocol callback. The dispatcher (asyncio's ``Handle._run`` wrapped by the watch, or
ringloop's native dispatcher) bumps ``seq`` and sets ``start_ns`` when a slice starts and sets
``start_ns`` back to 0 when it ends. The watchdog thread only reads those two numbers, so the
hot path needs no lock: a sample is kept only if ``seq`` is unchanged and ``start_ns`` still
non-zero *after* the stack was captured, which proves the capture happened inside that slice.

The samples themselves are handed over under ``lock``: the watchdog appends, the loop thread
takes them at the end of a slow slice (rare).
"""

from __future__ import annotations

import threading
from typing import Any

from .stacks import Sample

# Slice-duration histogram bucket bounds (seconds); the hot path only counts slices longer
# than the first bound, everything else is derived from the total count (see metrics.py).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BUCKETS_NS = tuple(int(b * 1e9) for b in BUCKETS)
HIST_FLOOR_NS = _BUCKETS_NS[0]


class SliceState:
    __slots__ = (
        "seq",
        "start_ns",
        "handle",
        "thread_id",
        "slow_ns",
        "arm_ns",
        "idle_ns",
        "io_events",
        "io_raw",
        "io_seq",
        "strict",
        "count",
        "total_ns",
        "hist",
        "max_ns",
        "on_slow",
        "monitor",
        # watchdog side
        "lock",
        "sample_seq",
        "samples",
        "sample_interval_ns",
        "next_sample_ns",
        "arm_wall_ns",
        "cpu_at_arm_ns",
        "run_share",
        "run_states",
        "cpu_clock",
        "sampled_task",
        # cause breakdown (causes.py)
        "native_id",
        "base",
        "clocks",
        "clocks_before",
        "wake_clocks",
        "gil_windows",
        "pre",
        "signal_delay_ns",
        "slice_cpu",
    )

    def __init__(self, monitor: Any, thread_id: int) -> None:
        self.monitor = monitor
        self.thread_id = thread_id
        self.seq = 0
        self.start_ns = 0
        self.handle = None
        self.slow_ns = 1 << 62  # report slices at least this long (min consumer threshold)
        self.arm_ns = 1 << 62  # the watchdog starts sampling a slice this old
        self.idle_ns = 0  # heartbeat backend: expected time between beats, not a block
        self.io_events: list = []  # audited I/O of slice io_seq (stale when io_seq != seq)
        # Non-strict: raw (event, args, frame, t_ns) of slice io_seq, classified into
        # io_events only if that slice is reported (most never are).
        self.io_raw: list = []
        self.io_seq = -1
        self.strict = False  # some consumer is strict: slices with I/O must be reported
        self.count = 0
        self.total_ns = 0
        self.hist = [0] * len(_BUCKETS_NS)  # slices longer than each bound
        self.max_ns = 0
        self.on_slow = None
        self.lock = threading.Lock()
        self.sample_seq = -1
        self.samples: list[tuple[Sample, Any]] = []
        self.sample_interval_ns = 1_000_000
        self.next_sample_ns = 0
        self.arm_wall_ns = 0
        self.cpu_at_arm_ns = None
        # Share of the samples that found the loop thread on a CPU (native sampler only).
        self.run_share: float | None = None
        self.run_states: list | None = None  # the (time, running) samples run_share counts
        self.cpu_clock = None
        self.sampled_task = None
        self.native_id: int | None = None  # the loop thread's kernel id
        self.base = None  # (seq, causes.Snapshot) taken when slice seq was armed
        self.clocks = None  # causes.Clocks at the watchdog's last wake
        self.clocks_before = None  # and at the wake before it (see Watchdog._arm)
        self.wake_clocks = None  # the latest clocks as the watchdog's wake under way began
        self.gil_windows: list = []  # causes.GilWindow: late wakes of the watchdog
        self.signal_delay_ns = 0  # run delay the native sampler's signals caused (ringloop)
        self.pre: list = []  # causes.Snapshot at the watchdog's last wakes (quota, busy machine)
        # (start ns, ns): the loop thread's CPU time over the slice being reported, where its
        # backend measured it (the heartbeat: its CPU clock since the last beat); else None.
        self.slice_cpu: tuple[int, int] | None = None

    def in_slice(self) -> bool:
        return self.start_ns != 0

    def record_long(self, duration_ns: int) -> None:
        """Histogram update for a slice longer than HIST_FLOOR_NS (called off the fast path)."""
        hist = self.hist
        for i, bound in enumerate(_BUCKETS_NS):
            if duration_ns > bound:
                hist[i] += 1
            else:
                break
        if duration_ns > self.max_ns:
            self.max_ns = duration_ns

    def take_samples(
        self, seq: int
    ) -> tuple[list[tuple[Sample, Any]], int, int | None, float | None]:
        """Samples captured during slice ``seq`` (with the time and CPU clock at arming, and the
        share of samples that found the thread running), then reset."""
        with self.lock:
            if self.sample_seq != seq:
                return [], 0, None, None
            samples, self.samples = self.samples, []
            self.sample_seq = -1
            share, self.run_share = self.run_share, None
            return samples, self.arm_wall_ns, self.cpu_at_arm_ns, share


class NativeSliceState(SliceState):
    """Slice state kept by ringloop's native dispatcher: ``seq``/``start_ns`` read the loop.

    Contract: ``loop._slice_seq`` increments at each slice start; ``loop._slice_start_ns`` is the
    CLOCK_MONOTONIC start of the running slice, 0 between slices.
    """

    __slots__ = (
        "loop",
        "initial_seq",
        "initial_start_ns",
        "_py_count",
        "_py_total_ns",
        "_py_max_ns",
        "_py_hist",
    )

    def __init__(self, monitor: Any, thread_id: int, loop: Any) -> None:
        self.loop = loop
        if hasattr(loop, "_slice_stats_reset"):
            loop._slice_stats_reset(list(_BUCKETS_NS))
        super().__init__(monitor, thread_id)
        # The slice running when watching began, if the dispatcher was not timing it.
        self.initial_seq = -1
        self.initial_start_ns = 0

    # Slice totals are kept by the dispatcher for *every* timed slice (not only the slow ones
    # this class hears about), so the metrics histogram covers the whole distribution.
    def _native_stats(self) -> tuple[int, int, int, list[int]] | None:
        stats = getattr(self.loop, "_slice_stats", None)
        return stats() if stats is not None else None

    @property  # type: ignore[override]
    def count(self) -> int:
        st = self._native_stats()
        return st[0] if st else self._py_count

    @count.setter
    def count(self, value: int) -> None:
        self._py_count = value

    @property  # type: ignore[override]
    def total_ns(self) -> int:
        st = self._native_stats()
        return st[1] if st else self._py_total_ns

    @total_ns.setter
    def total_ns(self, value: int) -> None:
        self._py_total_ns = value

    @property  # type: ignore[override]
    def max_ns(self) -> int:
        st = self._native_stats()
        return st[2] if st else self._py_max_ns

    @max_ns.setter
    def max_ns(self, value: int) -> None:
        self._py_max_ns = value
        if value == 0 and hasattr(self.loop, "_slice_max_reset"):
            self.loop._slice_max_reset()

    @property  # type: ignore[override]
    def hist(self) -> list[int]:
        st = self._native_stats()
        return list(st[3]) if st else self._py_hist

    @hist.setter
    def hist(self, value: list[int]) -> None:
        self._py_hist = value

    def record_long(self, duration_ns: int) -> None:
        if self._native_stats() is None:
            super().record_long(duration_ns)

    @property  # type: ignore[override]
    def seq(self) -> int:
        return self.loop._slice_seq

    @seq.setter
    def seq(self, value: int) -> None:
        pass  # owned by the native dispatcher

    @property  # type: ignore[override]
    def start_ns(self) -> int:
        v = self.loop._slice_start_ns
        if v == 0 and self.initial_start_ns and self.loop._slice_seq == self.initial_seq:
            return self.initial_start_ns
        return v

    @start_ns.setter
    def start_ns(self, value: int) -> None:
        pass
