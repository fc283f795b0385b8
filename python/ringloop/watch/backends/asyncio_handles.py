"""Stock asyncio: time every slice by wrapping ``asyncio.events.Handle._run``.

Every callback a stock asyncio loop runs goes through ``Handle._run``: ``call_soon`` (and so
every step and wakeup of a C or Python Task), timers (``TimerHandle`` inherits ``_run``),
and the selector loop's reader/writer callbacks, which are Handles put on the ready queue by
``_process_events``; protocol callbacks (``data_received``...) run inside those. So one class
attribute covers all of them, for every loop in the process at once. The wrapper looks its
loop up in ``_states`` and calls straight through for loops nobody watches.

The patch is installed while at least one asyncio loop is watched (or while loops started
later should be watched: ``set_auto``) and the original is put back afterwards.

Cost per slice: one dict lookup and one native call, ``run(handle)`` of the loop's
``_core.AsyncioSlices``, which keeps the slice state (``CoreSliceState`` shows it under
``SliceState``'s names), calls the original ``_run`` and says whether the slice must be
reported; the wrapper's Python only runs for those. The native call also tells ringloop's
C-level audit hook that a watched slice runs on this thread, so an audited ``open`` inside it
is buffered in C (as on a ringloop loop) instead of running a process-wide Python audit hook
(~10,000 instructions per event, counted by callgrind); a short slice's events are dropped at
its end, a slow one's handed over. Without the native module the wrapper does the same in
Python (``_watched_run_py``).
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
# loop -> (its AsyncioSlices' bound `run`, its CoreSliceState): what the native wrapper needs.
_runs: dict[Any, tuple[Any, Any]] = {}
_auto = None  # callable(loop) -> SliceState | None, for loops not seen yet
_mono = time.monotonic_ns

try:
    from ..._core import AsyncioSlices
    from ..._core import audit_slice_begin as _begin
    from ..._core import audit_slice_end as _end
    from ..._core import audit_slice_events as _events

    NATIVE = True
except ImportError:  # pragma: no cover - the watch without ringloop's native module
    NATIVE = False

    def _begin(eager: bool) -> int:
        return _mono()

    def _end(start_ns: int, slow_ns: int) -> int:
        return _mono()

    def _events() -> list:
        return []


def _native(name: str) -> Any:
    """A `SliceState` attribute kept by the loop's `AsyncioSlices` (``self.core``)."""
    return property(
        lambda self: getattr(self.core, name), lambda self, v: setattr(self.core, name, v)
    )


class CoreSliceState(SliceState):
    """A stock asyncio loop's `SliceState` whose per-slice fields live in `AsyncioSlices`.

    ``seq``, ``start_ns``, ``handle``, ``count``, ``total_ns`` (written by the native ``run``
    every slice; the watchdog reads the first three while the loop runs) and ``slow_ns``,
    ``strict`` (read by it) are the native object's. ``io_raw`` tells it when the Python audit
    sink keeps raw events for the running slice, which must then be looked at however short.
    """

    __slots__ = ("core", "_io_raw")

    def __init__(self, monitor: Any, thread_id: int) -> None:
        self.core = AsyncioSlices(_orig_run)
        super().__init__(monitor, thread_id)

    seq = _native("seq")
    start_ns = _native("start_ns")
    handle = _native("handle")
    count = _native("count")
    total_ns = _native("total_ns")
    slow_ns = _native("slow_ns")
    strict = _native("strict")

    @property  # type: ignore[override]
    def io_raw(self) -> list:
        return self._io_raw

    @io_raw.setter
    def io_raw(self, value: list) -> None:
        self._io_raw = value
        if value:
            self.core.io = True


def _watched_run(self):
    w = _runs.get(self._loop)
    if w is None:
        if _auto is None or _auto(self._loop) is None:
            return _orig_run(self)
        w = _runs.get(self._loop)
        if w is None:
            return _orig_run(self)
    run = w[0]
    try:
        r = run(self)
        if r is False:
            # The slice that was running when watching began (see AsyncioBackend.start) ended
            # just before this one: close it now that its end is known, and before this one's
            # start drops what the C hook buffered during it.
            st = w[1]
            _close_initial(st, st.start_ns)
            r = run(self)
    except BaseException:
        if w[1].handle is self:  # the slice raised (SystemExit...) and must be reported
            _report(self, w[1])
        raise
    if r:
        _report(self, w[1])


def _report(handle: Any, st: CoreSliceState) -> None:
    """The slice of `handle` was slow or did I/O the Python sink noted: report it or drop it."""
    start, end = st.core.last
    try:
        _ended(st, handle, start, end)
    finally:
        st.core.handle = None


def _ended(st: SliceState, handle: Any, start: int, end: int) -> None:
    """A slice ended: report it if slow (or, in strict mode, with I/O), else drop its raw
    events (and the frames they hold)."""
    slow = end - start >= st.slow_ns
    if slow or (st.strict and st.io_events):
        if slow:
            record_buffered(st, _events())
        st.on_slow(handle, start, end)
    elif st.io_raw:
        st.io_raw = []


def _watched_run_py(self):
    """The wrapper without ringloop's native module (or before it had `AsyncioSlices`)."""
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
        st.total_ns += end - start
        _ended(st, self, start, end)
        st.handle = None


add_boundary_code(_watched_run.__code__)
add_boundary_code(_watched_run_py.__code__)
_wrapper = _watched_run if NATIVE else _watched_run_py


def _close_initial(st: SliceState, start: int) -> None:
    """End the slice that was running when watching began (it ran unwrapped)."""
    end = _end(start, st.slow_ns)
    st.start_ns = 0
    _ended(st, None, start, end)


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
    if want and events.Handle._run is not _wrapper:
        events.Handle._run = _wrapper
    elif not want and events.Handle._run is _wrapper:
        events.Handle._run = _orig_run


def set_auto(fn) -> None:
    global _auto
    _auto = fn
    _sync_patch()


def is_patched() -> bool:
    return events.Handle._run is _wrapper


class AsyncioBackend:
    name = "asyncio"

    def __init__(self, loop: Any, monitor: Any) -> None:
        self.loop = loop
        state_type = CoreSliceState if NATIVE else SliceState
        self.state = state_type(monitor, monitor.thread_id)

    def start(self) -> None:
        if NATIVE and audit.install_native_hook():
            # The C hook reports this loop's I/O; the Python one (there for uvloop, or a
            # source set with `set_audit_source`) must not report it twice.
            audit.native_loops.add(self.loop)
        _states[self.loop] = self.state
        if NATIVE:
            _runs[self.loop] = (self.state.core.runner(), self.state)
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
        w = _runs.get(self.loop)
        if w is not None and w[1] is self.state:
            del _runs[self.loop]
        _unwrap_select(self.loop)
        _sync_patch()

    def retune(self, threshold_ns: int) -> None:
        pass

    def io_noted(self) -> None:
        # Strict mode: the slice has I/O and must be looked at when it ends, however short.
        if NATIVE:
            self.state.core.io = True

    def take_buffered_io(self) -> None:
        """Record what the C hook buffered in the running slice so far (a scope ends in it)."""
        record_buffered(self.state, _events())
