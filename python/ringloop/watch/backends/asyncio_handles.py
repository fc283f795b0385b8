"""Stock asyncio: time every slice by wrapping ``asyncio.events.Handle._run``.

Every callback a stock asyncio loop runs goes through ``Handle._run``: ``call_soon`` (and so
every step and wakeup of a C or Python Task), timers (``TimerHandle`` inherits ``_run``),
and the selector loop's reader/writer callbacks, which are Handles put on the ready queue by
``_process_events``; protocol callbacks (``data_received``...) run inside those. So one class
attribute covers all of them, for every loop in the process at once. The wrapper looks its
loop up in ``_states`` and calls straight through for loops nobody watches.

The patch is installed while at least one asyncio loop is watched (or while loops started
later should be watched: ``set_auto``) and the original is put back afterwards.

Cost per slice: one dict lookup, two clock readings and a few attribute stores. The two
readings are ringloop's ``audit_slice_begin``/``audit_slice_end`` where its native module is
there: they also tell its C-level audit hook that a watched slice runs on this thread, so an
audited ``open`` inside it is buffered in C (as on a ringloop loop) instead of running a
process-wide Python audit hook (~10,000 instructions per event, counted by callgrind); a
short slice's events are dropped in ``audit_slice_end``, a slow one's handed over.
"""

from __future__ import annotations

import time
from asyncio import events
from typing import Any

from .. import audit
from ..slice_io import record_buffered
from ..slices import SliceState
from ..stacks import add_boundary_code

_orig_run = events.Handle._run
_states: dict[Any, SliceState] = {}
_auto = None  # callable(loop) -> SliceState | None, for loops not seen yet
_mono = time.monotonic_ns

try:
    from ..._core import audit_slice_begin as _begin
    from ..._core import audit_slice_end as _end
    from ..._core import audit_slice_events as _events

    NATIVE_AUDIT = True
except ImportError:  # pragma: no cover - the watch without ringloop's native module
    NATIVE_AUDIT = False

    def _begin(eager: bool) -> int:
        return _mono()

    def _end(start_ns: int, slow_ns: int) -> int:
        return _mono()

    def _events() -> list:
        return []


def _watched_run(self):
    st = _states.get(self._loop)
    if st is None:
        if _auto is None:
            return _orig_run(self)
        st = _auto(self._loop)
        if st is None:
            return _orig_run(self)
    prev = st.start_ns
    if prev:
        # The slice that was running when watching began (see AsyncioBackend.start) ended
        # just before this one: close it now that its end is known, and before this one's
        # start drops what the C hook buffered during it.
        _close_initial(st, prev)
    st.seq += 1
    st.handle = self
    start = st.start_ns = _begin(st.strict)
    try:
        _orig_run(self)
    finally:
        end = _end(start, st.slow_ns)
        st.start_ns = 0
        st.count += 1
        d = end - start
        st.total_ns += d
        if d >= st.slow_ns or (st.strict and st.io_events):
            if d >= st.slow_ns:
                record_buffered(st, _events())
            st.on_slow(self, start, end)
        elif st.io_raw:
            st.io_raw = []  # a short slice's raw events (and the frames they hold) go now
        st.handle = None


add_boundary_code(_watched_run.__code__)


def _close_initial(st: SliceState, start: int) -> None:
    """End the slice that was running when watching began (it ran unwrapped)."""
    end = _end(start, st.slow_ns)
    st.start_ns = 0
    slow = end - start >= st.slow_ns
    if slow or (st.strict and st.io_events):
        if slow:
            record_buffered(st, _events())
        st.on_slow(None, start, end)
    elif st.io_raw:
        st.io_raw = []


def _noop() -> None:
    pass


def _end_initial_at_select(loop: Any, st: SliceState) -> None:
    """End the initial slice when the loop next calls its selector, if no wrapped slice
    has ended it before.

    When the callback that began watching was the last one of its loop iteration, the next
    wrapped slice (the no-op) only starts after the loop's next ``select()``. Counting up to
    there would charge the initial slice with that wait, and with the wait for the GIL when
    the select returns (long while a worker thread runs C code that holds the GIL, like
    PyMuPDF in ``asyncio.to_thread``): time in which no callback ran. The selector is wrapped
    on this loop only, for one call.
    """
    selector = getattr(loop, "_selector", None)
    if selector is None or "select" in vars(selector):
        return
    select = selector.select

    def first_select(timeout=None):
        del selector.select
        start = st.start_ns
        if start and st.handle is None and _states.get(loop) is st:
            _close_initial(st, start)
        return select(timeout)

    selector.select = first_select


def _unwrap_select(loop: Any) -> None:
    selector = getattr(loop, "_selector", None)
    if selector is not None and "select" in vars(selector):
        del selector.select


def _sync_patch() -> None:
    want = bool(_states) or _auto is not None
    if want and events.Handle._run is not _watched_run:
        events.Handle._run = _watched_run
    elif not want and events.Handle._run is _watched_run:
        events.Handle._run = _orig_run


def set_auto(fn) -> None:
    global _auto
    _auto = fn
    _sync_patch()


def is_patched() -> bool:
    return events.Handle._run is _watched_run


class AsyncioBackend:
    name = "asyncio"

    def __init__(self, loop: Any, monitor: Any) -> None:
        self.loop = loop
        self.state = SliceState(monitor, monitor.thread_id)

    def start(self) -> None:
        if NATIVE_AUDIT and audit.install_native_hook():
            # The C hook reports this loop's I/O; the Python one (there for uvloop, or a
            # source set with `set_audit_source`) must not report it twice.
            audit.native_loops.add(self.loop)
        _states[self.loop] = self.state
        _sync_patch()
        if events._get_running_loop() is self.loop:
            # Watching starts inside a callback that the unwrapped Handle._run is running, so
            # no wrapper will see it end. Treat it as a slice starting now; the next wrapped
            # slice closes it. The no-op makes that next slice come right after this one
            # instead of after the loop's next (possibly long) wait for I/O.
            st = self.state
            st.seq += 1
            st.start_ns = _begin(st.strict)
            _end_initial_at_select(self.loop, st)
            self.loop.call_soon(_noop)

    def stop(self) -> None:
        audit.native_loops.discard(self.loop)
        st = self.state
        if st.start_ns and st.handle is None and events._get_running_loop() is self.loop:
            # Watching ends inside the slice it began in, which no wrapper will end: the C
            # hook must stop buffering this thread's I/O now.
            _end(st.start_ns, 1 << 62)  # and drop what it buffered
            st.start_ns = 0
        if _states.get(self.loop) is self.state:
            del _states[self.loop]
        _unwrap_select(self.loop)
        _sync_patch()

    def retune(self, threshold_ns: int) -> None:
        pass

    def io_noted(self) -> None:
        pass  # the wrapper checks state.io_events at the end of every slice

    def take_buffered_io(self) -> None:
        """Record what the C hook buffered in the running slice so far (a scope ends in it)."""
        record_buffered(self.state, _events())
