"""The report: `Block`, one slice of loop-thread time that went over a threshold.

A Block says how long the loop was blocked, what ran (task name and coroutine, or the plain
callback), the line that blocked (from the watchdog's stack samples), where the time went (a
histogram of sampled lines), which audited I/O happened, the duration broken down by cause
(``causes``: gc, throttled, starved, gil, the application's own; see causes.py), and any
context the application attached (e.g. a tracing span id). ``str(block)`` is the human report; ``to_dict``/``to_json``
the machine one.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .audit import IoEvent
from .causes import Cause
from .stacks import _WATCH_DIR, FrameTuple, format_location

# Causes that belong to the machine, not to the application (see `Block.machine_time`).
MACHINE_CAUSES = ("starved", "throttled")

# asyncio's own package: its frames are never the line a report should name for an await.
_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep


@dataclass
class Block:
    duration: float  # seconds the loop thread spent in the slice (within the watching scope)
    threshold: float  # seconds
    start: float  # wall-clock time.time() at which the slice started
    kind: str  # "sleep", "file", "socket", "dns", "db", "subprocess", ... "cpu", "wait", "unknown"
    task_name: str | None = None
    coroutine: str | None = None
    callback: str | None = None
    stack: list[traceback.FrameSummary] = field(default_factory=list)
    line: traceback.FrameSummary | None = None  # the line that blocked (innermost user frame)
    samples: list[tuple[str, int]] = field(default_factory=list)  # (location, count), most first
    sample_count: int = 0
    io_events: list[IoEvent] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    backend: str = ""
    # share of the blocked time (from arming) the loop thread was on a CPU: its CPU clock, or
    # on ringloop the share of stack samples that found it running or runnable
    cpu_fraction: float | None = None
    next_await: traceback.FrameSummary | None = None  # where the task suspended afterwards
    strict: bool = False  # reported because of an I/O event, not (only) because of duration
    in_progress: bool = False  # still running when its scope ended (duration so far)
    # The duration broken down by cause, largest first (see causes.py); `kind` is the first.
    causes: list[Cause] = field(default_factory=list)
    # For listeners that attribute the block further (`ringloop serve` names the request): the
    # slice's CLOCK_MONOTONIC start and the task it stepped, if any. Not part of the report.
    start_ns: int = 0
    task: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration": self.duration,
            "threshold": self.threshold,
            "start": self.start,
            "kind": self.kind,
            "task_name": self.task_name,
            "coroutine": self.coroutine,
            "callback": self.callback,
            "line": _fs_dict(self.line) if self.line else None,
            "stack": [_fs_dict(fs) for fs in self.stack],
            "samples": [{"location": loc, "count": n} for loc, n in self.samples],
            "sample_count": self.sample_count,
            "io_events": [ev.to_dict() for ev in self.io_events],
            "context": {k: _jsonable(v) for k, v in self.context.items()},
            "backend": self.backend,
            "cpu_fraction": self.cpu_fraction,
            "next_await": _fs_dict(self.next_await) if self.next_await else None,
            "strict": self.strict,
            "in_progress": self.in_progress,
            "causes": [c.to_dict() for c in self.causes],
        }

    def breakdown(self) -> str:
        """``120.0 ms gc (generation 2, 1.9 M objects), 41.0 ms in your code at app.py:12
        (cpu), 21.0 ms waiting for a CPU``."""
        where = _fs_location(self.line) if self.line is not None else None
        return ", ".join(c.describe(where) for c in self.causes)

    def application_time(self) -> float:
        """Seconds of the block that were the application's own (its line, its I/O)."""
        if not self.causes:
            return self.duration
        return sum(c.seconds for c in self.causes if c.application)

    def machine_time(self) -> float:
        """Seconds of the block the machine took: waiting for a CPU (``starved``) or for the
        cgroup's CPU quota (``throttled``). No line of the application can shorten them."""
        return sum(c.seconds for c in self.causes if c.cause in MACHINE_CAUSES)

    def blames_the_application(self) -> bool:
        """Whether the block is the application's doing: with the machine's share taken out it
        still reaches the threshold (or, in strict mode, it did audited blocking I/O)."""
        if self.strict:
            return True
        return self.duration - self.machine_time() >= self.threshold

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        ms = self.duration * 1000
        head = (
            f"event loop blocked for {ms:.1f} ms (threshold {self.threshold * 1000:.1f} ms), "
            f"kind: {self.kind}"
        )
        if self.strict and self.duration < self.threshold:
            head = f"blocking call on the event loop ({ms:.1f} ms, strict mode), kind: {self.kind}"
        lines = [head]
        if self.causes:
            lines[0] = head.rsplit(", kind:", 1)[0] + ": " + self.breakdown()
            lines.append(f"  kind: {self.kind}")
            others = [c.cause for c in self.causes if not c.application]
            # A strict-mode report of short I/O is the application's line by definition.
            short_io = self.strict and self.duration < self.threshold
            if others and not short_io and self.application_time() < self.threshold:
                lines.append(
                    "  no application line is to blame: the loop thread's own work was under the"
                    " threshold; the rest was " + " and ".join(others)
                )
        if self.task_name is not None:
            lines.append(f"  task: {self.task_name} running {self.coroutine}")
        elif self.callback is not None:
            lines.append(f"  callback: {self.callback}")
        if self.line is not None:
            lines.append(f"  at {_fs_location(self.line)}")
            if self.line.line:
                lines.append(f"      {self.line.line.strip()}")
        elif self.next_await is not None:
            lines.append(
                "  no stack sample (a C call held the GIL for the whole block); the blocking"
                f" code ran before the task's next await at {_fs_location(self.next_await)}"
            )
            if self.next_await.line:
                lines.append(f"      {self.next_await.line.strip()}")
        for ev in self.io_events[:10]:
            at = f" at {format_location(ev.where)}" if ev.where else ""
            lines.append(f"  I/O: {ev.event}({ev.detail}) [{ev.kind}]{at}")
        if len(self.io_events) > 10:
            lines.append(f"  I/O: ... {len(self.io_events) - 10} more")
        if self.samples:
            lines.append(f"  where the time went ({self.sample_count} samples):")
            for loc, n in self.samples[:5]:
                lines.append(f"    {n * 100 / self.sample_count:5.1f}%  {loc}")
        if self.context:
            lines.append("  context: " + ", ".join(f"{k}={v!r}" for k, v in self.context.items()))
        if self.stack:
            lines.append("  stack (innermost last):")
            for text in traceback.format_list(self.stack):
                lines.extend("    " + t for t in text.rstrip("\n").split("\n"))
        return "\n".join(lines)


