"""The OS readings the cause breakdown (causes.py) is made of: a thread's schedstat (CPU time
and run delay), the cgroup's CPU throttling at every level, the CPU clocks of the process's
Python threads, and a `Snapshot` of them at one moment. What each file says and why it is
read where it is: causes.py's module docs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

# -- readings --------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    # os.open, not open(): no buffered file object, and the watch's own reads must stay cheap.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


try:  # read natively with the GIL held (see `schedstat`)
    from .._core import thread_asleep_elsewhere as _native_asleep
    from .._core import thread_schedstat as _native_schedstat
    from .._core import woken_asleep_since as _woken_asleep_since
except ImportError:  # pragma: no cover - the watch without ringloop's native module
    _native_asleep = None
    _native_schedstat = None
    _woken_asleep_since = None


# futex(2)'s number, where a thread waiting for the GIL (a condition variable) blocks: for the
# watch without the native module, which otherwise reads it as the sampler does.
_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)


def blocked_elsewhere(native_id: int | None, since_ns: int = 0) -> bool:
    """Thread ``native_id`` of this process is blocked in a system call that is not a futex
    wait (a sleep, a poll, a read): it is not waiting for the GIL now. A futex wait (the GIL,
    or a lock), a thread on a CPU or waiting for one, or an unknown state: False. Also True
    when ringloop's sampler signalled it asleep so since ``since_ns`` (monotonic): it woke
    into a wait for the GIL that the signal, not its own code, made (see
    `woken_asleep_since`)."""
    if native_id is None:
        return False
    if _woken_asleep_since is not None and _woken_asleep_since(native_id, since_ns):
        return True
    if _native_asleep is not None:  # the native sampler's own check (one for both)
        return _native_asleep(native_id)
    if _FUTEX is None:
        return False
    raw = _read(f"/proc/self/task/{native_id}/syscall")
    if not raw:
        return False
    head = raw.split(None, 1)[0]
    if not head.lstrip(b"-").isdigit():  # "running"
        return False
    nr = int(head)
    return nr >= 0 and nr != _FUTEX


def schedstat(native_id: int | None) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable waiting for one) of thread ``native_id`` of this process: its
    CPU clock and ``schedstat``'s run delay.

    Read natively, with the GIL held, where ringloop's module is there: ``os.read`` gives the
    GIL up, and a watchdog reading the loop thread's run delay in the middle of a collection
    got it back only when the collection ended, so the time it stamped the reading with came
    800 ms after the reading (the collection's own wait for a CPU was counted again after
    it)."""
    if native_id is None:
        return None
    if _native_schedstat is not None:
        return _native_schedstat(native_id)
    raw = _read(f"/proc/self/task/{native_id}/schedstat")
    if raw is None:
        return None
    try:
        cpu, delay = raw.split()[:2]
        return int(cpu), int(delay)
    except ValueError:
        return None


_CGROUP_ROOTS_V1 = (
    "/sys/fs/cgroup/cpu",
    "/sys/fs/cgroup/cpu,cpuacct",
    "/sys/fs/cgroup/cpuacct,cpu",
)
_cgroup_cache: tuple[float, list[tuple[str, bool]]] = (0.0, [])
_CGROUP_CACHE_S = 1.0


def cgroup_stat_files() -> list[tuple[str, bool]]:
    """``(cpu.stat path, is_v2)`` for the process's CPU cgroup and each ancestor up to the
    root, innermost first. Looked up at most once a second (a process is rarely moved)."""
    global _cgroup_cache
    now = time.monotonic()
    if now - _cgroup_cache[0] < _CGROUP_CACHE_S:
        return _cgroup_cache[1]
    files: list[tuple[str, bool]] = []
    raw = _read("/proc/self/cgroup") or b""
    for line in raw.decode("ascii", "replace").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                if os.path.exists(f"{root}/cgroup.controllers"):
                    files += _chain(root, path, True)
                    break
        elif "cpu" in controllers.split(","):
            for root in _CGROUP_ROOTS_V1:
                if os.path.isdir(root):
                    files = _chain(root, path, False) + [f for f in files if f[1]]
                    break
    # A v1 cpu controller, when mounted, is the one that throttles: prefer it.
    if any(not v2 for _, v2 in files):
        files = [f for f in files if not f[1]]
    _cgroup_cache = (now, files)
    return files


