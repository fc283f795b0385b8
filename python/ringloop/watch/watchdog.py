"""The watchdog thread: samples a loop thread's Python stack *while* a slice is blocking it.

One daemon thread serves every watched loop in the process. It polls each loop's `SliceState`:
once a slice is older than ``arm_ns`` (a fraction of the threshold) it records the loop
thread's CPU clock and takes a stack sample every ``sample_interval_ns`` until the slice ends.
Several samples show where the time went; samples are kept only when the slice they were
taken in is provably still the same one afterwards (see slices.py).

Sampling needs the GIL. A loop thread sleeping, waiting on a lock, a socket, a pipe or sqlite
has released it, so samples arrive on time. A pure-Python CPU loop gives the GIL up every
``sys.getswitchinterval()`` (5 ms), so samples arrive at most that often. A single C call that
holds the GIL (``sum(range(10**8))``) cannot be sampled at all from Python; the report then
falls back to where the task suspended next, and ringloop's native watchdog can do better.

The sampler is a `StackSampler`, so the native side can replace how stacks are taken.
"""

from __future__ import annotations

import _thread
import asyncio
import os
import threading
import time
from typing import Any

from .causes import _MIN_GIL_NS as _LATE_NS
from .causes import (
    Clocks,
    GilWindow,
    Snapshot,
    armed,
    schedstat,
    under_quota,
    watch_stalls,
    watch_wake,
)
from .os_readings import WATCH_THREADS, blocked_elsewhere
from .slices import SliceState
from .stacks import PythonStackSampler, StackSampler

try:  # read natively: an open() on the loop thread would be an audit event (see read_busy_ns)
    from .._core import thread_busy_ns as _busy_ns
except ImportError:  # pragma: no cover - the watch without ringloop's native module
    _busy_ns = None

_MAX_SAMPLES_BEFORE_BACKOFF = 64
_STALL_NS = 1_000_000  # a wake's wait for a CPU that long is recorded (causes.watch_stalls)
_IDLE_POLL_NS = 50_000_000  # when nothing is armed, never sleep longer than this
_BUSY_HOLD_NS = 1_000_000_000  # after a late wake, read the counters at each wake this long


def _cpu_clock(thread_id: int) -> int | tuple[str, int] | None:
    """What tells how busy thread `thread_id` was: its `schedstat` (time on a CPU plus time
    waiting for one, so a thread that spins on an overloaded machine still counts as busy,
    where its CPU clock alone would make it look like it waited), else its CPU clock."""
    thread = threading._active.get(thread_id)  # noqa: SLF001 - ident -> native id
    native = getattr(thread, "native_id", None)
    if native is not None and _busy_ns is not None and _busy_ns(native) is not None:
        return ("schedstat", native)
    try:
        return time.pthread_getcpuclockid(thread_id)
    except (AttributeError, OSError):
        return None


def _elsewhere(states: list[SliceState], since_ns: int) -> frozenset[int]:
    """The loop threads (idents) blocked now in a wait that is not for the GIL, or woken
    since ``since_ns`` by the sampler's signal from one (see `causes.watch_stalls`); read
    only after a stall, with the GIL held."""
    return frozenset(st.thread_id for st in states if blocked_elsewhere(st.native_id, since_ns))


def read_busy_ns(clock: int | tuple[str, int] | None) -> int | None:
    """The thread's busy time so far (see `_cpu_clock`), in ns; None if unknown. Raises no
    audit event (it runs on the loop thread, inside the watch's accounting)."""
    if clock is None:
        return None
    if isinstance(clock, tuple):
        return _busy_ns(clock[1])
    try:
        return time.clock_gettime_ns(clock)
    except OSError:  # the thread exited
        return None


_read_cpu = read_busy_ns


class _Wake:
    """An event the watchdog sleeps on, with no Python code around the C call that gives the
    GIL up (``threading.Event.wait`` runs a dozen lines of Python after its lock returns):
    the watchdog's time holding the GIL is measured up to that call (see `watch_stalls`)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:  # set already: one wake is enough
            pass

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; True if woken by `set` (which this clears)."""
        return self._lock.acquire(timeout=max(0.0, timeout))


