"""Migration aliases: pyleak's `no_event_loop_blocking`, with its signature, over `no_blocking`.

A pyleak user changes the import and nothing else:

    from pyleak import no_event_loop_blocking          # before
    from ringloop.watch import no_event_loop_blocking  # after

pyleak's arguments map as follows: ``action`` ("warn", "log", "raise", "cancel", or pyleak's
``LeakAction`` members, which are str enums) keeps its meaning; "cancel" is reported like "log",
as pyleak itself does (a block cannot be cancelled). ``logger`` receives the reports of "log"
and "cancel". ``threshold`` is the same seconds. ``check_interval`` (how often pyleak's thread
pings the loop) has no counterpart: slices are timed exactly and the watchdog samples at
threshold/8; it is checked and otherwise ignored, as is ``caller_context``.
"""

from __future__ import annotations

import logging
from typing import Any

from .block import Block
from .scopes import BlockingError, no_blocking

# pyleak's exception name for the same failure, so `except EventLoopBlockError` keeps working
# after the import changes (the blocks are in `.blocks`).
EventLoopBlockError = BlockingError

_ACTIONS = ("warn", "log", "raise", "cancel")


def no_event_loop_blocking(
    action: Any = "warn",
    logger: logging.Logger | None = None,
    *,
    threshold: float = 0.2,
    check_interval: float = 0.05,
    caller_context: Any = None,
) -> no_blocking:
    """pyleak's `no_event_loop_blocking(action, logger, *, threshold, check_interval,
    caller_context)` as a `no_blocking` scope: a ``with``/``async with`` scope and a decorator."""
    name = getattr(action, "value", action)  # pyleak's LeakAction.RAISE -> "raise"
    if name not in _ACTIONS:
        raise ValueError(f"action must be one of {', '.join(_ACTIONS)}, not {action!r}")
    if not threshold > 0:
        raise ValueError(f"threshold must be a positive number of seconds, not {threshold!r}")
    if not check_interval > 0:
        raise ValueError(
            f"check_interval must be a positive number of seconds, not {check_interval!r}"
        )
    del caller_context  # pyleak records where the scope was entered; every Block has its stack
    if name in ("log", "cancel"):
        log = logger if logger is not None else logging.getLogger("ringloop.watch")

        def report(block: Block) -> None:
            log.warning("%s", block)

        return no_blocking(threshold, report)
    return no_blocking(threshold, name)