def _chain(root: str, path: str, v2: bool) -> list[tuple[str, bool]]:
    parts = [p for p in path.split("/") if p]
    out = []
    for i in range(len(parts), -1, -1):
        stat = os.path.join(root, *parts[:i], "cpu.stat")
        if os.path.exists(stat):
            out.append((stat, v2))
    return out


_quota_cache: tuple[float, bool] = (0.0, False)


def under_quota() -> bool:
    """Whether the process's CPU cgroup or an ancestor has a CPU quota (else throttling cannot
    happen and ``cpu.stat`` is never read). Looked up at most once a second."""
    global _quota_cache
    now = time.monotonic()
    if now - _quota_cache[0] < _CGROUP_CACHE_S:
        return _quota_cache[1]
    limited = False
    for stat, v2 in cgroup_stat_files():
        d = os.path.dirname(stat)
        raw = _read(os.path.join(d, "cpu.max" if v2 else "cpu.cfs_quota_us")) or b""
        word = raw.split()[:1]
        if word and word[0] not in (b"max", b"-1"):
            limited = True
            break
    _quota_cache = (now, limited)
    return limited


def throttling() -> dict[str, tuple[int, int]]:
    """``{cpu.stat path: (periods throttled, ns throttled)}`` for the process's cgroups."""
    out: dict[str, tuple[int, int]] = {}
    if not under_quota():
        return out
    for path, v2 in cgroup_stat_files():
        raw = _read(path)
        if raw is None:
            continue
        fields = dict(
            line.split(None, 1)
            for line in raw.decode("ascii", "replace").splitlines()
            if " " in line
        )
        try:
            n = int(fields.get("nr_throttled", 0))
            ns = int(fields["throttled_usec"]) * 1000 if v2 else int(fields["throttled_time"])
        except (KeyError, ValueError):
            continue
        out[path] = (n, ns)
    return out


@dataclass
class Snapshot:
    """The OS counters at one moment (see the module docs for when they are read)."""

    t_ns: int
    sched: tuple[int, int] | None  # the loop thread's (cpu, run delay)
    throttle: dict[str, tuple[int, int]]
    # Kernel ids of the process's Python threads that had run by then (see `_started_since`).
    threads: frozenset[int] | None = None
    # At a slice's end: the run delay of each Python thread that began to run in the slice
    # (kernel id -> (name, ns)), read then, not when the report is made (`started_delays`).
    started: dict[int, tuple[str, int]] | None = None
    # At a slice's end: the threads that had run when it began, which ``started`` leaves out
    # (`causes.threads_before`).
    known: frozenset[int] | None = None
    # When ``threads`` was read, if not at ``t_ns`` (the watchdog's wake before the slice).
    threads_t_ns: int | None = None

    @classmethod
    def take(cls, native_id: int | None) -> Snapshot:
        # The cgroup reads give the GIL up; a watchdog taking the baseline may then wait for
        # it as long as the loop thread's C call lasts (a 300 ms collection). The thread's
        # clocks and the time are read last, together, with the GIL held (`schedstat`): a
        # moment stamped before or after that wait made a spin after the collection look like
        # a wait, or the collection's wait for a CPU count twice. The CPU clock, not
        # schedstat's sum, which the kernel brings up to date only when the thread is
        # descheduled or a tick lands on its CPU: the clock asks for the running total.
        throttle = throttling()
        sched = schedstat(native_id)
        t_ns = time.monotonic_ns()
        if sched is not None and _native_schedstat is None:
            cpu = thread_cpu(native_id)
            if cpu is not None:
                sched = (cpu, sched[1])
        return cls(t_ns, sched, throttle, python_threads())


