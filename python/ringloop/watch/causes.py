"""Why a slice took long: its duration broken down by cause.

A slice that blocked the loop for 180 ms did not necessarily run the application's code for
180 ms. The breakdown (``Block.causes``, largest first; ``Block.kind`` is the largest) names:

- ``gc`` — the cyclic garbage collector ran on the loop thread inside the slice. Evidence:
  generation, objects collected, collections. Measured exactly: a ``gc.callbacks`` entry
  (installed while anything is watched) keeps the last collections' start and stop times;
  it runs once per collection, never per callback.
- ``throttled`` — the process's cgroup hit its CPU quota (CFS bandwidth control, the
  Kubernetes CPU limit): the loop thread was runnable but its group was not allowed to run.
  Evidence: periods throttled and time.
- ``starved`` — the loop thread was runnable but another thread or process had the CPU.
  Evidence: the time it waited for a CPU.
- ``gil`` — the loop thread waited for the GIL while another thread held it. Evidence: that
  thread, and its stack where it can be seen.
- the application's own time: ``cpu`` or ``wait`` (or the audited I/O's kind), with its line.

OS facts relied on (Linux):

- ``/proc/self/task/<tid>/schedstat``: ``<ns on a CPU> <ns runnable, waiting for a CPU>
  <timeslices>``, cumulative per thread (CONFIG_SCHED_INFO, on in every distribution kernel).
  The second field is the run delay. A task of a throttled group stays queued (runnable) on
  its group's throttled run queue, so throttled time shows in its run delay too: throttling
  is the part of the run delay that the cgroup's throttled time accounts for, starvation the
  rest.
- cgroup v1 ``cpu.stat``: ``nr_throttled``, ``throttled_time`` (ns); v2: ``nr_throttled``,
  ``throttled_usec``. Throttled time is summed over the group's per-CPU run queues, so on
  several CPUs it can exceed wall time: it is only ever used up to the loop thread's own run
  delay. A quota set on an ancestor throttles the ancestor's queues, not the child's, so every
  level from the process's group up to the root is read and the largest delta wins.
- Waiting for the GIL is a futex wait: the thread is *sleeping*, not runnable, so it is not
  in the run delay. It is found from the other side: the watch's own Python watchdog needs
  the GIL to run, so when it wakes late while the loop thread stayed off its CPU and another
  Python thread ran, that thread held the GIL (``GilWindow``).

How the readings are taken without cost on the fast path (nothing is read per callback):

- at every wake-up the watchdog thread reads the loop thread's CPU clock and the other Python
  threads' (``clock_gettime`` on their thread CPU clocks, no ``/proc``); those are the
  baseline of a GIL wait that begins before the watchdog can run again;
- once a slice is suspicious (older than the arm point, a quarter of the threshold) the
  watchdog reads the loop thread's ``schedstat`` and the cgroup's ``cpu.stat`` (``Snapshot``);
- when a slice ends over the threshold, the loop thread reads the same again.

The OS counters thus cover the slice from its arm point on; the part before it (at most a
quarter of the threshold) is extrapolated from the measured part (GC, measured exactly, is
taken out of both first). When the watchdog could not arm (the GIL was held from the start),
no ``schedstat`` baseline exists and only ``gc`` and ``gil`` are separated from the
application's time.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from .os_readings import (  # noqa: F401 - the readings are part of causes' API
    Clocks,
    Snapshot,
    _names,
    cgroup_stat_files,
    created_since,
    python_threads,
    schedstat,
    started_delays,
    thread_cpu,
    throttling,
    under_quota,
)


@dataclass
class GilWindow:
    """A time the watchdog could not get the GIL: from when it should have woken to when it
    ran (or the slice ended), with the CPU clocks at both ends."""

    before: Clocks
    after: Clocks
    due_ns: int


# -- garbage collection -----------------------------------------------------------------------

_GC_KEEP = 256
# (thread ident, start ns, end ns, generation, collected, run delay ns inside or -1, CPU ns
# inside or -1, the thread's CPU clock and run delay at the end or -1)
# The watchdog's wakes during which it waited for a CPU while running its Python, which it
# does holding the GIL: (start ns, end ns, its run delay in ns, the loop threads, by ident,
# that were blocked in some other wait as the watchdog ended that wait: `blocked_elsewhere`).
# A loop thread that wanted the GIL then could not run; one asleep in `time.sleep` or a poll
# did not want it. Recorded where the watchdog reads at each wake (a quota, a busy machine:
# `Evidence.pre`).
watch_stalls: deque[tuple[int, int, int, frozenset[int]]] = deque(maxlen=64)
# The wake under way, if any: (start ns, the watchdog's run delay then, its kernel id). A slice
# reported while the watchdog is still in a wake it waited through (it gave the GIL up only
# on the loop thread's request) counts that wait up to the report.
watch_wake: list[tuple[int, int, int] | None] = [None]
_gc_events: deque[tuple[int, int, int, int, int, int, int, int, int]] = deque(maxlen=_GC_KEEP)
# thread ident, ns, run delay and CPU clock at the start (-1: not read)
_gc_start: list[int] = [0, 0, -1, -1]
_gc_users = 0
# Loop threads (ident -> kernel id) whose running slice is armed. A collection there, or any
# full (generation 2) collection, reads the thread's run delay and CPU clock at its start and
# stop (two /proc reads: only inside a suspicious slice, or for the rare collections that take
# long), so that a collection's own wait for a CPU and its CPU time are known exactly (see
# `breakdown`). Its wall time may hold more than these two: the gc callbacks are Python code,
# where the loop thread may hand the GIL to another thread (the watchdog) after the start was
# stamped — a wait that is neither the collection's CPU nor the application's.
armed: dict[int, int | None] = {}


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    ident = threading.get_ident()
    if phase == "start":
        _gc_start[0] = ident
        _gc_start[1] = time.monotonic_ns()
        _gc_start[2] = _gc_start[3] = -1
        if ident in armed or info.get("generation") == 2:
            ss = schedstat(threading.get_native_id())
            if ss is not None:
                _gc_start[2], _gc_start[3] = ss[1], time.thread_time_ns()
    elif _gc_start[1]:
        delay = cpu = stop_cpu = stop_delay = -1
        if _gc_start[2] >= 0:
            stop_cpu = time.thread_time_ns()
            cpu = max(0, stop_cpu - _gc_start[3])
            ss = schedstat(threading.get_native_id())
            if ss is not None:
                stop_delay = ss[1]
                delay = max(0, stop_delay - _gc_start[2])
        _gc_events.append(
            (
                _gc_start[0],
                _gc_start[1],
                time.monotonic_ns(),
                info.get("generation", 0),
                info.get("collected", 0),
                delay,
                cpu,
                stop_cpu,
                stop_delay,
            )
        )
        _gc_start[1] = 0


def gc_watch(on: bool) -> None:
    """Count a user of the GC record (one per watched loop); the callback is installed while
    there is at least one."""
    global _gc_users
    _gc_users += 1 if on else -1
    if _gc_users > 0 and _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)
    elif _gc_users <= 0 and _gc_callback in gc.callbacks:
        _gc_users = 0
        gc.callbacks.remove(_gc_callback)


def gc_in(thread_ident: int, lo: int, hi: int) -> tuple[int, int, int, int]:
    """(ns, collections, highest generation, objects collected) of the collections run by
    thread ``thread_ident`` inside ``[lo, hi]``."""
    ns, n, gen, collected, _, _ = gc_sum(thread_ident, lo, hi)
    return ns, n, gen, collected


def gc_spans(thread_ident: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The (start, end) of each collection run by thread ``thread_ident`` inside ``[lo, hi]``."""
    return [
        (s, e)
        for ident, s, e, *_ in list(_gc_events)
        if ident == thread_ident and lo < e and s < hi
    ]


