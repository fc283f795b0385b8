"""Always-on watching for services: `start`, `stop`, `activate`, `deactivate`.

``start()`` called inside a running loop watches that loop; called before any loop runs it
watches every stock asyncio loop that runs afterwards (uvloop and ringloop loops need
``start()`` from inside them, e.g. in the app's startup hook). Blocks go to ``on_block``
(default: logged on the ``ringloop.watch`` logger) and to the metrics. ``sample_rate`` reports
only that fraction of tasks (a fixed choice per task, so a sampled request is reported whole);
``context_providers`` are called in the blocked task's context and their values ride along in
``block.context`` (e.g. a tracing span id).
"""

from __future__ import annotations

import logging
from asyncio import events
from collections.abc import Callable, Sequence
from typing import Any

from . import monitor as _mon
from .block import Block

logger = logging.getLogger("ringloop.watch")


class _Production:
    def __init__(self) -> None:
        self.consumer: _mon.Consumer | None = None
        self.loop: Any = None
        self.active = False


_prod = _Production()


def _log_block(block: Block) -> None:
    logger.warning("%s", block)


def start(
    threshold: float = 0.1,
    on_block: Callable[[Block], Any] | None = None,
    sample_rate: float = 1.0,
    context_providers: Sequence[Callable[[], dict[str, Any]]] = (),
    *,
    strict: bool = False,
    loop: Any = None,
) -> None:
    """Start watching (replacing any previous `start`)."""
    stop()
    _prod.consumer = _mon.Consumer(
        threshold,
        on_block or _log_block,
        strict=strict,
        sample_rate=sample_rate,
        context_providers=context_providers,
    )
    _prod.loop = loop if loop is not None else events._get_running_loop()
    activate()


def activate() -> None:
    """Resume reporting after `deactivate` (no-op if not started or already active)."""
    c = _prod.consumer
    if c is None or _prod.active:
        return
    import time

    c.enter_ns = time.monotonic_ns()
    if _prod.loop is not None:
        _mon.attach(_prod.loop, c)
    else:
        _mon.attach_thread(c, None)
    _prod.active = True


def deactivate() -> None:
    """Pause: the loop runs unwatched (asyncio's dispatcher is restored) until `activate`."""
    if _prod.consumer is not None and _prod.active:
        _mon.detach(_prod.consumer)
    _prod.active = False


def stop() -> None:
    deactivate()
    _prod.consumer = None
    _prod.loop = None


def is_active() -> bool:
    return _prod.active
