"""Entry points that put a `ringloop.Loop` under a program: `run`, `EventLoopPolicy`, `install`.

Python 3.14 deprecated asyncio's policy system (removal planned for 3.16): touching
`asyncio.DefaultEventLoopPolicy` or calling `asyncio.set_event_loop_policy` warns. The route
asyncio asks for instead is a loop factory: `asyncio.run(main(), loop_factory=ringloop.new_event_loop)`,
`asyncio.Runner(loop_factory=...)`, or `ringloop.run(main())`, which is that. For programs that
call plain `asyncio.run()`, `install()` still makes it build a ringloop loop on every version,
without a warning: on 3.14+ it installs the policy through asyncio's own unwarned setter
(`asyncio.events._set_event_loop_policy`, the hook `asyncio.run` itself reads through), and
`EventLoopPolicy` derives from the class `asyncio.DefaultEventLoopPolicy` names
(`asyncio.unix_events._UnixDefaultEventLoopPolicy`) without going through the warning alias.
On 3.11-3.13 both are exactly what they always were.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from asyncio import unix_events
from collections.abc import Coroutine
from typing import Any, TypeVar

from .loop import Loop, new_event_loop

T = TypeVar("T")

# 3.14+: the policy names are deprecated aliases; their classes and setter remain, unwarned.
_POLICIES_DEPRECATED = sys.version_info >= (3, 14)


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


if _POLICIES_DEPRECATED:
    _BasePolicy: Any = unix_events._UnixDefaultEventLoopPolicy  # type: ignore[attr-defined]
    _set_policy = asyncio.events._set_event_loop_policy  # type: ignore[attr-defined]
else:
    _BasePolicy = asyncio.DefaultEventLoopPolicy
    _set_policy = asyncio.set_event_loop_policy


class EventLoopPolicy(_BasePolicy):  # type: ignore[misc, valid-type]
    """An event loop policy whose `new_event_loop()` returns a `ringloop.Loop`.

    On Python 3.14+ policies are deprecated by asyncio; prefer a loop factory
    (`asyncio.run(main(), loop_factory=ringloop.new_event_loop)` or `ringloop.run`)."""

    def _loop_factory(self) -> Loop:  # type: ignore[override]
        return Loop()


def install() -> None:
    """Make ringloop the loop that `asyncio.new_event_loop()`/`asyncio.run()` create."""
    _set_policy(EventLoopPolicy())
