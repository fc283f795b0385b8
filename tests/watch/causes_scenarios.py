"""Scenarios that make each cause of a block happen for real, with their own measure of it.

Each scenario measures the time it spent on its cause by a means of its own (a gc callback of
its own, the loop thread's schedstat read around exactly the work, the cgroup's counters read
around exactly the work, the GIL holder's and the waiter's own clocks), so a test compares the
watch's breakdown against what happened, never against wall-clock constants: a loaded machine
changes both sides alike. Also run as a child process by the throttling test
(``python causes_scenarios.py throttle <loop> <cgroup dir>``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

GRAPH = 150_000  # pairs of objects in reference cycles: a collection of 50-500 ms
THRESHOLD = 0.01


class _Node:
    __slots__ = ("other", "__weakref__", "__dict__")


def cycles(n: int = GRAPH) -> list:
    out = []
    for _ in range(n):
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        out.append(a)
    return out


def schedstat() -> tuple[int, int]:
    """The calling thread's (ns on a CPU, ns waiting for one)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        cpu, delay = f.read().split()[:2]
    return int(cpu), int(delay)


class GcTimer:
    """The scenario's own measure of the collections run on this thread: from before the first
    gc callback of a collection to after the last. The callbacks (the watch's among them) are
    Python code, where the loop thread hands the GIL to a thread that asked for it (the
    watch's watchdog, which may then wait for a CPU while holding it): stamped between two
    callbacks, such a wait fell inside the watch's measure and outside this one (40-80 ms
    under two CPU hogs). A pending hand-over happens at the first callback's entry, before any
    stamp, at the start, and inside both measures at the stop."""

    def __init__(self) -> None:
        self.ns = 0
        self._t0 = 0
        self._me = threading.get_ident()

    def _first(self, phase: str, info: dict) -> None:
        t = time.monotonic_ns()
        if phase == "start" and threading.get_ident() == self._me:
            self._t0 = t

    def _last(self, phase: str, info: dict) -> None:
        t = time.monotonic_ns()
        if phase == "stop" and self._t0 and threading.get_ident() == self._me:
            self.ns += t - self._t0
            self._t0 = 0

    def __enter__(self) -> GcTimer:
        gc.callbacks.insert(0, self._first)
        gc.callbacks.append(self._last)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._first)
        gc.callbacks.remove(self._last)