class Watchdog:
    def __init__(self, sampler: StackSampler | None = None) -> None:
        self.sampler: StackSampler = sampler or PythonStackSampler()
        self._states: list[SliceState] = []
        self._wake = _Wake()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        # When the watchdog meant to wake, and when it last did: a wake much later than
        # planned means the GIL was held (see causes.py).
        self.due_ns = 0
        self.woke_ns = 0
        self.busy_until = 0  # monotonic ns: take `pre` readings at each wake until then
        self.set_ns = 0
        self.in_wake = False  # between `woke_ns` and the wait for the next wake
        self.wake_due = 0  # when the wake under way was due
        self.ident = 0
        self.native_id = 0

    def add(self, state: SliceState) -> None:
        with self._lock:
            state.cpu_clock = _cpu_clock(state.thread_id)
            thread = threading._active.get(state.thread_id)  # noqa: SLF001
            state.native_id = getattr(thread, "native_id", None)
            # The GIL analysis' baseline, now: a slice that starts a GIL holder right away
            # keeps the watchdog from taking one before its wait (causes._gil needs it). Taken
            # before the state is published: its /proc read gives the GIL up, and a wake that
            # began then saw a state without a baseline and could frame none of its waits.
            state.clocks = Clocks.take(state.native_id, self.native_id, True)
            if under_quota():
                # The first frame for the first slices (`Evidence.pre`): under a quota the
                # watchdog may be throttled with the group until well into the first slice
                # of a scope just opened (a pytest test's), with nothing read before it.
                state.pre = [Snapshot.take(state.native_id)]
            self._states = [*self._states, state]
            self._ensure_thread()
        self.set_ns = time.monotonic_ns()
        self._wake.set()  # re-plan the sleep with the new state's arming time

    def remove(self, state: SliceState) -> None:
        with self._lock:
            self._states = [s for s in self._states if s is not state]

    def _ensure_thread(self) -> None:
        # A forked child inherits no threads: start a fresh watchdog there.
        if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
            if self._pid != os.getpid():
                self._wake = _Wake()  # the parent's may have been mid-wait
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="ringloop-watchdog", daemon=True)
            self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _run(self) -> None:
        mono = time.monotonic_ns
        self.ident = threading.get_ident()
        self.native_id = threading.get_native_id()
        WATCH_THREADS.add(self.native_id)
        last: tuple[int, int] | None = None  # (time, own run delay) at the last wake's end
        while True:
            states = self._states
            self.wake_due = self.due_ns
            now = self.woke_ns = mono()
            self.in_wake = True
            for st in states:
                st.wake_clocks = st.clocks
            # Where the watchdog reads at each wake (below), its own run delay too (see
            # watch_stalls); not on an idle machine's wakes.
            pre = under_quota() or now < self.busy_until
            own0 = schedstat(self.native_id) if pre else None
            if own0 is not None:
                watch_wake[0] = (now, own0[1], self.native_id)
                # Its way in counts too: due (or woken), it waited for a CPU before this line,
                # and a loop thread that had handed it the GIL waited as long.
                if last is not None and own0[1] - last[1] >= _STALL_NS:
                    stall = (max(last[0], self.due_ns), now, own0[1] - last[1])
                    watch_stalls.append((*stall, _elsewhere(states, stall[0])))
            if self.due_ns and now - self.due_ns >= _LATE_NS:
                self.busy_until = now + _BUSY_HOLD_NS
                for st in states:
                    self._late(st)
            wake_at = now + _IDLE_POLL_NS
            for st in states:
                wake_at = min(wake_at, self._visit(st, now))
            wake_at = max(wake_at, mono() + 200_000)
            self.due_ns = wake_at  # before the clocks: a window never starts before its baseline
            # Readings at every wake (see causes.Evidence.pre) under a CPU quota, and for a
            # while after this thread woke late: on a busy machine it may not get a CPU to arm
            # the next slice in time, and then only a reading from before frames the slice.
            # Not on an idle machine's wakes: those read no /proc.
            pre = pre or now < self.busy_until
            for st in states:
                # The baseline of a GIL wait that may begin before the next wake (cheap:
                # thread CPU clocks, no /proc).
                # With the loop thread's run delay inside a suspicious slice (the watchdog reads
                # /proc there anyway: `_arm`): a GIL window that opens here can tell its sleep
                # from its waits for a CPU (`causes._loop_was_busy`).
                start = st.start_ns
                armed_now = start != 0 and now - start >= st.arm_ns
                clocks = Clocks.take(st.native_id, self.native_id, armed_now and not pre)
                if pre:
                    snap = Snapshot.take(st.native_id)
                    st.pre = [*st.pre[-3:], snap]
                    # The loop thread's run delay at the window's edge (`causes._loop_was_busy`).
                    clocks.delay = snap.sched[1] if snap.sched is not None else None
                st.clocks_before, st.clocks = st.clocks, clocks
            # This thread runs its Python holding the GIL: waiting for a CPU meanwhile
            # (throttled with the group, or behind other processes), it kept a loop thread
            # that wanted the GIL from running, a whole CFS period at a time. Its run delay
            # counts only that: a wait for the GIL itself is a sleep (causes.watch_stalls).
            end = mono()
            own1 = schedstat(self.native_id) if own0 is not None else None
            if own0 is not None and own1 is not None and own1[1] - own0[1] >= _STALL_NS:
                watch_stalls.append((now, end, own1[1] - own0[1], _elsewhere(states, now)))
            watch_wake[0] = None
            if end - now >= _LATE_NS:
                # This wake itself took long: it gave the GIL up on the way (a /proc read, the
                # sampler) to a thread that then kept it. The window of that wait, as `_late`'s.
                # A state added during the wake too (its baseline is the one `add` took).
                for st in self._states:
                    self._window(st, st.wake_clocks if st in states else st.clocks, now)
            self.in_wake = False
            last = (end, own1[1]) if own1 is not None else None
            if self._wake.wait((wake_at - end) / 1e9):
                self.due_ns = min(self.set_ns, self.due_ns)  # woken on purpose: due then

    def _late(self, st: SliceState) -> None:
        """This wake came late: record the window for the GIL analysis of the slice. Between
        slices too: a wake that came just after a slice ended (the loop thread took the GIL
        first when the holder let go, ended the slice and reported) still frames that slice's
        wait, and `Monitor._gather` keeps only the windows that end after a slice began."""
        w = self._window(st, st.clocks, self.due_ns)
        if w is not None:
            st.wake_clocks = w.after  # a wait later in this wake begins here (`_run`)

    def _window(self, st: SliceState, before: Clocks | None, due: int) -> GilWindow | None:
        """Record the window from ``due`` (or the baseline ``before``, if it came later: a
        state added since) to now for the GIL analysis of the slice."""
        if before is None:
            return None
        w = GilWindow(
            before, Clocks.take(st.native_id, self.native_id, True), max(due, before.t_ns)
        )
        st.gil_windows = [*st.gil_windows[-7:], w]
        return w

    def _visit(self, st: SliceState, now: int) -> int:
        """Look at one loop; sample it if armed. Returns when it wants to be visited again."""
        start = st.start_ns
        if start == 0:
            armed.pop(st.thread_id, None)
            # Between slices: a slice starting now needs arm_ns to become interesting.
            return now + st.arm_ns
        seq = st.seq
        if st.sample_seq != seq:
            armed.pop(st.thread_id, None)  # the armed slice has ended
        age = now - start
        if age < st.arm_ns:
            return start + st.arm_ns
        if st.sample_seq != seq:
            self._arm(st, seq, now)
        if now >= st.next_sample_ns:
            self._sample(st, seq)
            n = len(st.samples)
            interval = st.sample_interval_ns
            if n > _MAX_SAMPLES_BEFORE_BACKOFF:  # long blocks: bounded memory, fewer samples
                interval *= 1 << min(8, n // _MAX_SAMPLES_BEFORE_BACKOFF)
            st.next_sample_ns = now + interval
        return st.next_sample_ns

    def _arm(self, st: SliceState, seq: int, now: int) -> None:
        with st.lock:
            st.sample_seq = seq
            st.samples = []
            st.arm_wall_ns = now
            st.cpu_at_arm_ns = _read_cpu(st.cpu_clock)
            st.next_sample_ns = now
        # The slice is suspicious now: the OS counters' baseline (see causes.py).
        snap = Snapshot.take(st.native_id)
        # The Python threads that had run before the slice began, from the last wake before
        # it: one the slice started (and that ran before this arm) is then still new. A
        # watchdog waiting for a CPU itself may have woken once more, late, inside the slice
        # before arming: the wake before that one frames it then.
        framing = [
            c for c in (st.clocks, st.clocks_before) if c is not None and c.t_ns <= st.start_ns
        ]
        if framing:
            before = max(framing, key=lambda c: c.t_ns)
            snap.threads = frozenset(before.others) | {st.native_id, self.native_id}
            snap.threads_t_ns = before.t_ns
        st.base = (seq, snap)
        armed[st.thread_id] = st.native_id

    def _sample(self, st: SliceState, seq: int) -> None:
        try:
            sample = self.sampler.sample(st.thread_id)
        except Exception:  # a sampler must never kill the watchdog
            return
        if not sample:
            return  # loop thread is outside Python code (e.g. uvloop polling): nothing to blame
        task = None
        loop = st.monitor.loop if st.monitor is not None else None
        if st.handle is None and loop is not None:
            # No handle known (heartbeat, native, or the slice running when watching began):
            # remember which task was running.
            task = _current_task(loop)
        with st.lock:
            # Valid only if the slice we armed for is still the one running after the capture.
            if st.seq == seq and st.start_ns != 0 and st.sample_seq == seq:
                st.samples.append((sample, task))


def _current_task(loop: Any) -> Any:
    try:
        return asyncio.current_task(loop)
    except Exception:
        return None


_watchdog: Watchdog | None = None


def get_watchdog() -> Watchdog:
    global _watchdog
    if _watchdog is None:
        _watchdog = Watchdog()
    return _watchdog


def set_sampler(sampler: StackSampler) -> None:
    """Replace how the watchdog captures stacks (the native loop's seam)."""
    get_watchdog().sampler = sampler
