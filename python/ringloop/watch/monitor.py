"""One `LoopMonitor` per watched loop: consumers, the backend, and turning slices into Blocks.

A *consumer* is whoever wants blocks: a `no_blocking` scope, the production watch started by
`start()`, the pytest plugin. Consumers have their own threshold, strict flag, sample rate and
context providers; the monitor runs the backend at the lowest threshold among them and hands
each consumer the blocks that concern it. Time before a consumer was attached never counts
against it: a slice that started before a scope was entered is measured from the entry.

Everything here runs on the loop thread, after a slice has ended (``slice_ended``) or when a
scope exits in the middle of one (``in_progress``), never inside the slice being measured, so
building a report (which reads source files) is not itself reported.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from . import app_kind, audit, causes
from .audit import IoEvent
from .backends import asyncio_handles, select_backend
from .backends.asyncio_handles import AsyncioBackend
from .block import (
    Block,
    coroutine_name,
    describe_callback,
    suspension_point,
    task_of,
)
from .slice_io import MAX_IO_EVENTS, record_io
from .slices import HIST_FLOOR_NS, SliceState
from .stacks import blamed_frame, format_location, summaries
from .watchdog import get_watchdog, read_busy_ns

logger = logging.getLogger("ringloop.watch")

_MIN_ARM_NS = 500_000


class Consumer:
    """A subscriber to blocks on one or more loops."""

    def __init__(
        self,
        threshold: float,
        deliver: Callable[[Block], Any],
        *,
        strict: bool = False,
        sample_rate: float = 1.0,
        context_providers: Sequence[Callable[[], dict[str, Any]]] = (),
    ) -> None:
        if threshold <= 0:
            raise ValueError("threshold must be > 0 seconds")
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError("sample_rate must be within [0, 1]")
        self.threshold = threshold
        self.threshold_ns = int(threshold * 1e9)
        self.deliver = deliver
        self.strict = strict
        self.sample_rate = sample_rate
        self._rate_cut = int(sample_rate * (1 << 32))
        self.context_providers = list(context_providers)
        self.enter_ns = time.monotonic_ns()
        self.monitors: list[LoopMonitor] = []

    def samples(self, owner: Any) -> bool:
        """Whether blocks of this task (or callback) are reported, a fixed choice per task."""
        if self._rate_cut >= 1 << 32:
            return True
        # Identity hash scrambled (Knuth's multiplicative hash) so neighbouring ids spread out.
        return (hash(owner) * 2654435761) & 0xFFFFFFFF < self._rate_cut


class LoopMonitor:
    def __init__(self, loop: Any, thread_id: int) -> None:
        self.loop = loop
        self.thread_id = thread_id
        self.consumers: list[Consumer] = []
        self.backend = select_backend(loop, self)
        self.state = self.backend.state
        self.state.on_slow = self.slice_ended
        self.blocks_seen = 0
        self._evidence: causes.Evidence | None = None

    # -- consumers -----------------------------------------------------------------------
    def add(self, consumer: Consumer) -> None:
        first = not self.consumers
        self.consumers.append(consumer)
        consumer.monitors.append(self)
        self._retune()
        if first:
            get_watchdog().add(self.state)
            causes.gc_watch(True)
            # Last: a heartbeat dates blocks from the loop thread's CPU since its start, which
            # the set-up above would otherwise add to the first block.
            self.backend.start()
            # A ringloop loop, and a stock asyncio one, report I/O through ringloop's C-level
            # hook; the Python-level hook is process-wide and can never be removed, so it is
            # only installed for loops that need it (uvloop).
            if self.loop in audit.native_loops:
                audit.connect_native(_audit_sink, _is_watched)
            else:
                audit_source.install(_audit_sink, _is_watched)

    def remove(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if self in consumer.monitors:
            consumer.monitors.remove(self)
        if self.consumers:
            self._retune()
            return
        self.backend.stop()
        get_watchdog().remove(self.state)
        causes.gc_watch(False)
        if _monitors.get(self.loop) is self:
            del _monitors[self.loop]
        _retired.append(self.state)

    def _retune(self) -> None:
        thr = min(c.threshold_ns for c in self.consumers)
        st = self.state
        st.slow_ns = min(thr, HIST_FLOOR_NS)
        st.strict = any(c.strict for c in self.consumers)
        st.arm_ns = st.idle_ns + max(thr // 4, _MIN_ARM_NS)
        st.sample_interval_ns = min(max(thr // 8, _MIN_ARM_NS), 50_000_000)
        self.backend.retune(thr)

    # -- slices --------------------------------------------------------------------------
    def end_readings(
        self,
        duration_ns: int,
        at_end: tuple[int, int, int] | None = None,
        seq: int | None = None,
    ) -> tuple[int | None, causes.Snapshot | None]:
        """The loop thread's busy clock and, for a block, the OS counters, read as the slice
        ends: a backend that has work of its own to do first (turning 256 native samples into
        frames took 10 ms) reads them before it and hands them to `slice_ended`. ``at_end``:
        the loop thread's (time, CPU clock, run delay) the dispatcher read at the slice's very
        end (ringloop's `_slice_end_readings`), used in place of reading them now. ``seq``:
        the slice, when it is not the latest one."""
        st = self.state
        # Slices between the histogram's floor (1 ms) and every consumer's threshold come
        # here too, for the metrics only: nothing is read for them. The busy clock (a /proc
        # read where it is schedstat) only serves the CPU share from the watchdog's arming
        # on (`_cpu_fraction`), so it is read for a block or a slice the watchdog armed.
        block = bool(self.consumers) and duration_ns >= min(c.threshold_ns for c in self.consumers)
        cpu_end: int | None = None
        if at_end is not None and isinstance(st.cpu_clock, tuple):
            cpu_end = at_end[1] + at_end[2]  # the busy clock: on a CPU + waiting
        elif block or st.sample_seq == (st.seq if seq is None else seq):
            cpu_end = read_busy_ns(st.cpu_clock)
        snap = None
        if block:
            _tls.reporting = True  # the watch's own reads of /proc are not the slice's I/O
            try:
                if at_end is not None:
                    t_ns, cpu, delay = at_end
                    snap = causes.Snapshot(t_ns, (cpu, delay), causes.throttling())
                else:
                    snap = causes.Snapshot.take(self.state.native_id)
                base = st.base
                mine = (
                    base[1]
                    if base is not None and base[0] == (st.seq if seq is None else seq)
                    else None
                )
                known = causes.threads_before(
                    snap.t_ns - duration_ns, st.pre, self._pre_gap_ns(), mine
                )
                if known is not None:
                    snap.known = known
                    snap.started = causes.started_delays(known)
            finally:
                _tls.reporting = False
        return cpu_end, snap

    def slice_ended(
        self,
        handle: Any,
        start_ns: int,
        end_ns: int,
        task: Any = None,
        seq: int | None = None,
        readings: tuple[int | None, causes.Snapshot | None] | None = None,
    ) -> None:
        """Called on the loop thread right after a slice that was long or did audited I/O.

        ``seq`` names the slice when it is not the latest one (native strict-mode flush);
        ``readings`` are `end_readings` taken when the slice ended, if the caller took them."""
        # How busy the loop thread was, read before reporting work (reading source files,
        # formatting stacks) adds time that is not the slice's.
        if readings is None:
            readings = self.end_readings(end_ns - start_ns, seq=seq)
        cpu_end, snap = readings
        try:
            if snap is not None:
                self._evidence = self._gather(start_ns, end_ns, seq, snap)
                if snap.sched is not None and self._reading_each_wake():
                    # The loop thread's own reading, moments after this slice: a frame for the
                    # next one, where the watchdog (throttled with the group, or waiting for a
                    # CPU) read nothing since. A slice throttled from its start then had only
                    # a baseline read at its end, and 55 ms of its 293 ms wait for the quota
                    # came out the application's.
                    st = self.state
                    st.pre = [*st.pre[-3:], snap]
            self._slice_ended(handle, start_ns, end_ns, task, seq, cpu_end)
        except Exception:  # never let reporting break the loop
            logger.exception("ringloop.watch: failed to report a slow slice")

    def _gather(
        self, start_ns: int, end_ns: int, seq: int | None, end: causes.Snapshot | None = None
    ) -> causes.Evidence:
        """The OS counters at the end (``end``, else now), with the watchdog's baseline of
        slice `seq` (causes.py)."""
        st = self.state
        if seq is None:
            seq = st.seq
        _tls.reporting = True  # the watch's own reads of /proc are not the slice's I/O
        try:
            ev = causes.Evidence(start_ns, end_ns, self.thread_id)
            base = st.base
            if base is not None and base[0] == seq:
                ev.base = base[1]
                st.base = None
            ev.end = end if end is not None else causes.Snapshot.take(st.native_id)
            ev.pre, ev.max_gap_ns = list(st.pre), self._pre_gap_ns()
            ev.signal_delay_ns, st.signal_delay_ns = st.signal_delay_ns, 0
            if st.slice_cpu is not None and st.slice_cpu[0] == start_ns:
                ev.cpu_ns = st.slice_cpu[1]
            ev.gil = [w for w in st.gil_windows if w.after.t_ns > start_ns]
            st.gil_windows = []
            wd = get_watchdog()
            c = st.clocks
            due = max(wd.due_ns, c.t_ns) if c is not None else 0
            if c is not None and wd.in_wake and wd.woke_ns < end_ns:
                # The watchdog is inside a wake: it gave the GIL up on the way and has waited
                # for it since (`Watchdog._run` records the same window if it ends first), or
                # it woke late and has not recorded that yet (then its baseline is still the
                # last wake's, and the window opens when the wake was due).
                w0 = st.wake_clocks or c
                now = self._window_end(st, wd, ev.end)
                due = max(w0.t_ns, min(wd.woke_ns, wd.wake_due or wd.woke_ns))
                ev.gil.append(causes.GilWindow(w0, now, due))
            elif c is not None and wd.woke_ns < wd.due_ns and due < end_ns:
                # The watchdog has been waiting for the GIL since it was due (or since the
                # baseline, if that came later): a window still open. Due before the slice
                # began, it may have waited for a CPU first; `causes._gil` takes the window
                # from the slice's start.
                now = self._window_end(st, wd, ev.end)
                ev.gil.append(causes.GilWindow(c, now, due))
            return ev
        finally:
            _tls.reporting = False

    @staticmethod
    def _window_end(st: SliceState, wd: Any, end: causes.Snapshot) -> causes.Clocks:
        """The clocks closing a GIL window still open at a slice's report. Its run delay is the
        end snapshot's, read moments before (or at the slice's very end) by this same thread,
        which has run since: a second /proc read would add nothing."""
        now = causes.Clocks.take(st.native_id, wd.native_id)
        now.delay = end.sched[1] if end.sched is not None else None
        return now

    @staticmethod
    def _reading_each_wake() -> bool:
        """Whether the watchdog takes `Evidence.pre` readings at its wakes now (`Watchdog._run`):
        under a CPU quota, or for a while after it woke late."""
        return causes.under_quota() or time.monotonic_ns() < get_watchdog().busy_until

    def _pre_gap_ns(self) -> int:
        """How long before a slice a watchdog reading may come and still frame it. Under a
        quota the watchdog may itself be throttled for up to a period (100 ms by default)
        before the slice began: a reading that old still frames it. Else the watchdog's last
        wake before the slice, if it came within its usual distance (the run delay between it
        and the slice's start counts as the slice's)."""
        st = self.state
        gap = 100_000_000 if causes.under_quota() else st.idle_ns + 10_000_000
        return st.arm_ns + gap

    def _slice_ended(
        self, handle: Any, start_ns: int, end_ns: int, task: Any, seq, cpu_end: int
    ) -> None:
        st = self.state
        if seq is None:
            seq = st.seq
        _materialize_io(st, seq)
        io = st.io_events if st.io_seq == seq else []
        if st.io_events:
            st.io_events = []
        duration = end_ns - start_ns
        if duration > HIST_FLOOR_NS:
            st.record_long(duration)
        samples, arm_wall, cpu0, share = st.take_samples(seq)
        cpu = self._cpu_fraction(share, arm_wall, cpu0, cpu_end, end_ns)
        window = self._share_window(share, arm_wall, start_ns)
        own, st.slice_cpu = st.slice_cpu, None
        late = not arm_wall or (arm_wall - start_ns) * 4 > duration  # 0: never armed
        # Not with a collection in the slice: its CPU would be the share's, and taking it out
        # again rests on the collection's own CPU reading (`app_kind.outside_gc`), whose error
        # then lands whole in the application's share (an 80 ms sleep before a 520 ms
        # collection came out 78 ms of `cpu`). The armed window's share, or `unknown`, stands.
        quiet = not causes.gc_in(self.thread_id, start_ns, end_ns)[0]
        whole = self._whole_share(own, start_ns, end_ns) if late and quiet else None
        if whole is not None:
            # The watchdog armed late or never: the loop thread held the GIL (a C call) until
            # near the slice's end, and a share from the arming on saw only the tail, where the
            # loop thread waited for the GIL the arming watchdog held (a 49 ms `sum()` came
            # out `wait` on uvloop; on 3.14, 11 of 20 60 ms ones on stock asyncio). A CPU
            # clock over the slice whole does not count waits for a CPU (`_share_window`).
            cpu, window = whole, (start_ns, False, None)
        self._dispatch(handle, start_ns, end_ns, task, io, samples, cpu, False, window=window)

    def _whole_share(self, own: tuple[int, int] | None, start_ns: int, end_ns: int) -> float | None:
        """The loop thread's CPU share over the whole slice, by a CPU clock: its backend's, where
        it measured the slice (`SliceState.slice_cpu`: the heartbeat's), else the loop thread's
        clock as the watchdog read it at its last wake before the slice (`Clocks`: each wake
        reads it, no /proc) and now. None where that wake came too long before the slice."""
        duration = end_ns - start_ns
        if own is not None and own[0] == start_ns:
            return min(1.0, own[1] / max(1, duration))
        st = self.state
        # The last two wakes may both have come after the call that held the GIL; a late
        # wake's GIL window keeps the clocks of the wake before it (`Watchdog._late`).
        ev = self._evidence
        windows = [w.before for w in ev.gil] if ev is not None and ev.start_ns == start_ns else []
        framing = [
            c
            for c in (st.clocks, st.clocks_before, *windows)
            if c is not None and c.loop is not None and c.t_ns <= start_ns
        ]
        if not framing:
            return None
        c = max(framing, key=lambda c: c.t_ns)
        if (start_ns - c.t_ns) * 4 > duration:
            return None
        cpu_now, now = causes.thread_cpu(st.native_id), time.monotonic_ns()
        if cpu_now is None:
            return None
        # From that wake to now: a little before the slice (idle, on an idle loop) and the
        # report's work so far after it (on the CPU): both small beside the slice.
        return max(0.0, min(1.0, (cpu_now - c.loop) / max(1, now - c.t_ns)))

    def in_progress(self, consumer: Consumer, now_ns: int) -> None:
        """A scope ends inside a running slice: judge the part of the slice seen so far."""
        cpu_end = read_busy_ns(self.state.cpu_clock)
        st = self.state
        start = st.start_ns
        if start == 0:
            return
        start = min(start + st.idle_ns, now_ns)  # heartbeat: late only once a beat is overdue
        handle = st.handle
        with st.lock:
            current = st.sample_seq == st.seq
            samples = list(st.samples) if current else []
            arm_wall, cpu0 = st.arm_wall_ns, st.cpu_at_arm_ns
            share = st.run_share if current else None
        task = None
        if handle is None:
            task = _current_task(self.loop)
        take = getattr(self.backend, "take_buffered_io", None)
        if take is not None and threading.get_ident() == self.thread_id:
            take()  # the C hook's buffer is the loop thread's own
        _materialize_io(st, st.seq)
        io = list(st.io_events) if st.io_seq == st.seq else []
        cpu = self._cpu_fraction(share, arm_wall, cpu0, cpu_end, now_ns)
        self._evidence = self._gather(start, now_ns, st.seq)
        window = self._share_window(share, arm_wall, start)
        self._dispatch(handle, start, now_ns, task, io, samples, cpu, True, consumer, window=window)

    def _cpu_fraction(
        self, share: float | None, arm_wall: int, cpu0: int | None, cpu_end: int | None, end_ns: int
    ) -> float | None:
        """How much of the blocked time the loop thread spent on (or waiting for) a CPU, from
        the arming on: the native sampler's share of samples that found it running, else its
        schedstat or CPU clock (a Python sampler does not disturb the thread it samples; a
        signal does)."""
        if share is not None:
            return share
        wall = end_ns - arm_wall
        if cpu0 is None or cpu_end is None or wall <= 0:
            return None
        return max(0.0, min(1.0, (cpu_end - cpu0) / wall))

    def _share_window(
        self, share: float | None, arm_wall: int, start_ns: int
    ) -> tuple[int, bool, list | None]:
        """What `_cpu_fraction`'s share covers, for `app_kind.outside_gc`: from when (the
        arming, else the slice's start), whether it counts the thread's waits for a CPU (the
        native sampler's share and a schedstat busy clock do; a bare CPU clock does not), and
        the native sampler's ``(time, running)`` samples it was counted from (None: a clock)."""
        counts_waits = share is not None or isinstance(self.state.cpu_clock, tuple)
        states = self.state.run_states if share is not None else None
        return arm_wall or start_ns, counts_waits, states

    def _dispatch(self, *args: Any, **kwargs: Any) -> None:
        # Building a report reads source files (linecache) and may log: that I/O is the
        # watch's own, not the slice's, so the audit sink ignores it.
        _tls.reporting = True
        try:
            self._dispatch_inner(*args, **kwargs)
        finally:
            _tls.reporting = False

    def _dispatch_inner(
        self,
        handle: Any,
        start_ns: int,
        end_ns: int,
        task: Any,
        io: list[IoEvent],
        samples: list,
        cpu_fraction: float | None,
        in_progress: bool,
        only: Consumer | None = None,
        window: tuple[int, bool, list | None] | None = None,
    ) -> None:
        consumers = [only] if only is not None else list(self.consumers)
        base: Block | None = None
        notified: Block | None = None
        callback = getattr(handle, "_callback", None)
        if task is None and callback is not None:
            task = task_of(callback)
        if task is None and samples:
            tasks = Counter(t for _, t in samples if t is not None)
            if tasks:
                task = tasks.most_common(1)[0][0]
        for c in consumers:
            lo = max(start_ns, c.enter_ns)
            dur = max(0, end_ns - lo)
            c_io = [e for e in io if e.time_ns >= c.enter_ns] if io else []
            slow = dur >= c.threshold_ns
            if not (slow or (c.strict and c_io)):
                continue
            if not c.samples(task if task is not None else callback):
                continue
            if base is None:
                base = self._build(
                    handle, task, start_ns, end_ns, io, samples, cpu_fraction, window
                )
                base.in_progress = in_progress
            block = _for_consumer(base, c, dur, lo, c_io, slow, handle)
            if not self.blocks_seen or notified is not base:
                # Metrics and tracing hear about each slice once, however many consumers.
                notified = base
                for hook in _block_listeners:
                    _safe(hook, block)
            self.blocks_seen += 1
            _safe(c.deliver, block)

    def _build(
        self, handle, task, start_ns, end_ns, io, samples, cpu_fraction, window=None
    ) -> Block:
        b = Block(
            duration=(end_ns - start_ns) / 1e9,
            threshold=0.0,
            start=time.time() - (time.monotonic_ns() - start_ns) / 1e9,
            kind="unknown",
            backend=self.backend.name,
            start_ns=start_ns,
            task=task,
        )
        if task is not None:
            b.task_name = task.get_name()
            b.coroutine = coroutine_name(task)
        elif handle is not None:
            b.callback = describe_callback(handle._callback, getattr(handle, "_args", None) or ())
        b.io_events = list(io)
        if samples:
            locs = Counter()
            last_for: dict = {}
            for sample, _ in samples:
                ft = blamed_frame(sample)
                locs[ft] += 1
                last_for[ft] = sample
            top, _ = locs.most_common(1)[0]
            b.samples = [(format_location(ft), n) for ft, n in locs.most_common()]
            b.sample_count = len(samples)
            b.stack = summaries(last_for[top])
            for fs in reversed(b.stack):
                if (fs.filename, fs.lineno, fs.name) == top:
                    b.line = fs
                    break
        elif io and io[0].where is not None:
            b.line = summaries([io[0].where])[0]
        if b.line is None and task is not None and not task.done():
            sp = suspension_point(task)
            if sp is not None:
                b.next_await = summaries([sp])[0]
        b.cpu_fraction = cpu_fraction
        ev, self._evidence = self._evidence, None
        if ev is None or ev.start_ns != start_ns:
            ev = causes.Evidence(start_ns, end_ns, self.thread_id)
        found, app_cpu = causes.breakdown(ev)
        app_ns = (end_ns - start_ns) - int(sum(c.seconds for c in found) * 1e9)
        app_frac, whole = None, cpu_fraction
        gc_ns = int(sum(c.seconds for c in found if c.cause == "gc") * 1e9)
        if app_cpu is not None and app_ns > 0:
            app_frac = min(1.0, app_cpu / app_ns)
            if gc_ns:
                whole = None  # mostly the collection's
                app_frac = app_kind.beside_gc(app_frac, app_ns, gc_ns)
        elif cpu_fraction is not None and any(c.cause == "gc" for c in found):
            # No baseline to take the collections' CPU out of (the watchdog read it late):
            # take them out of the sampler's share instead, or say nothing; the share over
            # the slice is mostly the collection's, and made an 80 ms sleep before it `cpu`.
            whole = None
            if window is not None:
                waits = sum(c.seconds for c in found if c.cause in ("starved", "throttled"))
                app_frac = app_kind.outside_gc(
                    cpu_fraction, window, start_ns, end_ns, self.thread_id, int(waits * 1e9)
                )
        kind = app_kind.kind(
            b,
            samples,
            self._unsampled(start_ns, end_ns, window),
            self.state.arm_ns,
            app_frac,
            whole,
        )
        for c in found:
            if c.cause == "gil":
                _holder_stack(c)
        if app_ns >= 50_000:  # 0.05 ms: below what the readings resolve
            where = (
                format_location((b.line.filename, b.line.lineno or 0, b.line.name))
                if b.line
                else None
            )
            found.append(
                causes.Cause(
                    kind,
                    app_ns / 1e9,
                    {"line": where, "cpu_fraction": app_frac},
                    application=True,
                )
            )
        found.sort(key=lambda c: -c.seconds)
        b.causes = found
        b.kind = found[0].cause if found else kind
        return b

    def _unsampled(self, start_ns: int, end_ns: int, window) -> int:
        """How long the watchdog, armed, could have sampled the slice and, if it found no
        sample, did not get the GIL: from its arming (``window[0]``, when it armed late)
        to the end, less the loop thread's collections (which hold the GIL; a watchdog held
        back past a sleep then waits through the collection, and takes no sample of a slice
        no single C call of the application's held)."""
        armed = start_ns + self.state.arm_ns
        if window is not None:
            armed = max(armed, window[0])
        if armed >= end_ns:
            return 0
        return end_ns - armed - causes.gc_in(self.thread_id, armed, end_ns)[0]


def _holder_stack(cause: causes.Cause) -> None:
    """Where the thread that held the GIL is now: just past the call that held it (it gave
    the GIL up at its first check after that call)."""
    import sys

    frame = sys._current_frames().get(cause.evidence.get("ident"))
    if frame is None:
        return
    frames = _frames_of(frame)
    if frames:
        cause.evidence["stack"] = [format_location(ft) for ft in frames]
        cause.evidence["at"] = format_location(blamed_frame(frames))


def _frames_of(frame: Any) -> list:
    out = []
    while frame is not None and len(out) < 64:
        out.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    out.reverse()
    return out


def _for_consumer(base: Block, c: Consumer, dur: int, lo: int, io, slow: bool, handle) -> Block:
    import dataclasses

    block = dataclasses.replace(
        base,
        duration=dur / 1e9,
        threshold=c.threshold,
        io_events=list(io) if not slow else base.io_events,
        strict=not slow,
        context=dict(base.context),
    )
    if base.duration > 0 and dur / 1e9 < base.duration:
        # Part of the slice ran before this consumer was attached: its share, pro rata.
        f = dur / 1e9 / base.duration
        block.causes = [dataclasses.replace(c, seconds=c.seconds * f) for c in base.causes]
    if c.context_providers:
        ctx = getattr(handle, "_context", None)
        for provider in c.context_providers:
            try:
                values = ctx.run(provider) if ctx is not None else provider()
                block.context.update(values or {})
            except Exception as exc:
                block.context[getattr(provider, "__name__", "provider")] = f"<error: {exc!r}>"
    return block


def _safe(fn: Callable[[Block], Any], block: Block) -> None:
    try:
        fn(block)
    except Exception:
        logger.exception("ringloop.watch: block callback %r failed", fn)


def _current_task(loop: Any) -> Any:
    import asyncio

    try:
        return asyncio.current_task(loop)
    except Exception:
        return None


# -- registry ------------------------------------------------------------------------------
_monitors: dict[Any, LoopMonitor] = {}
_thread_consumers: dict[int, list[Consumer]] = {}
_global_consumers: list[Consumer] = []
_block_listeners: list[Callable[[Block], Any]] = []  # metrics, OpenTelemetry
_retired: list = []  # states of detached monitors, folded into metrics on the next scrape
audit_source: audit.AuditSource = audit.PyAuditHookSource()


# Whether a loop is watched: the dict's own C method, not a Python function, because the
# audit hook asks it for every I/O event raised on a loop thread (a Python call there was
# ~5 % of what the watch added per `open` on stock asyncio, counted by callgrind).
_is_watched = _monitors.__contains__

_tls = threading.local()
_mono = time.monotonic_ns


def _audit_sink(loop: Any, event: str, args: tuple, frame) -> None:
    # Per audited event on a watched loop's thread (an `open` in every task of a batch):
    # the cheapest tests first, and no list made that is not needed.
    mon = _monitors.get(loop)
    if mon is None:
        return
    st = mon.state
    if st.start_ns == 0 or getattr(_tls, "reporting", False):
        return
    seq = st.seq
    if not st.strict:
        # Keep the raw event; classifying it (frame walk, repr) costs microseconds and most
        # slices are never reported. Strict mode must judge every slice, so it classifies now.
        if st.io_seq != seq:
            if st.io_events:
                st.io_events = []
            st.io_raw = [(event, args, frame, _mono())]
            st.io_seq = seq
        elif len(st.io_raw) < MAX_IO_EVENTS:
            st.io_raw.append((event, args, frame, _mono()))
        return
    record_io(st, event, args, frame, _mono(), seq)


def _materialize_io(st: Any, seq: int) -> None:
    """Classify the raw events of slice `seq` now that it is being reported."""
    raw = st.io_raw
    if not raw:
        return
    st.io_raw = []
    if st.io_seq != seq:
        return
    _tls.reporting = True  # classification may read files (linecache): not the slice's I/O
    try:
        for event, args, frame, t_ns in raw:
            record_io(st, event, args, frame, t_ns, seq, notify=False)
    finally:
        _tls.reporting = False


def monitor_for(loop: Any) -> LoopMonitor:
    mon = _monitors.get(loop)
    if mon is None:
        tid = getattr(loop, "_thread_id", None) or threading.get_ident()
        mon = _monitors[loop] = LoopMonitor(loop, tid)
    return mon


def attach(loop: Any, consumer: Consumer) -> None:
    monitor_for(loop).add(consumer)


def attach_thread(consumer: Consumer, thread_id: int | None) -> None:
    """Watch loops that start later: on this thread (a scope), or on any thread (None)."""
    if thread_id is None:
        _global_consumers.append(consumer)
    else:
        _thread_consumers.setdefault(thread_id, []).append(consumer)
    asyncio_handles.set_auto(_auto_attach)


def detach(consumer: Consumer) -> None:
    for mon in list(consumer.monitors):
        mon.remove(consumer)
    if consumer in _global_consumers:
        _global_consumers.remove(consumer)
    for tid, cs in list(_thread_consumers.items()):
        if consumer in cs:
            cs.remove(consumer)
        if not cs:
            del _thread_consumers[tid]
    if not _global_consumers and not _thread_consumers:
        asyncio_handles.set_auto(None)


def _auto_attach(loop: Any) -> Any:
    """Called by the asyncio dispatcher for a loop nobody watches yet."""
    if loop in _monitors or (loop is not None and loop.is_closed()):
        return None
    consumers = _global_consumers + _thread_consumers.get(threading.get_ident(), [])
    if not consumers:
        return None
    for old, mon in list(_monitors.items()):  # forget loops closed since
        if old.is_closed():
            for c in list(mon.consumers):
                mon.remove(c)
    mon = monitor_for(loop)
    for c in consumers:
        mon.add(c)
    return mon.state if isinstance(mon.backend, AsyncioBackend) else None
