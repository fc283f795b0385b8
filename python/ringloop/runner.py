"""Entry points that put a `ringloop.Loop` under a program: `run`, `EventLoopPolicy`, `install`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any, TypeVar

from .loop import Loop, new_event_loop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """`asyncio.run(main, debug=debug)` on a ringloop loop: same semantics (a new loop,
    leftover tasks cancelled, async generators and the default executor shut down). The loop
    is made, run and closed on this thread, so it is thread-bound (see `Loop`)."""
    if asyncio.events._get_running_loop() is not None:
        # Checked before anything is created, like asyncio.run: the caller's coroutine is
        # left for them to close, and no loop is half-built.
        raise RuntimeError("ringloop.run() cannot be called from a running event loop")
    with asyncio.Runner(
        debug=debug, loop_factory=functools.partial(new_event_loop, thread_bound=True)
    ) as runner:
        return runner.run(main)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An event loop policy whose `new_event_loop()` returns a `ringloop.Loop`."""

    def _loop_factory(self) -> Loop:  # type: ignore[override]
        return Loop()


def install() -> None:
    """Make ringloop the loop that `asyncio.new_event_loop()`/`asyncio.run()` create."""
    asyncio.set_event_loop_policy(EventLoopPolicy())