@contextmanager
def gc_off():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def spin_cpu(cpu_s: float) -> None:
    """Run on the CPU until this thread has used `cpu_s` of CPU time (however long that takes
    on a shared or throttled CPU)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


# -- starvation: CPU hogs pinned to the loop thread's core ----------------------------------------

# A CPU hog pinned to CPU argv[1] that dies with the process that started it (argv[2]):
# PR_SET_PDEATHSIG, and a check for a parent gone before it was set. Without them a test run
# killed mid-test (a timeout, ^C twice) left its hogs burning the CPU for every run after it.
_HOG = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[2]): sys.exit(0)\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])}); print(1, flush=True)\n"
    "while True: pass"
)


def start_hog(cpu: int) -> subprocess.Popen:
    """A `_HOG` on `cpu`, burning once this returns."""
    p = subprocess.Popen(
        [sys.executable, "-c", _HOG, str(cpu), str(os.getpid())], stdout=subprocess.PIPE
    )
    assert p.stdout is not None and p.stdout.readline()  # pinned and running
    return p


@contextmanager
def hogs_on_my_cpu(n: int = 2):
    """Pin this thread to one CPU and start `n` processes burning that CPU."""
    old = os.sched_getaffinity(0)
    cpu = sorted(old)[-1]
    os.sched_setaffinity(0, {cpu})
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(start_hog(cpu))
        yield cpu
    finally:
        for p in procs:
            p.kill()
            p.wait()
        os.sched_setaffinity(0, old)


class FirstRun(threading.Thread):
    """A thread that reads, as its first act, how long it waited for a CPU before it ran."""

    def __init__(self) -> None:
        super().__init__(name="first-run", daemon=True)
        self.delay = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        self.delay = schedstat()[1] / 1e9
        self.done.wait()


def start_a_thread() -> tuple[float, float, FirstRun]:
    """Called on the loop thread inside a slice: start a thread (``Thread.start`` returns once
    it has run). Returns how long this thread was off its CPU in ``start`` (its wall time
    there less its CPU time), how long of that it slept (less its wait for a CPU too), by its
    own clocks, and the thread (alive until its ``done`` is set)."""
    t = FirstRun()
    # The new thread inherits this thread's policy: SCHED_IDLE makes it wait behind the hogs
    # for tens of ms, where a normal one may be let in after a slice or two (set back below;
    # needs root, as the test checks).
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    c0, d0 = schedstat()
    t0 = time.perf_counter()
    try:
        t.start()  # BLOCKS-thread-start
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    # Read after the policy is back: until then this thread is SCHED_IDLE too and may wait
    # behind the hogs again (once 640 ms of a 1.1 s slice), off its CPU in this slice all the
    # same; read before, that wait was missing from `off` and the watch's figure looked wrong.
    wall = time.perf_counter() - t0
    c1, d1 = schedstat()
    off = wall - (c1 - c0) / 1e9
    return off, off - (d1 - d0) / 1e9, t


# -- the GIL: a thread in a long C call that keeps it --------------------------------------------


def calibrate_sum(seconds: float) -> int:
    """How many integers `sum(range(n))` adds in about `seconds` (one C call, GIL held)."""
    n = 200_000
    t = time.perf_counter()
    sum(range(n))
    per = max(time.perf_counter() - t, 1e-6) / n
    return max(n, int(seconds / per))


class GilHolder(threading.Thread):
    """Holds the GIL in one C call (`sum(range(n))` never checks for a switch request) once
    `go` is set; records when that call ran."""

    def __init__(self, n: int) -> None:
        super().__init__(name="gil-holder", daemon=True)
        self.n = n
        self.entered = 0.0
        self.left = 0.0
        self.delay = 0.0
        self.cpu = 0.0
        self.inside = False
        self.done = threading.Event()  # the thread lives on, like an executor's worker

    def run(self) -> None:
        self.inside = True
        d0 = schedstat()[1]
        c0 = time.thread_time()
        self.entered = time.perf_counter()
        sum(range(self.n))  # HOLDS-the-GIL
        left = time.perf_counter()
        self.cpu = time.thread_time() - c0
        # Its own wait for a CPU while it held the GIL (on a busy machine): the watch books
        # that part of the loop thread's GIL wait as the machine's. Set before `left`, which
        # the loop thread waits for.
        self.delay = (schedstat()[1] - d0) / 1e9
        self.left = left
        self.done.wait()


def wait_for_gil_holder(n: int) -> tuple[float, GilHolder]:
    """Called on the loop thread inside a slice: start the holder and wait (in this slice)
    until its C call has taken the GIL and given it back. Returns the scenario's own measure
    of the time this thread waited for the GIL while the holder held it — the overlap of this
    thread's waits (starting the thread, short sleeps) with the holder's C call, by their own
    clocks — and the holder (alive until its ``done`` is set)."""
    holder = GilHolder(n)
    waits = []
    t = time.perf_counter()
    holder.start()  # returns once the new thread runs: the GIL wait may already be in here
    waits.append((t, time.perf_counter()))
    while not holder.left:
        t = time.perf_counter()
        time.sleep(0.0005)
        waits.append((t + 0.0005, time.perf_counter()))
    held = sum(max(0.0, min(b, holder.left) - max(a, holder.entered)) for a, b in waits)
    return held, holder


# -- throttling: the child process in a cgroup with a CPU quota --------------------------------------


def cgroup_throttled(cgdir: str) -> tuple[int, int]:
    with open(os.path.join(cgdir, "cpu.stat")) as f:
        fields = dict(line.split() for line in f if line.strip())
    return int(fields["nr_throttled"]), int(fields["throttled_time"])


def _loop_factory(name: str):
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name == "ringloop":
        import ringloop

        return ringloop.new_event_loop
    return asyncio.new_event_loop


def _throttle_child(loop_name: str, cgdir: str) -> None:
    """In the cgroup: a CPU hog (another process) pinned to one CPU uses up the quota, the loop
    thread pinned to the other needs only 5 ms of CPU in its slice — under the threshold — and
    is throttled with the whole group: a block of the quota's, not of the application's."""
    from ringloop.watch import no_blocking

    with open(os.path.join(cgdir, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[-1]})
    hog = start_hog(cpus[0])  # in the group (inherited), burning
    out: dict = {}

    async def main():
        async with no_blocking(THRESHOLD, action="log") as nb:
            # Readings outside the slice (before the sleep that ends before it, and in the
            # slice after it) and inside it: throttling comes in chunks of up to a period
            # (100 ms), and one may fall between the slice's edge and the inner readings, or
            # between the outer ones and the edge. The slice's throttled time lies between.
            _, d_before = schedstat()
            _, t_before = cgroup_throttled(cgdir)
            await asyncio.sleep(0.01)
            c0, d0 = schedstat()
            _, t0 = cgroup_throttled(cgdir)
            t_spin = time.time()
            spin_cpu(0.005)  # BLOCKS-throttled
            c1, d1 = schedstat()
            _, t1 = cgroup_throttled(cgdir)
            await asyncio.sleep(0)
            _, d_after = schedstat()
            _, t_after = cgroup_throttled(cgdir)
            out.update(cpu=(c1 - c0) / 1e9, delay=(d1 - d0) / 1e9, throttled=(t1 - t0) / 1e9)
            out.update(spin=t_spin)  # when the spin began (wall clock, as `Block.start`)
            out.update(delay_out=(d_after - d_before) / 1e9)
            out.update(throttled_out=(t_after - t_before) / 1e9)
        out["blocks"] = [b.to_dict() | {"report": str(b)} for b in nb.blocks]

    try:
        with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as r:
            r.run(main())
    finally:
        hog.kill()
        hog.wait()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "throttle":
        _throttle_child(sys.argv[2], sys.argv[3])