def started_delays(known: frozenset[int] | None) -> dict[int, tuple[str, int]] | None:
    """(name, run delay) of each Python thread not in ``known``, by kernel id: read as a slice
    ends, a thread started in it gives its wait for a CPU up to then. Read later, as the
    report was made, a thread still waiting behind two CPU hogs had added tens of ms that
    were after the slice (issue 23: 102 ms booked for a 55 ms slice's start)."""
    if known is None:
        return None
    out = {}
    for thread in list(threading._active.values()):  # noqa: SLF001 - no lock, no copy
        tid = thread.native_id
        if tid is None or tid in known:
            continue
        ss = schedstat(tid)
        if ss is not None:
            out[tid] = (thread.name, ss[1])
    return out


_TICK_NS = 1_000_000_000 // (os.sysconf("SC_CLK_TCK") or 100)
# Kernel ids of the watch's own Python threads (the watchdog): never a thread the application
# started in a slice.
WATCH_THREADS: set[int] = set()


def created_since(tids: frozenset[int], mono_ns: int) -> frozenset[int]:
    """The threads among ``tids`` the kernel created at ``mono_ns`` (monotonic clock) or
    later, by /proc's stamp of their start (``stat`` field 22, in clock ticks since boot). A
    tick is 10 ms: a thread created up to a tick before ``mono_ns`` counts too. A thread gone
    meanwhile does not."""
    edge = mono_ns + time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns() - _TICK_NS
    out = set()
    for tid in tids - WATCH_THREADS:
        raw = _read(f"/proc/self/task/{tid}/stat")
        if raw is None:
            continue
        try:
            # Fields after the command name (which may hold spaces and parentheses): state
            # is field 3, starttime field 22.
            ticks = int(raw[raw.rindex(b")") + 2 :].split()[19])
        except (ValueError, IndexError):
            continue
        if ticks * _TICK_NS >= edge:
            out.add(tid)
    return frozenset(out)


def python_threads() -> frozenset[int]:
    """Kernel ids of the process's Python threads that have begun to run (a thread enters
    ``threading._active`` from its own first steps; one still waiting for a CPU is not
    there)."""
    return frozenset(
        t.native_id
        for t in list(threading._active.values())  # noqa: SLF001 - no lock, no copy
        if t.native_id is not None
    )


# -- CPU clocks of Python threads (the watchdog's cheap baseline) -----------------------------


def thread_cpu(native_id: int | None) -> int | None:
    """CPU time (ns) of thread ``native_id`` of this process, None if it has ended.

    Linux encodes a thread's CPU clock as ``(~tid << 3) | 6`` (``MAKE_THREAD_CPUCLOCK(tid,
    CPUCLOCK_SCHED)``, what ``pthread_getcpuclockid`` returns): one ``clock_gettime``, no
    ``/proc``, and keyed by the kernel's thread id, which — unlike a ``pthread_t``, reused as
    soon as a thread is joined — is not handed to a new thread while the old one is known."""
    if native_id is None:
        return None
    try:
        return time.clock_gettime_ns((~native_id << 3) | 6)
    except OSError:
        return None


_names: dict[int, str] = {}  # kernel thread id -> name, kept past a thread's end for its report


@dataclass
class Clocks:
    """CPU clocks of the loop thread and the other Python threads (by kernel thread id) at one
    moment; with ``sched``, the loop thread's run delay too (a /proc read: only where the
    watchdog reads anyway, on a busy machine, and at the ends of GIL windows)."""

    t_ns: int
    loop: int | None
    others: dict[int, int]
    delay: int | None = None

    @classmethod
    def take(cls, loop_native: int | None, skip: int, sched: bool = False) -> Clocks:
        others = {}
        for thread in list(threading._active.values()):  # noqa: SLF001 - no lock, no copy
            tid = thread.native_id
            if tid is None or tid == loop_native or tid == skip:
                continue
            v = thread_cpu(tid)
            if v is not None:
                others[tid] = v
                if tid not in _names:
                    _names[tid] = thread.name
        if len(_names) > 2 * len(others) + 64:  # forget threads that ended
            for tid in [t for t in _names if t not in others]:
                del _names[tid]
        delay = None
        if sched and loop_native is not None:
            ss = schedstat(loop_native)
            delay = ss[1] if ss is not None else None
        return cls(time.monotonic_ns(), thread_cpu(loop_native), others, delay)
