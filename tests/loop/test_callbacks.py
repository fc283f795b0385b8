"""call_soon / call_later / call_at / call_soon_threadsafe: ordering, arguments, context,
handles, and the clock.

Ordering rules encoded here are asyncio's (BaseEventLoop._run_once):

* the ready queue is FIFO, whichever of call_soon / call_soon_threadsafe queued a callback;
* a callback queued *by* a callback runs in the next iteration, after everything already queued;
* at the start of an iteration, due timers are appended *behind* the callbacks already queued, in
  ``when`` order -- so ``call_later(0, b)`` runs after a ``call_soon(c)`` made later in the same
  iteration;
* a handle cancelled before it runs never runs, even if it was already moved to the ready queue.
"""

from __future__ import annotations

import contextvars
import math
import sys
import threading
import time

import pytest
from loop_helpers import PROMPT, run_forever_with_watchdog, start_thread, when_running

pytestmark = pytest.mark.timeout(30)

# asyncio treats timers due within the clock resolution as due (``end_time = time() +
# _clock_resolution``), so "never early" has a tolerance of exactly one clock tick.
CLOCK_RES = time.get_clock_info("monotonic").resolution

var = contextvars.ContextVar("var", default="unset")


def test_call_soon_fifo_and_args(loop):
    out = []
    for i in range(1000):
        loop.call_soon(out.append, i)
    loop.call_soon(lambda *a: out.append(a), 1, "two", None)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == [*range(1000), (1, "two", None)]


def test_call_soon_rejects_keyword_arguments(loop):
    with pytest.raises(TypeError):
        loop.call_soon(print, end="")


def test_callback_scheduled_by_callback_runs_after_queued_ones(loop):
    out = []

    def a():
        out.append("a")
        loop.call_soon(c)

    def c():
        out.append("c")
        loop.stop()

    # Stopped by the last callback itself: a timer for the stop could come due before "c" on
    # a loaded machine (asyncio moves due timers into the ready queue ahead of it).
    loop.call_soon(a)
    loop.call_soon(out.append, "b")
    assert not run_forever_with_watchdog(loop)
    assert out == ["a", "b", "c"]


def test_call_soon_threadsafe_same_thread_shares_fifo(loop):
    out = []
    loop.call_soon(out.append, 1)
    loop.call_soon_threadsafe(out.append, 2)
    loop.call_soon(out.append, 3)
    loop.call_soon_threadsafe(lambda *a: out.append(a), 4, 5)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == [1, 2, 3, (4, 5)]


def test_call_later_zero_runs_after_queued_call_soon(loop):
    # asyncio: A, C (ready queue) then B (timer moved to ready at the next iteration start).
    out = []
    loop.call_soon(out.append, "A")
    loop.call_later(0, out.append, "B")
    loop.call_soon(out.append, "C")
    loop.call_soon_threadsafe(out.append, "D")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == ["A", "C", "D", "B"]


def test_call_later_zero_made_first_still_runs_after_call_soon(loop):
    out = []
    loop.call_later(0, out.append, "timer")
    loop.call_soon(out.append, "soon")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == ["soon", "timer"]


def test_call_later_zero_from_callback_runs_after_callbacks_it_queued(loop):
    out = []

    def a():
        out.append("a")
        loop.call_later(0, out.append, "later0")
        loop.call_soon(out.append, "soon")

    loop.call_soon(a)
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == ["a", "soon", "later0"]


