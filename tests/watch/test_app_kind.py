"""`app_kind.outside_gc` on readings made up to the nanosecond: the application's CPU share
in a slice that also held a collection, and `None` wherever the readings cannot say on which
side of the cpu/wait cut it falls.

The live scenarios (test_causes.py) cannot pin these edges: which side of the error a
loaded machine lands on is luck there, and a test must not be."""

from __future__ import annotations

import pytest
from ringloop.watch import app_kind, causes

MS = 1_000_000
IDENT = -424242  # no real thread: its collections are only the ones made up here


@pytest.fixture
def collection():
    """Book a collection of thread IDENT over [start, end] (ns); taken out afterwards."""
    added = []

    def add(start: int, end: int) -> None:
        ev = (IDENT, start, end, 2, 300_000, -1, -1, -1, -1)
        causes._gc_events.append(ev)
        added.append(ev)

    yield add
    for ev in added:
        causes._gc_events.remove(ev)


def samples(lo: int, hi: int, every: int, running) -> list[tuple[int, bool]]:
    return [(t, running(t)) for t in range(lo, hi, every)]


def test_a_sleep_before_a_collection_counted_outside_it_is_a_wait(collection):
    # 80 ms asleep, then 420 ms collecting; a sample every 2 ms from the slice's start.
    collection(80 * MS, 500 * MS)
    states = samples(0, 500 * MS, 2 * MS, lambda t: t >= 80 * MS)
    share = sum(r for _, r in states) / len(states)
    frac = app_kind.outside_gc(share, (0, True, states), 0, 500 * MS, IDENT)
    assert frac == 0.0


def test_a_spin_before_a_collection_is_cpu(collection):
    collection(80 * MS, 500 * MS)
    states = samples(0, 500 * MS, 2 * MS, lambda t: True)
    frac = app_kind.outside_gc(1.0, (0, True, states), 0, 500 * MS, IDENT)
    assert frac == 1.0


def test_too_few_runnable_samples_to_tell_say_nothing(collection):
    # Stop 29's CI: 11 of the 39 samples before the collection found the thread runnable.
    collection(80 * MS, 500 * MS)
    states = samples(2 * MS, 80 * MS, 2 * MS, lambda t: t % (7 * MS) < 2 * MS)
    states += samples(80 * MS, 500 * MS, 2 * MS, lambda t: True)
    outside = [r for t, r in states if t < 80 * MS]
    assert 0.25 < sum(outside) / len(outside) < 0.35
    share = sum(r for _, r in states) / len(states)
    assert app_kind.outside_gc(share, (0, True, states), 0, 500 * MS, IDENT) is None


def test_waits_for_a_cpu_booked_elsewhere_are_not_the_applications(collection):
    # Before the collection: 60 ms asleep, then 30 ms runnable but waiting for a CPU (the
    # slice's `starved` share). What is left is a sleep.
    collection(90 * MS, 500 * MS)
    states = samples(0, 500 * MS, 1 * MS, lambda t: t >= 60 * MS)
    share = sum(r for _, r in states) / len(states)
    window = (0, True, states)
    assert app_kind.outside_gc(share, window, 0, 500 * MS, IDENT, waits_ns=30 * MS) == 0.0
    # Without the starved share the same samples do not read as a wait.
    got = app_kind.outside_gc(share, window, 0, 500 * MS, IDENT)
    assert got is None or got >= app_kind.CPU_CUT


def test_a_clocks_share_whose_error_covers_the_cut_says_nothing(collection):
    # A busy clock over the whole slice: the collection's 420 ms of it and 21 ms more, so
    # the 80 ms left read at 0.26, within the readings' error of the cut.
    collection(80 * MS, 500 * MS)
    share = (420 + 21) / 500
    assert app_kind.outside_gc(share, (0, True, None), 0, 500 * MS, IDENT) is None
    # 60 ms more is well over it.
    share = (420 + 60) / 500
    assert app_kind.outside_gc(share, (0, True, None), 0, 500 * MS, IDENT) == pytest.approx(0.75)


def test_a_window_that_missed_most_of_the_applications_time_says_nothing(collection):
    # The Python watchdog armed at 90 ms, after the sleep, inside the collection.
    collection(80 * MS, 500 * MS)
    assert app_kind.outside_gc(0.99, (90 * MS, True, None), 0, 500 * MS, IDENT) is None
