"""Stock asyncio: time every slice by wrapping ``asyncio.events.Handle._run``.

Every callback a stock asyncio loop runs goes through ``Handle._run``: ``call_soon`` (and so
every step and wakeup of a C or Python Task), timers (``TimerHandle`` inherits ``_run``),
and the selector loop's reader/writer callbacks, which are Handles put on the ready queue by
``_process_events``; protocol callbacks (``data_received``...) run inside those. So one class
attribute covers all of them, for every loop in the process at once. The wrapper looks its
loop up in ``_states`` and calls straight through for loops nobody watches.

The patch is installed while at least one asyncio loop is watched (or while loops started
later should be watched: ``set_auto``) and the original is put back afterwards.

Cost per slice: one dict lookup, two ``monotonic_ns`` calls and a few attribute stores.
"""

from __future__ import annotations

import time
from asyncio import events
from typing import Any

from ..slices import SliceState
from ..stacks import add_boundary_code

_orig_run = events.Handle._run
_states: dict[Any, SliceState] = {}
_auto = None  # callable(loop) -> SliceState | None, for loops not seen yet
_mono = time.monotonic_ns


def _watched_run(self):
    st = _states.get(self._loop)
    if st is None:
        if _auto is None:
            return _orig_run(self)
        st = _auto(self._loop)
        if st is None:
            return _orig_run(self)
    st.seq += 1
    st.handle = self
    prev = st.start_ns
    start = st.start_ns = _mono()
    if prev:
        # The slice that was running when watching began (see AsyncioBackend.start) ended
        # just before this one: close it now that its end is known.
        _close_initial(st, prev, start)
    try:
        _orig_run(self)
    finally:
        end = _mono()
        st.start_ns = 0
        st.count += 1
        d = end - start
        st.total_ns += d
        if d >= st.slow_ns or (st.strict and st.io_events):
            st.on_slow(self, start, end)
        elif st.io_raw:
            st.io_raw = []  # a short slice's raw events (and the frames they hold) go now
        st.handle = None


add_boundary_code(_watched_run.__code__)


def _close_initial(st: SliceState, start: int, end: int) -> None:
    # The caller already advanced seq for its own slice: step back so the samples taken
    # during the initial slice are matched to it, then forward again.
    if end - start >= st.slow_ns or (st.strict and st.io_events):
        st.seq -= 1
        st.start_ns = 0
        st.on_slow(None, start, end)
        st.seq += 1
        st.start_ns = end


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
            end = _mono()
            st.start_ns = 0
            if end - start >= st.slow_ns or (st.strict and st.io_events):
                st.on_slow(None, start, end)
            elif st.io_raw:
                st.io_raw = []
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
        _states[self.loop] = self.state
        _sync_patch()
        if events._get_running_loop() is self.loop:
            # Watching starts inside a callback that the unwrapped Handle._run is running, so
            # no wrapper will see it end. Treat it as a slice starting now; the next wrapped
            # slice closes it. The no-op makes that next slice come right after this one
            # instead of after the loop's next (possibly long) wait for I/O.
            st = self.state
            st.seq += 1
            st.start_ns = _mono()
            _end_initial_at_select(self.loop, st)
            self.loop.call_soon(_noop)

    def stop(self) -> None:
        if _states.get(self.loop) is self.state:
            del _states[self.loop]
        _unwrap_select(self.loop)
        _sync_patch()

    def retune(self, threshold_ns: int) -> None:
        pass

    def io_noted(self) -> None:
        pass  # the wrapper checks state.io_events at the end of every slice