def _fs_dict(fs: traceback.FrameSummary) -> dict[str, Any]:
    return {"filename": fs.filename, "lineno": fs.lineno, "name": fs.name, "line": fs.line}


def _fs_location(fs: traceback.FrameSummary) -> str:
    return format_location((fs.filename, fs.lineno or 0, fs.name))


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return repr(v)


def task_of(callback: Any) -> asyncio.Future | None:
    """The task a handle's callback steps, if it is a task step or wakeup.

    C tasks schedule ``TaskStepMethWrapper`` objects and bound ``task_wakeup`` methods; Python
    tasks schedule bound ``__step``/``__wakeup`` methods. All expose the task as ``__self__``.
    """
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        return owner
    return None


def coroutine_name(task: asyncio.Task) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", None) or type(coro).__name__
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
    if code is not None and code.co_filename.startswith(_WATCH_DIR):
        # One of the watch's own wrappers (a decorator, the pytest plugin): name the
        # function it wraps, which it holds as `func`.
        frame = getattr(coro, "cr_frame", None)
        func = frame.f_locals.get("func") if frame is not None else None
        if getattr(func, "__code__", None) is not None:
            name, code = func.__qualname__, func.__code__
    if code is not None:
        return (
            f"{name}() defined at {format_location((code.co_filename, code.co_firstlineno, name))}"
        )
    return f"{name}()"


def suspension_point(task: asyncio.Task) -> FrameTuple | None:
    """Where a task's coroutine chain is suspended now: the innermost coroutine frame outside
    asyncio's own package (`await asyncio.sleep(0)` suspends in asyncio's `__sleep0`, but the
    line a user needs is their `await`), else the innermost one."""
    coro = task.get_coro()
    found = outside = None
    for _ in range(64):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        found = (frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name)
        if not found[0].startswith(_ASYNCIO_DIR):
            outside = found
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if coro is None:
            break
    return outside or found


def describe_callback(callback: Any, args: tuple = ()) -> str:
    """A short, stable description of a plain callback: its qualname and where it is defined."""
    while isinstance(callback, functools.partial):
        args = tuple(callback.args) + tuple(args)
        callback = callback.func
    func = getattr(callback, "__func__", callback)
    name = getattr(func, "__qualname__", None) or repr(callback)
    code = getattr(func, "__code__", None)
    where = ""
    if code is not None:
        where = f" at {format_location((code.co_filename, code.co_firstlineno, name))}"
    arg_text = ", ".join(_short_repr(a) for a in args[:3])
    if len(args) > 3:
        arg_text += ", ..."
    return f"{name}({arg_text}){where}"


def _short_repr(a: Any) -> str:
    try:
        r = repr(a)
    except Exception:
        r = f"<{type(a).__name__}>"
    return r if len(r) <= 40 else r[:37] + "..."


OnBlock = Callable[[Block], Any]
