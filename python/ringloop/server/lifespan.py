"""ASGI lifespan: `startup` before the server accepts, `shutdown` after the last connection.

`--lifespan auto` tries it and carries on without when the application does not support it
(it raises before sending anything, as uvicorn treats it); `on` makes that an error; `off`
skips it. A failed startup (`lifespan.startup.failed`, or an exception during startup) stops
the server with the application's message; the state the application put in `scope["state"]`
is shared into every request's scope (a shallow copy each, as the spec asks).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger("ringloop.server")


class LifespanFailed(Exception):
    """Startup or shutdown failed; the message is the application's (or its exception's)."""


class Lifespan:
    def __init__(self, app: Any, mode: str) -> None:
        self.app = app
        self.mode = mode
        self.state: dict[str, Any] = {}
        self.supported = mode != "off"
        self._receive: asyncio.Queue | None = None
        self._events: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._error: BaseException | None = None
        self._sent_any = False

    async def startup(self) -> None:
        if not self.supported:
            return
        self._receive = asyncio.Queue()
        self._events = asyncio.Queue()
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        self._task = asyncio.get_running_loop().create_task(self._run(scope))
        await self._receive.put({"type": "lifespan.startup"})
        kind, message = await self._events.get()
        if kind == "lifespan.startup.complete":
            return
        if kind == "unsupported":
            self.supported = False
            if self.mode == "on":
                raise LifespanFailed(f"the application does not support lifespan: {message}")
            logger.info("ASGI 'lifespan' protocol appears unsupported.")
            return
        raise LifespanFailed(message or "startup failed")

    async def shutdown(self) -> None:
        if not self.supported or self._task is None or self._task.done():
            return
        await self._receive.put({"type": "lifespan.shutdown"})
        kind, message = await self._events.get()
        if kind != "lifespan.shutdown.complete":
            raise LifespanFailed(message or "shutdown failed")

    async def _run(self, scope: dict) -> None:
        try:
            await self.app(scope, self._receive.get, self._send)
        except BaseException as exc:  # noqa: BLE001 - reported as the startup's outcome
            self._error = exc
            if not self._sent_any:
                await self._events.put(("unsupported", repr(exc)))
            else:
                logger.error("Exception in 'lifespan' protocol", exc_info=exc)
                await self._events.put(("failed", repr(exc)))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            if not self._sent_any:
                await self._events.put(("unsupported", "the application returned at once"))

    async def _send(self, message: dict) -> None:
        self._sent_any = True
        kind = message["type"]
        if kind not in (
            "lifespan.startup.complete",
            "lifespan.startup.failed",
            "lifespan.shutdown.complete",
            "lifespan.shutdown.failed",
        ):
            raise RuntimeError(f"Unexpected ASGI lifespan message type '{kind}'.")
        await self._events.put((kind, message.get("message", "")))