def gc_sum(
    thread_ident: int, lo: int, hi: int
) -> tuple[int, int, int, int, int | None, int | None]:
    """`gc_in`, and the collections' run delay and CPU time in the window (None: not read)."""
    ns = n = collected = 0
    gen = -1
    delay: int | None = 0
    cpu: int | None = 0
    for ident, s, e, g, c, d, u, _, _ in list(_gc_events):
        if ident != thread_ident or e <= lo or s >= hi:
            continue
        part = min(e, hi) - max(s, lo)
        ns += part
        n += 1
        gen = max(gen, g)
        collected += c
        if d < 0 or u < 0:
            delay = cpu = None  # not read: pro rata instead
        elif delay is not None and cpu is not None:
            delay += d * part // max(1, e - s)  # the part in the window
            cpu += u * part // max(1, e - s)
    return ns, n, gen, collected, delay, cpu


# -- the breakdown ----------------------------------------------------------------------------


@dataclass
class Cause:
    """One share of a block's duration."""

    cause: str  # "gc", "throttled", "starved", "gil", or the application's kind
    seconds: float
    evidence: dict[str, Any] = field(default_factory=dict)
    application: bool = False  # the application's own time (``cpu``/``wait``/an I/O kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "seconds": self.seconds,
            "application": self.application,
            "evidence": dict(self.evidence),
        }

    def describe(self, where: str | None = None) -> str:
        ms = f"{self.seconds * 1000:.1f} ms"
        ev = self.evidence
        if self.cause == "gc":
            return (
                f"{ms} gc (generation {ev.get('generation')}, {_count(ev.get('collected', 0))} objects"
                + (f", {ev['collections']} collections" if ev.get("collections", 1) > 1 else "")
                + ")"
            )
        if self.cause == "throttled":
            n = ev.get("periods", 0)
            return f"{ms} throttled by the cgroup's CPU quota ({n} period{'' if n == 1 else 's'})"
        if self.cause == "starved":
            parts = []
            started = ev.get("thread_start_delay")
            if started:
                names = ", ".join(ev.get("started_threads") or ()) or "a thread"
                parts.append(
                    f"{started * 1000:.1f} ms of it for {names}, started in the slice: the loop"
                    " thread waited for it to run"
                )
            stretched = ev.get("gil_holder_delay")
            if stretched:
                who = ev.get("gil_holder") or "another thread"
                parts.append(
                    f"{stretched * 1000:.1f} ms of it for {who}, which held the GIL the loop"
                    " thread waited for while it waited for a CPU itself"
                )
            return f"{ms} waiting for a CPU" + (f" ({'; '.join(parts)})" if parts else "")
        if self.cause == "gil":
            who = ev.get("thread") or "another thread"
            at = f" at {ev['at']}" if ev.get("at") else ""
            return f"{ms} waiting for the GIL held by {who}{at}"
        at = f" at {where}" if where else ""
        return f"{ms} in your code{at} ({self.cause})"