def test_timers_run_in_when_order_not_creation_order(loop):
    out = []
    now = loop.time()
    loop.call_at(now + 0.03, out.append, 3)
    loop.call_at(now + 0.01, out.append, 1)
    loop.call_later(0.02, out.append, 2)
    loop.call_at(now - 1, out.append, 0)  # already due
    loop.call_at(now + 0.1, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == [0, 1, 2, 3]


def test_call_later_and_call_at_pass_args(loop):
    got = []
    loop.call_later(0.001, lambda *a: got.append(("later", a)), 1, 2)
    loop.call_at(loop.time() + 0.002, lambda *a: got.append(("at", a)), "x")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert got == [("later", (1, 2)), ("at", ("x",))]


def test_timer_handle_when(loop):
    t0 = loop.time()
    h = loop.call_later(10, print)
    t1 = loop.time()
    assert t0 + 10 - 1e-6 <= h.when() <= t1 + 10 + 1e-6
    h.cancel()
    h2 = loop.call_at(12345.5, print)
    assert h2.when() == 12345.5
    h2.cancel()


def test_timers_never_fire_early(loop):
    records = []
    delays = [0.0, 0.001, 0.002, 0.005, 0.01, 0.013, 0.02, 0.031, 0.05]

    def fired(handle_box, mono_scheduled, delay):
        records.append((handle_box[0].when(), loop.time(), mono_scheduled, time.monotonic(), delay))

    for d in delays:
        box = []
        mono = time.monotonic()
        box.append(loop.call_later(d, fired, box, mono, d))
    loop.call_later(0.2, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert len(records) == len(delays)
    for when, fired_loop, mono_sched, fired_mono, d in records:
        assert fired_loop >= when - CLOCK_RES, (d, when, fired_loop)
        assert fired_mono >= mono_sched + d - CLOCK_RES - 1e-6, (d, mono_sched, fired_mono)


def test_loop_time_is_monotonic_and_comparable_with_time_monotonic(loop):
    prev = loop.time()
    for _ in range(10000):
        now = loop.time()
        assert now >= prev
        prev = now
    # Outside and inside a callback, loop.time() reads the same clock as time.monotonic():
    # asyncio's loop.time() *is* time.monotonic(), never a value cached per iteration.
    samples = []

    def sample():
        time.sleep(0.02)  # a cached per-iteration time would now lag by 20 ms
        samples.append((time.monotonic(), loop.time(), time.monotonic()))
        loop.stop()

    samples.append((time.monotonic(), loop.time(), time.monotonic()))
    loop.call_soon(sample)
    assert not run_forever_with_watchdog(loop)
    for before, lt, after in samples:
        assert before - 1e-6 <= lt <= after + 1e-6, (before, lt, after)


def test_handle_cancel_before_run(loop):
    out = []
    h = loop.call_soon(out.append, "never")
    assert not h.cancelled()
    h.cancel()
    assert h.cancelled()
    h.cancel()  # twice is fine
    assert h.cancelled()
    t = loop.call_later(0.001, out.append, "never-timer")
    t.cancel()
    t.cancel()
    assert t.cancelled()
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == []


def test_cancel_from_earlier_callback_in_same_iteration(loop):
    out = []
    handles = {}
    loop.call_soon(lambda: handles["h"].cancel())
    handles["h"] = loop.call_soon(out.append, "cancelled-while-ready")
    # Two timers both due now: the first cancels the second after both moved to ready.
    now = loop.time()
    loop.call_at(now - 2, lambda: handles["t"].cancel())
    handles["t"] = loop.call_at(now - 1, out.append, "timer-cancelled-while-ready")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == []
    assert handles["h"].cancelled() and handles["t"].cancelled()


def test_cancel_after_run_is_harmless(loop):
    out = []
    h = loop.call_soon(out.append, 1)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop)
    h.cancel()
    assert out == [1]


def test_handle_get_context(loop):
    ctx = contextvars.copy_context()
    h = loop.call_soon(print, context=ctx)
    if sys.version_info < (3, 12) and not hasattr(h, "get_context"):
        h.cancel()
        pytest.skip("Handle.get_context() is new in Python 3.12")
    assert h.get_context() is ctx
    t = loop.call_later(10, print, context=ctx)
    assert t.get_context() is ctx
    h.cancel()
    t.cancel()


def test_context_argument_is_used(loop):
    seen = []
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")

    def cb(tag):
        seen.append((tag, var.get()))

    loop.call_soon(cb, "soon", context=ctx)
    loop.call_later(0, cb, "later", context=ctx)
    loop.call_at(loop.time(), cb, "at", context=ctx)
    loop.call_soon_threadsafe(cb, "threadsafe", context=ctx)
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert sorted(seen) == sorted(
        [("soon", "in-ctx"), ("later", "in-ctx"), ("at", "in-ctx"), ("threadsafe", "in-ctx")]
    )
    assert var.get() == "unset"


def test_default_context_is_a_copy_taken_at_schedule_time(loop):
    seen = []

    def cb():
        seen.append(var.get())
        var.set("set-inside-callback")

    def main():
        token = var.set("outer")
        loop.call_soon(cb)
        loop.call_later(0, cb)
        var.set("changed-after-scheduling")
        loop.call_soon(cb)
        var.reset(token)

    ctx = contextvars.copy_context()
    ctx.run(main)
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert seen == ["outer", "changed-after-scheduling", "outer"]
    # The callback's own var.set() stayed in its copy.
    assert ctx.run(var.get) == "unset"
    assert var.get() == "unset"


def test_callback_runs_on_loop_thread_with_running_loop_set(loop):
    import asyncio

    seen = []

    def cb():
        seen.append((threading.get_ident(), asyncio.get_running_loop(), loop.is_running()))
        loop.stop()

    loop.call_soon_threadsafe(cb)
    assert not run_forever_with_watchdog(loop)
    assert seen == [(threading.get_ident(), loop, True)]
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_call_soon_threadsafe_many_threads(loop):
    n_threads, per_thread = 8, 1000
    total = n_threads * per_thread
    got: dict[int, list[int]] = {t: [] for t in range(n_threads)}
    count = [0]

    def record(tid, i):
        got[tid].append(i)
        count[0] += 1
        if count[0] == total:
            loop.stop()

    running = when_running(loop)
    go = threading.Barrier(n_threads)

    def producer(tid):
        running.wait(PROMPT)
        go.wait(PROMPT)
        for i in range(per_thread):
            loop.call_soon_threadsafe(record, tid, i)

    threads = [start_thread(producer, t) for t in range(n_threads)]
    assert not run_forever_with_watchdog(loop, 20), f"only {count[0]}/{total} arrived"
    for t in threads:
        t.join(PROMPT)
    # All arrived, each thread's calls in the order it made them.
    assert got == {t: list(range(per_thread)) for t in range(n_threads)}


def test_call_soon_threadsafe_wakes_blocked_loop_promptly(loop):
    # The loop has nothing to do until a far timer; a call_soon_threadsafe must wake it, so
    # its callback runs (and stops the loop) before that timer: the order of the two events
    # is the check, not the clock. The timer is the hang guard if the wake-up is lost.
    ran = []
    loop.call_later(60, lambda: (ran.append("the far timer"), loop.stop()))
    running = when_running(loop)

    def poke():
        running.wait(PROMPT)
        time.sleep(0.1)  # let the loop enter its blocking wait (the test holds either way)
        loop.call_soon_threadsafe(lambda: (ran.append("woken"), loop.stop()))

    t = start_thread(poke)
    loop.run_forever()
    t.join(PROMPT)
    assert ran == ["woken"], "the loop slept through call_soon_threadsafe"


def test_infinite_delay_never_fires(loop):
    out = []
    h = loop.call_later(math.inf, out.append, "inf")
    h2 = loop.call_at(math.inf, out.append, "at-inf")
    assert h.when() > loop.time() + 1e6
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert out == []
    h.cancel()
    h2.cancel()


def test_negative_delays_fire_promptly_in_when_order(loop):
    out = []
    loop.call_soon(out.append, "soon")
    loop.call_later(-1, out.append, "neg1")
    loop.call_later(0, out.append, "zero")
    loop.call_later(-5, out.append, "neg5")
    loop.call_at(loop.time() - 100, out.append, "at-past")
    loop.call_later(0.01, out.append, "pos")
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    # All ran before the stop at 0.05 s: a negative delay taken as a long one would be missing.
    assert out == ["soon", "at-past", "neg5", "neg1", "zero", "pos"]


def test_nan_delay_fires_promptly(loop):
    # asyncio accepts NaN: when() is NaN and, as "NaN >= end_time" is False, the timer is
    # treated as due -- it runs at the next iteration, after the already-queued callbacks.
    out = []
    loop.call_soon(out.append, "A")
    h = loop.call_later(math.nan, out.append, "nan")
    loop.call_soon(out.append, "C")
    assert math.isnan(h.when())
    loop.call_later(30, loop.stop)
    loop.call_soon(lambda: loop.call_soon(lambda: loop.call_soon(loop.stop)))
    assert not run_forever_with_watchdog(loop)
    assert out == ["A", "C", "nan"]


def test_call_at_nan_fires_and_loop_keeps_working(loop):
    out = []
    h = loop.call_at(math.nan, out.append, "nan")
    assert math.isnan(h.when())
    loop.call_soon(lambda: loop.call_soon(lambda: loop.call_soon(loop.stop)))
    assert not run_forever_with_watchdog(loop)
    assert out == ["nan"]
    # Ordinary timers still work (and never fire early) afterwards.
    rec = []
    box = [loop.call_later(0.01, lambda: rec.append(loop.time()))]
    loop.call_later(0.05, loop.stop)
    assert not run_forever_with_watchdog(loop)
    assert len(rec) == 1 and rec[0] >= box[0].when() - CLOCK_RES
