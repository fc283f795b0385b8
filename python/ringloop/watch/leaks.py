"""Leak checks for tests: tasks still pending and threads still alive when a scope ends.

`no_task_leaks` records where each task was created (through a task factory installed for the
scope, chained to any factory already set) so a leak report points at the ``create_task``
line, not at asyncio's internals. `no_thread_leaks` reports threads started inside the scope
that are still alive at its end (after a short grace period for threads that are finishing),
with the stack each one is at now. Both work as ``with``/``async with`` scopes and decorators.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import re
import sys
import threading
import time
import traceback
import warnings
import weakref

from .stacks import frames_of, is_asyncio, summaries

_WATCH_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

logger = logging.getLogger("ringloop.watch")

# Threads that asyncio itself keeps for reuse (default executor workers) and our watchdog.
DEFAULT_THREAD_IGNORE = re.compile(r"^(asyncio_\d+|ringloop-watchdog)$")


class TaskLeakError(Exception):
    def __init__(self, leaks: list[tuple[asyncio.Task, list[traceback.FrameSummary]]]) -> None:
        self.tasks = [t for t, _ in leaks]
        self.leaks = leaks
        parts = []
        for task, stack in leaks:
            head = f"task {task.get_name()!r} ({task.get_coro()!r}) still pending"
            where = "".join(traceback.format_list(stack)) if stack else "  (creation unknown)\n"
            parts.append(f"{head}, created at (innermost last):\n{where}")
        super().__init__(f"{len(leaks)} leaked task(s):\n" + "\n".join(parts))


class ThreadLeakError(Exception):
    def __init__(
        self, threads: list[tuple[threading.Thread, list[traceback.FrameSummary]]]
    ) -> None:
        self.threads = [t for t, _ in threads]
        parts = []
        for th, stack in threads:
            where = "".join(traceback.format_list(stack)) if stack else "  (not in Python code)\n"
            parts.append(f"thread {th.name!r} still alive, now at:\n{where}")
        super().__init__(f"{len(threads)} leaked thread(s):\n" + "\n".join(parts))


def _act(action: str, err: Exception, exc: BaseException | None) -> None:
    if action == "raise":
        if exc is None:
            raise err
        if isinstance(exc, Exception):
            exc.add_note(str(err))
    elif action == "warn":
        warnings.warn(str(err), ResourceWarning, stacklevel=3)
    elif action == "log":
        logger.warning("%s", err)


class _Scope:
    """``with``/``async with``/decorator plumbing shared by both leak checks."""

    def _enter(self) -> None:
        raise NotImplementedError

    def _exit(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    async def _aexit(self, exc: BaseException | None) -> None:
        self._exit(exc)

    async def _settled_leaks(self) -> list:
        """The leaks still there once the grace period has passed (polled without blocking
        the loop, so finishing tasks and threads can end)."""
        deadline = time.monotonic() + self.grace
        leaks = self._leaks()
        while leaks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            leaks = self._leaks()
        return leaks

    def __enter__(self):
        self._enter()
        return self

    def __exit__(self, et, exc, tb) -> None:
        self._exit(exc)

    async def __aenter__(self):
        self._enter()
        return self

    async def __aexit__(self, et, exc, tb) -> None:
        await self._aexit(exc)

    def _fresh(self):
        raise NotImplementedError

    def __call__(self, func):
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                async with self._fresh():
                    return await func(*args, **kwargs)

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self._fresh():
                return func(*args, **kwargs)

        return wrapper


class no_task_leaks(_Scope):  # noqa: N801
    """Fail (or warn, log, cancel) when tasks created in the scope are still pending at its end.

    Must be entered inside a running loop. ``action``: "raise", "warn", "log" or "cancel".
    """

    def __init__(self, action: str = "raise", *, grace: float = 0.0) -> None:
        if action not in ("raise", "warn", "log", "cancel"):
            raise ValueError(f"unknown action {action!r}")
        self.action = action
        self.grace = grace
        self.leaked: list[asyncio.Task] = []
        self._origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _fresh(self):
        return no_task_leaks(self.action, grace=self.grace)

    def _enter(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._before = asyncio.all_tasks(self._loop)
        self._prev_factory = self._loop.get_task_factory()
        origins, prev = self._origins, self._prev_factory

        def factory(loop, coro, **kwargs):
            task = prev(loop, coro, **kwargs) if prev else asyncio.Task(coro, loop=loop, **kwargs)
            # Innermost frames first, up to the caller of create_task; skip the factory itself.
            origins[task] = _caller_stack(sys._getframe(1))
            return task

        self._loop.set_task_factory(factory)

    def _restore(self) -> None:
        self._loop.set_task_factory(self._prev_factory)

    def _leaks(self) -> list[asyncio.Task]:
        me = asyncio.current_task(self._loop)
        return [
            t
            for t in asyncio.all_tasks(self._loop)
            if t not in self._before and t is not me and not t.done()
        ]

    def _exit(self, exc: BaseException | None) -> None:
        self._restore()
        self._report(self._leaks(), exc)

    async def _aexit(self, exc: BaseException | None) -> None:
        self._restore()
        self._report(await self._settled_leaks(), exc)

    def _report(self, leaks: list[asyncio.Task], exc: BaseException | None) -> None:
        self.leaked = leaks
        if not leaks:
            return
        if self.action == "cancel":
            for t in leaks:
                t.cancel()
            return
        err = TaskLeakError([(t, summaries(self._origins.get(t, ()))) for t in leaks])
        _act(self.action, err, exc)


def _caller_stack(frame, limit: int = 8) -> tuple:
    """Where create_task was called: the caller's frames up to the loop's dispatch, innermost
    last, without asyncio's create_task wrappers or the watch's own frames."""
    frames = [
        ft
        for ft in frames_of(frame)
        if not ft[0].startswith(_WATCH_DIR)
        and not (is_asyncio(ft[0]) and ft[2] in ("create_task", "ensure_future"))
    ]
    return tuple(frames[-limit:])


class no_thread_leaks(_Scope):  # noqa: N801
    """Fail (or warn, log) when threads started in the scope are still alive at its end."""

    def __init__(
        self,
        action: str = "raise",
        *,
        grace: float = 0.1,
        ignore: re.Pattern[str] | None = DEFAULT_THREAD_IGNORE,
    ) -> None:
        if action not in ("raise", "warn", "log"):
            raise ValueError(f"unknown action {action!r}")
        self.action = action
        self.grace = grace
        self.ignore = ignore
        self.leaked: list[threading.Thread] = []

    def _fresh(self):
        return no_thread_leaks(self.action, grace=self.grace, ignore=self.ignore)

    def _enter(self) -> None:
        self._before = set(threading.enumerate())

    def _leaks(self) -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            if t not in self._before
            and t.is_alive()
            and not (self.ignore is not None and self.ignore.match(t.name))
        ]

    def _exit(self, exc: BaseException | None) -> None:
        deadline = time.monotonic() + self.grace
        leaks = self._leaks()
        for t in leaks:  # give finishing threads their grace period
            t.join(max(0.0, deadline - time.monotonic()))
        self._report([t for t in leaks if t.is_alive()], exc)

    async def _aexit(self, exc: BaseException | None) -> None:
        self._report(await self._settled_leaks(), exc)

    def _report(self, leaks: list[threading.Thread], exc: BaseException | None) -> None:
        self.leaked = leaks
        if not leaks:
            return
        frames = sys._current_frames()
        described = []
        for t in leaks:
            frame = frames.get(t.ident) if t.ident is not None else None
            described.append((t, traceback.extract_stack(frame) if frame is not None else []))
        _act(self.action, ThreadLeakError(described), exc)
