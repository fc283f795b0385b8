"""The worker's end of the channel between a worker process and its parent (the supervisor
of `--workers`, or the reloader of `--reload`).

The channel is one end of a `socketpair`, and the protocol is single bytes:

* `READY` (worker → parent), once the worker's listeners accept (`Server.on_started`, which hands
  over the server's stop callback, not the server): a
  rolling restart stops the worker being replaced only after its replacement said this;
* `STOPPING` (worker → parent), when the worker stops by itself (`--limit-max-requests`): the
  parent starts its successor on the same listener at once, while it drains, rather than
  once it has exited (connections would wait in the listener's queue meanwhile);
* `PING` (parent → worker) and `PONG` (worker → parent): the health check. The answer comes
  from the worker's event loop, so a loop that is blocked — not just a process that is
  alive — fails it (`--timeout-worker-healthcheck`);
* end of file (the parent has gone, even by SIGKILL): the worker stops gracefully instead of
  serving on as an orphan nobody will ever stop.

The parent's end is in `supervisor` and `reloader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from .logs import logger

READY = b"R"
STOPPING = b"S"
PING = b"p"
PONG = b"P"


def worker_hook(channel: socket.socket) -> Callable[[Callable[[], None]], None]:
    """The `on_started` hook of a worker whose parent listens on the other end of `channel`:
    called with the worker's graceful `stop`, the one thing of the server it needs."""

    def on_started(stop: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        channel.setblocking(False)
        fd = channel.fileno()

        def readable() -> None:
            try:
                data = channel.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(fd)
                logger.warning("The parent process has gone; shutting down.")
                stop()
                return
            pings = data.count(PING)
            if pings:
                # A full buffer only means the parent is not reading: it will ping again.
                with contextlib.suppress(OSError):
                    channel.send(PONG * pings)

        loop.add_reader(fd, readable)
        with contextlib.suppress(OSError):
            channel.send(READY)

    return on_started


def stopping_hook(channel: socket.socket) -> Callable[[], None]:
    """The `on_stopping` hook of such a worker: tells the parent it is stopping by itself."""

    def on_stopping() -> None:
        with contextlib.suppress(OSError):
            channel.send(STOPPING)

    return on_stopping