def _count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    if n >= 10_000:
        return f"{n / 1e3:.0f} k"
    return str(n)


OS_CAUSES = ("gc", "throttled", "starved", "gil")


@dataclass
class Evidence:
    """What the watch gathered about one slice, for `breakdown`."""

    start_ns: int
    end_ns: int
    loop_ident: int
    base: Snapshot | None = None  # at the arm point
    end: Snapshot | None = None
    # At the watchdog's last wakes, which may come before the slice, under a CPU quota or on
    # a busy machine (the watchdog, throttled with the group or waiting for a CPU itself,
    # cannot be relied on to arm in time).
    pre: list[Snapshot] = field(default_factory=list)
    max_gap_ns: int = 0
    signal_delay_ns: int = 0  # run delay caused by the native sampler's signals
    gil: list[GilWindow] = field(default_factory=list)
    # The loop thread's CPU time over the whole slice, where its backend measured it (the
    # heartbeat's CPU clock at its beats: `SliceState.slice_cpu`); else None.
    cpu_ns: int | None = None


def breakdown(ev: Evidence) -> tuple[list[Cause], int | None]:
    """The non-application causes of slice ``ev`` and the application's CPU time in it (ns,
    None if unknown). The application's share is what the causes leave."""
    start, end = ev.start_ns, ev.end_ns
    dur = max(1, end - start)
    causes: list[Cause] = []
    gc_ns, gc_n, gc_gen, gc_coll = gc_in(ev.loop_ident, start, end)
    if gc_ns > 0:
        causes.append(
            Cause(
                "gc", gc_ns / 1e9, {"generation": gc_gen, "collected": gc_coll, "collections": gc_n}
            )
        )
    app_cpu: int | None = None
    started: Cause | None = None
    gil, held = _gil(ev)
    b, e = ev.base, ev.end
    # The baseline: the earliest reading inside the slice if it came early (a quarter of the
    # slice at most: the head before it is extrapolated), or the latest from before it (which
    # also counts what happened between it and the slice, the loop thread waking for it).
    usable = [p for p in ev.pre if p.sched is not None and start - ev.max_gap_ns <= p.t_ns < end]
    if b is not None and b.sched is not None:
        usable.append(b)
    inside = [p for p in usable if p.t_ns > start]
    early = min(inside, key=lambda p: p.t_ns, default=None)
    latest = max((p for p in usable if p.t_ns <= start), key=lambda p: p.t_ns, default=None)
    if latest is None:
        # None within the usual distance (the watchdog was throttled or starved before the
        # slice too): an older one still beats none, or one farther inside. With none, a
        # 204 ms slice throttled from its start came out all the application's CPU.
        stale = (p for p in ev.pre if p.sched is not None and p.t_ns <= start)
        latest = max(stale, key=lambda p: p.t_ns, default=None)
        if latest is not None and early is not None and early.t_ns - start < start - latest.t_ns:
            latest = None
    # Of the two, the one nearer the start: each is wrong by at most its distance. A baseline
    # 189 ms into a 1.19 s throttled slice, taken over a reading 1.9 ms before it, spread the
    # window's ratio over a head that had waited for the quota throughout: 361 ms came out
    # `wait`.
    if (
        early is not None
        and (early.t_ns - start) * 4 <= dur
        and (latest is None or early.t_ns - start <= start - latest.t_ns)
    ):
        b = early
    elif latest is not None:
        b = latest
    else:
        b = early
    if b is not None and b.sched is not None:
        b = _after_collection(ev.loop_ident, b)
    e = _nearest_end(ev, b, e)
    if b is not None and e is not None and b.sched is not None and e.sched is not None:
        lo = max(b.t_ns, start)
        window = end - lo
        gc_w, _, _, _, gc_delay_read, gc_cpu_read = gc_sum(ev.loop_ident, lo, end)
        measured = window - gc_w
        # The threads that had run when the slice began (see `_started_since`), else by the
        # reading in use.
        known = ev.end.known if ev.end is not None else None
        if known is None:
            known = threads_before(start, ev.pre, ev.max_gap_ns, ev.base or b)
        if measured > 0 and measured * 4 >= dur - gc_ns:
            # Extrapolate over the slice's head when the baseline came after the start (see
            # the module docs); one taken before it covers the slice whole.
            scale = 1.0 if b.t_ns <= start else (dur - gc_ns) / measured
            cpu = max(0, e.sched[0] - b.sched[0])
            delay = max(0, e.sched[1] - b.sched[1])
            # An end reading taken a little after the slice (the loop thread running the watch;
            # ringloop's dispatcher reads it at the slice's very end) has a tail that is not
            # the slice's. The loop thread ran or waited for a CPU through it, in the ratio the
            # window shows: under two CPU hogs most of it is a wait, not CPU time. Except while
            # the watchdog, waiting for a CPU itself, held the GIL (`watch_stalls`): the loop
            # thread slept then (a whole period of a throttled group's, after a slice).
            tail = max(0, e.t_ns - end)
            tail = max(0, tail - _watch_stalled(end, e.t_ns, ev.loop_ident))
            if tail:
                tail_delay = min(delay, tail * delay // max(1, cpu + delay))
                cpu = max(0, cpu - (tail - tail_delay))
                delay -= tail_delay
            # Run delay of the sampler's own signals: they wake a sleeping loop thread, which
            # then waits for a CPU only to run the handler (ringloop's native sampler).
            delay = max(0, delay - ev.signal_delay_ns)
            # A collection's own wait for a CPU and its CPU time are read at its start and
            # stop when the slice was armed, else its wall time is shared pro rata of the time
            # each part wanted a CPU (a collection wants one throughout; the rest for its CPU
            # time and its wait).
            wanting = max(1, cpu + delay)
            if gc_delay_read is not None and gc_cpu_read is not None:
                gc_delay = min(delay, gc_delay_read)
                gc_cpu = gc_cpu_read
            else:
                gc_delay = min(delay, delay * gc_w // wanting)
                gc_cpu = gc_w - gc_delay
            cpu = max(0, cpu - gc_cpu)
            delay -= gc_delay
            head_cpu = None
            if scale > 1.0 and ev.cpu_ns is not None and not gc_ns:
                # The slice's head, before the baseline, need not look like the rest: a loop
                # thread throttled from the slice's start spun its 5 ms only after a baseline
                # read 288 ms in, and the window's ratio made 10 ms of CPU of it. With the
                # whole slice's CPU known, the head's is what the window leaves of it, and
                # only its other time is spread like the window's time off its CPU.
                head_cpu = min(dur - measured, max(0, ev.cpu_ns - cpu))
            thr_ns, periods = _throttled(b, e)
            thr = min(thr_ns, delay)
            # The time the loop thread was off its CPU and not waiting for one outside
            # collections: it slept, or waited for a lock, an event, another thread (the run
            # delay the sampler's signals caused is sleep too: it is out of `delay` already).
            off = max(0, measured - cpu - delay)
            if head_cpu is not None:
                scale = 1.0 + (dur - measured - head_cpu) / max(1, delay + off)
            started = _book_machine(
                causes, ev, known, held, lo, off, delay, thr, thr_ns, periods, scale
            )
            app_cpu = int(cpu * scale) if head_cpu is None else cpu + head_cpu
        else:
            # The baseline came too late to extrapolate from (a watchdog waiting for a CPU on
            # a busy machine). A thread started in the slice still gives its wait, which needs
            # no extrapolation; the loop thread may have slept through all of the slice that
            # the readings do not show to be its CPU time or its own wait for a CPU.
            cpu = max(0, e.sched[0] - b.sched[0])
            # Its waits for a CPU that ended in the window are the slice's (it was on its CPU
            # as the slice began, so a wait still going at the baseline began inside it): at
            # least that much was the machine's. The run delay is added up as a wait ends, so
            # a late baseline may be followed by tens of ms of it in a window of 3.
            delay = max(0, e.sched[1] - b.sched[1] - ev.signal_delay_ns)
            delay = min(delay, max(0, dur - gc_ns - cpu))
            thr_ns, periods = _throttled(b, e)
            thr = min(thr_ns, delay)
            # Throttling as far as the group's throttled time from the earliest reading on
            # goes (the baseline came too late to frame the slice).
            off = max(0, dur - gc_ns - cpu - delay)
            first = min((p for p in ev.pre if p.t_ns < b.t_ns), key=lambda p: p.t_ns, default=b)
            wide_ns = max(thr_ns, _throttled(first, e)[0])
            started = _book_machine(
                causes, ev, known, held, start, off, delay, thr, wide_ns, periods, 1.0
            )
    if gil is not None:
        # While another thread held the GIL the loop thread could not run its code anyway:
        # its wait for a CPU then (it wakes every switch interval to ask for the GIL) is inside
        # the GIL wait, which counts it already (it was added to it as well, counted twice: a
        # GIL wait 40 % over the test's, once the holder's own waits for a CPU were taken
        # out below). The run delay is not read at the window's edges, so its share in the
        # window is taken pro rata of the time outside collections.
        outside_gc = max(1, dur - gc_ns)
        for c in causes:
            if c.cause == "starved":
                c.seconds -= c.seconds * min(1.0, gil.seconds * 1e9 / outside_gc)
        # What of the GIL wait the holder itself spent waiting for a CPU, still holding the GIL,
        # is the machine's: on a free CPU the holder would have run through it (or, running
        # Python, given the GIL up at the switch interval). A worker thread doing its job beside
        # the loop on a busy machine made 22 ms of "GIL" out of a few ms of its own work.
        stretched = min(gil.seconds, sum(held.values()) / 1e9)
        if stretched * 1e9 >= _MIN_GIL_NS / 4:
            gil.seconds -= stretched
            own = next((c for c in causes if c.cause == "starved"), None)
            if own is None:
                own = Cause("starved", 0.0, {"run_delay": 0.0})
                causes.append(own)
            own.seconds += stretched
            own.evidence["gil_holder_delay"] = stretched
            own.evidence["gil_holder"] = gil.evidence.get("thread")
        causes = [c for c in causes if c.seconds > 0]
        if gil.seconds > 0:
            causes.append(gil)
    if started is not None:
        # Not moved into a GIL wait above: the loop thread was not waiting for a CPU itself.
        own = next((c for c in causes if c.cause == "starved"), None)
        if own is None:
            own = Cause("starved", 0.0, {"run_delay": 0.0})
            causes.append(own)
        own.seconds += started.seconds
        own.evidence.update(started.evidence)
    # Never more than the slice: the measured causes overlap only by measurement error.
    total = sum(c.seconds for c in causes)
    if total * 1e9 > dur:
        f = dur / 1e9 / total
        for c in causes:
            c.seconds *= f
            for part in ("thread_start_delay", "gil_holder_delay"):
                if part in c.evidence:
                    c.evidence[part] *= f
    return causes, app_cpu


def _book_machine(
    causes: list[Cause],
    ev: Evidence,
    known: frozenset[int] | None,
    held: dict[int, int],
    lo: int,
    off: int,
    delay: int,
    thr: int,
    thr_ns: int,
    periods: int,
    scale: float,
) -> Cause | None:
    """Book the machine's share of a window from ``lo`` to the slice's end (ns, scaled to the
    slice by ``scale``): ``thr`` throttled and the rest of the loop thread's run delay
    ``delay`` starved; of its time ``off`` its CPU and not waiting for one, first what threads
    started in the slice explain (returned: `_started_since`), then what of the rest the
    watchdog spent waiting for a CPU with the GIL held or handed to it (`watch_stalls`),
    throttled as far as the group's throttled time ``thr_ns`` goes beyond ``thr``."""
    started = _started_since(known, ev, off * scale, held)
    left = off - (int(started.seconds * 1e9 / scale) if started is not None else 0)
    moved = min(_watch_stalled(lo, ev.end_ns, ev.loop_ident), max(0, left))
    thr_more = min(moved, max(0, thr_ns - thr))
    throttled = (thr + thr_more) * scale
    starved = (delay - thr + moved - thr_more) * scale
    if throttled > 0:
        evidence = {"periods": periods, "throttled_time": thr_ns / 1e9}
        causes.append(Cause("throttled", throttled / 1e9, evidence))
    if starved > 0:
        causes.append(Cause("starved", starved / 1e9, {"run_delay": starved / 1e9}))
    return started


def _watch_stalled(lo: int, hi: int, loop_ident: int) -> int:
    """How long, of [lo, hi], the watchdog was off its CPU while running its Python (and so
    holding the GIL): see `watch_stalls`, for loop thread ``loop_ident``. Each stall is
    spread evenly over its wake, less the parts of the wake spent in a collection on the loop
    thread: the collection holds the GIL throughout, so the watchdog could not, and its run
    delay there came from waking to ask for the GIL (a wake that began just before an 80 ms
    sleep ended and waited out the 1 s collection that followed booked 47 ms of that sleep as a
    wait for a CPU). A stall that ended with the loop thread blocked in another wait (asleep)
    is none of its own: under two CPU hogs the watchdog's 2-4 ms stalls every 4 ms, booked
    over an 80 ms `time.sleep`, took 20-30 ms of it (issue 23's gc-and-wait miss)."""
    total = 0
    stalls = list(watch_stalls)
    ongoing = watch_wake[0]
    if ongoing is not None and ongoing[0] < hi:
        now = schedstat(ongoing[2])
        if now is not None and now[1] - ongoing[1] >= 0:
            stalls.append((ongoing[0], time.monotonic_ns(), now[1] - ongoing[1], frozenset()))
    for s, e, off, elsewhere in stalls:
        if loop_ident in elsewhere:
            continue
        a, z = max(s, lo), min(e, hi)
        overlap = z - a
        if overlap > 0:
            for gs, ge in gc_spans(loop_ident, a, z):
                overlap -= min(ge, z) - max(gs, a)
            total += off * max(0, overlap) // max(1, e - s)
    return total


def _throttled(b: Snapshot, e: Snapshot) -> tuple[int, int]:
    """The cgroup's throttled time (ns) and periods between two readings, at the level that
    was throttled most (see the module docs)."""
    thr_ns, periods = 0, 0
    for path, (n1, t1) in e.throttle.items():
        n0, t0 = b.throttle.get(path, (n1, t1))
        if t1 - t0 > thr_ns:
            thr_ns, periods = t1 - t0, n1 - n0
    return thr_ns, periods


def threads_before(
    start_ns: int, pre: list[Snapshot], max_gap_ns: int, base: Snapshot | None
) -> frozenset[int] | None:
    """The Python threads that had run when a slice began, as far as the readings tell: those
    of the watchdog's last reading before the slice (taken at each wake once it has woken
    late, see `Evidence.pre`), else those of its baseline. The baseline comes a quarter of
    the threshold into the slice on time, but a watchdog waiting for a CPU itself took it
    100 ms in, after a thread started in the slice had run: that thread was then "known", its
    wait for a CPU booked as the application's (issue 23, under two CPU hogs)."""
    framing = [
        p for p in pre if p.threads is not None and start_ns - max_gap_ns <= p.t_ns <= start_ns
    ]
    if framing:
        return max(framing, key=lambda p: p.t_ns).threads
    if base is None or base.threads is None:
        return None
    if (base.t_ns if base.threads_t_ns is None else base.threads_t_ns) <= start_ns:
        return base.threads
    # Without a reading from before the slice, the threads the kernel created since its start
    # are the slice's: the baseline may have come after they ran (a thread created in the
    # tick before the start counts too; its wait for a CPU is capped by the loop thread's
    # sleep in the slice all the same).
    return base.threads - created_since(base.threads, start_ns)


def _nearest_end(ev: Evidence, b: Snapshot | None, e: Snapshot | None) -> Snapshot | None:
    """The reading that frames the slice's end best. The end reading is taken as the slice
    ends, or after it (a backend that learns of the end late: uvloop's heartbeat, a report
    made on a throttled thread); its tail past the end is taken out as if the loop thread ran
    or waited for a CPU through it, which a loop that went to sleep did not (101 ms of a
    throttled slice booked as the application's wait). A watchdog reading inside the slice
    nearer its end than that tail frames it instead: the gap from it to the end is taken as
    the loop thread wanting a CPU, up to what the counters grew by the end reading, in their
    proportion. Either way the error is at most the distance of the reading from the end,
    once a wait for a CPU still going at that reading is counted: the kernel adds a wait to
    the run delay only as it ends, so what the counters grew by beyond the time between the
    two readings is that wait's part before the reading, inside the slice (the loop thread
    ran as the slice began). Without it a 7.6 ms wait ending just after the reading was booked
    as 0.2 ms, and the rest as the application's wait."""
    if e is None or e.sched is None or e.t_ns <= ev.end_ns:
        return e
    lo = b.t_ns if b is not None else ev.start_ns
    inside = [p for p in ev.pre if p.sched is not None and lo < p.t_ns <= ev.end_ns]
    p = max(inside, key=lambda p: p.t_ns, default=None)
    if p is None or p.sched is None or ev.end_ns - p.t_ns >= e.t_ns - ev.end_ns:
        return e
    d_cpu = max(0, e.sched[0] - p.sched[0])
    d_delay = max(0, e.sched[1] - p.sched[1])
    before_p = min(d_delay, max(0, d_cpu + d_delay - (e.t_ns - p.t_ns)))
    d_delay -= before_p
    grew = d_cpu + d_delay
    wanted = min(ev.end_ns - p.t_ns, grew)
    delay = wanted * d_delay // max(1, grew)
    sched = (p.sched[0] + wanted - delay, p.sched[1] + before_p + delay)
    return replace(e, t_ns=ev.end_ns, sched=sched)


def _started_since(
    known: frozenset[int] | None, ev: Evidence, off_ns: float, held: dict[int, int]
) -> Cause | None:
    """The wait of the loop thread, in a slice, for threads that began to run in it, while
    they waited for a CPU: ``threading.Thread.start`` returns only once the new thread has run
    (it waits on an Event the thread sets), so the first ``asyncio.to_thread`` or executor job
    that starts a worker waits for that worker to be scheduled — microseconds on an idle
    machine, tens of ms under load. The loop thread is asleep meanwhile (no run delay of its
    own), so without this the wait looked like the application's.

    ``known``: the Python threads that had run by the baseline reading (the watchdog's, a
    quarter of the threshold into the slice; a thread still waiting for its first CPU then is
    not in it). Each thread that has run since gives its whole run delay (it began inside the
    slice, or at most just before the baseline), capped by the time the loop thread was off its
    CPU without waiting for one: a worker whose later work waited for a CPU while the loop
    thread also slept elsewhere in the slice can take at most that sleep. ``held``: per thread,
    its waits for a CPU while it held the GIL the loop thread waited for (`_gil`): the GIL
    wait's, not a start's."""
    if known is None or off_ns <= 0:
        return None
    delay, names = 0, []
    # Read at the slice's end where the end readings were taken then (os_readings), else now.
    at_end = ev.end.started if ev.end is not None else None
    if at_end is None:
        at_end = started_delays(known) or {}
    for tid, (name, d) in at_end.items():
        if tid in known or d <= 0:
            continue
        delay += max(0, d - held.get(tid, 0))
        names.append(name)
    wait = min(delay, off_ns)
    if wait < 50_000:  # 0.05 ms: below what the readings resolve
        return None
    return Cause(
        "starved", wait / 1e9, {"thread_start_delay": wait / 1e9, "started_threads": names}
    )


def _after_collection(thread_ident: int, b: Snapshot) -> Snapshot:
    """Baseline ``b`` moved to the end of the collection it was taken in, if any. A watchdog
    gets the GIL inside a collection only in its callbacks (Python code: the loop thread may
    hand the GIL over there), so a baseline stamped inside one lies before the collection's
    work, or after it: its share of the collection's CPU and wait cannot be told. The readings
    the callback took at the collection's end can: the same clocks, on the loop thread."""
    for ident, s, e, _, _, _, _, stop_cpu, stop_delay in list(_gc_events):
        if ident == thread_ident and s < b.t_ns < e and stop_cpu >= 0 and stop_delay >= 0:
            return Snapshot(e, (stop_cpu, stop_delay), b.throttle, b.threads)
    return b


_MIN_GIL_NS = 2_000_000  # a watchdog this late may just have been slow to be scheduled


def _loop_was_busy(w: GilWindow, holder_cpu: int) -> bool:
    """Whether the loop thread spent window ``w`` running or waiting for a CPU rather than
    waiting for the GIL, which is a sleep (a futex wait): then another thread's CPU time in the
    window (a worker in C code without the GIL, beside a loop busy with its own code, the
    watchdog late for want of a CPU) is not a GIL the loop thread waited for. With its run
    delay read at both ends (a busy machine), what it slept says it; else its CPU time must be
    well under the other thread's. A window where the loop thread ran a while and then waited
    (it polled while the other thread waited for a CPU, then that thread took the GIL) passes
    the first test, not the second: without the delay read it is lost (issue 23)."""
    b, a = w.before, w.after
    if b.loop is None or a.loop is None:
        return False
    loop_cpu = a.loop - b.loop
    if b.delay is not None and a.delay is not None:
        asleep = (a.t_ns - b.t_ns) - loop_cpu - (a.delay - b.delay)
        return asleep * 4 < holder_cpu
    return holder_cpu < 2 * loop_cpu


def _gil(ev: Evidence) -> tuple[Cause | None, dict[int, int]]:
    """The loop thread's wait for a GIL another thread held, from the watchdog's late wakes,
    and per holder (kernel thread id) the part of that wait it spent waiting for a CPU itself
    (see `_started_since`)."""
    wait = 0
    holders: dict[int, int] = {}
    held: dict[int, int] = {}
    for w in ev.gil:
        lo, hi = max(w.due_ns, ev.start_ns), min(w.after.t_ns, ev.end_ns)
        span = hi - lo
        if span < _MIN_GIL_NS:
            continue
        whole = max(1, w.after.t_ns - w.before.t_ns)
        loop_cpu = 0
        if w.before.loop is not None and w.after.loop is not None:
            loop_cpu = (w.after.loop - w.before.loop) * span // whole
        # Another Python thread ran for much of the window: it held the GIL.
        best, best_cpu = None, 0
        for ident, c1 in w.after.others.items():
            c0 = w.before.others.get(ident, 0)  # not there before: started since, from 0
            if c1 - c0 > best_cpu:
                best, best_cpu = ident, c1 - c0
        # A holder starved of CPU (a loaded machine) still runs for a fair part of the window.
        if best is None or best_cpu * 16 < whole:
            # No Python thread ran: the watchdog was late for want of a CPU, not of the GIL. (A
            # thread that started and ended inside the window is not seen either; the process's
            # CPU clock cannot tell it from native threads such as ringloop's sampler.)
            continue
        if _loop_was_busy(w, best_cpu):
            continue
        waited = max(0, span - loop_cpu)
        wait += waited
        holders[best] = holders.get(best, 0) + waited
        # What of it the holder spent waiting for a CPU itself (its clock ran for the rest).
        held[best] = held.get(best, 0) + max(0, waited - best_cpu * span // whole)
    if wait < _MIN_GIL_NS:
        return None, held
    holder = max(holders, key=holders.__getitem__)
    ident = next((t.ident for t in list(threading._active.values()) if t.native_id == holder), None)  # noqa: SLF001
    evidence: dict[str, Any] = {
        "thread": _names.get(holder) or f"thread {holder}",
        "native_id": holder,
    }
    if ident is not None:
        evidence["ident"] = ident
    return Cause("gil", wait / 1e9, evidence), held
