"""`no_blocking`: a scope (``with``, ``async with``, decorator) that catches blocking calls.

Entered inside a running loop, the scope watches that loop (any backend). Entered where no
loop runs (a sync test that calls ``asyncio.run``), it watches the stock asyncio loops that
run on this thread while it is open; uvloop and ringloop loops must be watched from inside
(``async with``, an async function decorated, or the pytest plugin).

When the scope exits in the middle of a slice (the common case: ``with no_blocking(): ...``
inside a coroutine ends in the same task step it started in), the part of that slice run
inside the scope is judged too, so a single-step block is never missed.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import warnings
from asyncio import events
from collections.abc import Callable, Sequence
from typing import Any

from . import monitor as _mon
from .block import Block
from .stacks import add_boundary_code

logger = logging.getLogger("ringloop.watch")

Action = str | Callable[[Block], Any]


class BlockingError(Exception):
    """Raised when a `no_blocking` scope with ``action="raise"`` saw blocking calls."""

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = list(blocks)
        n = len(self.blocks)
        text = "\n\n".join(str(b) for b in self.blocks)
        super().__init__(f"{n} blocking call{'s' if n != 1 else ''} on the event loop:\n{text}")


class BlockingWarning(RuntimeWarning):
    """Emitted per block by a `no_blocking` scope with ``action="warn"``."""


class no_blocking:  # noqa: N801 - used like a function: `with no_blocking():`
    """Detect slices longer than ``threshold`` seconds (and, with ``strict``, any audited
    blocking call) while the scope is open. The object bound by ``as`` has ``.blocks``.

    With ``action="raise"`` a block whose duration, less the machine's share (waiting for a
    CPU, for the cgroup's CPU quota), stays under the threshold is logged, not raised, unless
    ``blame_machine`` is set.
    """

    def __init__(
        self,
        threshold: float = 0.01,
        action: Action = "raise",
        strict: bool = False,
        *,
        context_providers: Sequence[Callable[[], dict[str, Any]]] = (),
        blame_machine: bool = False,
    ) -> None:
        if not callable(action) and action not in ("raise", "warn", "log"):
            raise ValueError(f"action must be 'raise', 'warn', 'log' or a callable, not {action!r}")
        self.threshold = threshold
        self.action = action
        self.strict = strict
        # A block the machine made (the loop thread waiting for a CPU or for the CPU quota)
        # is reported like any other, but raises only if this is set: no line of the code
        # under test is to blame, and a test must not fail because its machine was busy.
        self.blame_machine = blame_machine
        self.context_providers = tuple(context_providers)
        self.blocks: list[Block] = []
        self._consumer: _mon.Consumer | None = None
        self._thread = 0

    # -- scope -----------------------------------------------------------------------------
    def _enter(self) -> no_blocking:
        if self._consumer is not None:
            raise RuntimeError("this no_blocking scope is already open; create a new one")
        self.blocks = []
        c = _mon.Consumer(
            self.threshold,
            self._deliver,
            strict=self.strict,
            context_providers=self.context_providers,
        )
        self._consumer = c
        self._thread = threading.get_ident()
        loop = events._get_running_loop()
        if loop is not None:
            _mon.attach(loop, c)
        else:
            _mon.attach_thread(c, self._thread)
        # Count from here: attaching (first time: starting the watchdog thread) is ours.
        c.enter_ns = time.monotonic_ns()
        return self

    def _exit(self, exc: BaseException | None) -> None:
        c = self._consumer
        self._consumer = None
        if c is None:
            return
        now = time.monotonic_ns()
        try:
            if threading.get_ident() == self._thread:
                for mon in list(c.monitors):
                    if mon.thread_id == self._thread:
                        mon.in_progress(c, now)
        finally:
            _mon.detach(c)
        blamed = [b for b in self.blocks if self.blame_machine or b.blames_the_application()]
        if blamed and self.action == "raise":
            ids = {id(b) for b in blamed}
            for b in self.blocks:
                if id(b) not in ids:
                    logger.warning("not raised, the machine's doing: %s", b)
            err = BlockingError(blamed)
            if exc is None:
                raise err
            if isinstance(exc, Exception):
                exc.add_note(str(err))

    def _deliver(self, block: Block) -> None:
        self.blocks.append(block)
        action = self.action
        if action == "warn":
            warnings.warn(BlockingWarning(str(block)), stacklevel=2)
        elif action == "log":
            logger.warning("%s", block)
        elif callable(action):
            action(block)

    def __enter__(self) -> no_blocking:
        return self._enter()

    def __exit__(self, et, exc, tb) -> None:
        self._exit(exc)

    async def __aenter__(self) -> no_blocking:
        return self._enter()

    async def __aexit__(self, et, exc, tb) -> None:
        self._exit(exc)

    # -- decorator -------------------------------------------------------------------------
    def _fresh(self) -> no_blocking:
        return no_blocking(
            self.threshold, self.action, self.strict, context_providers=self.context_providers
        )

    def __call__(self, func: Callable) -> Callable:
        """Decorate a function: each call runs in its own scope; ``.blocks`` holds the last."""
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                scope = self._fresh()
                try:
                    async with scope:
                        return await func(*args, **kwargs)
                finally:
                    self.blocks = scope.blocks

            add_boundary_code(async_wrapper.__code__)
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            scope = self._fresh()
            try:
                with scope:
                    return func(*args, **kwargs)
            finally:
                self.blocks = scope.blocks

        return wrapper
