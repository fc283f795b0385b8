"""`ringloop serve --watch-threshold SECONDS`: every block of the loop, logged with the request
that owned the blocked slice.

The watch (`ringloop.watch`) times every callback natively and samples the blocked stack; this
module turns its `Block` into a line of the server log naming the request: method, path, route
template (where the framework puts it in the ASGI scope: Starlette and FastAPI's
`scope["route"].path`, Litestar's `scope["path_template"]`; Django keeps its match on the request,
out of reach, so its blocks show `route -`), request id (the `X-Request-ID` header, else one made
from the worker's pid, the connection and its request count), client, duration and the line:

    WARNING:  loop blocked 101.3 ms by GET /items/3 route=/items/{item_id}
              request_id=abc-1 client=127.0.0.1:40112 at /srv/app.py:12 in item [sleep]:
              80.2 ms in your code (sleep), 21.1 ms waiting for a CPU

and the breakdown by cause after the colon (`ringloop.watch.causes`); a block that was all
throttling or starvation says that no line of the request is to blame.

Nothing is done per request to allow this beyond keeping references to its scope
(`src/http/conn/watch.rs`, `src/http/h2conn/watch.rs`): the request is found when a block is
reported, from the records the connections keep (`ServerState._recent_requests`):

- a block in a task step (the handler awaited, then blocked): the request the blocked task
  runs — the request a connection's host task runs (which may be one whose background work
  goes on after its response while the connection serves the next), or the one a task of
  its own runs (made when the host task was busy so);
- a block in a request's first step, which the connection's read callback runs inline before
  any task step: the request that began inside the blocked slice.

A WSGI application runs in the bridge's thread pool, never on the loop, so it cannot block the
loop: blocks there are the server's own (or another coroutine's) and are logged without a
request (`by -`). A block no request owned (a timer, a lifespan task) is logged the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..watch import monitor
from ..watch.block import Block
from .logs import logger


@dataclass
class BlockedRequest:
    """The request a block is charged to (see the module docs)."""

    method: str
    path: str
    route: str | None
    request_id: str
    client: str

    @property
    def route_label(self) -> str:
        """What metrics group blocks by: the template, or '-' (never the raw path, so the
        label set stays bounded)."""
        return self.route or "-"


def request_of(block: Block, rows: list[tuple]) -> BlockedRequest | None:
    """The request that owned `block`'s slice, from `ServerState._recent_requests()` rows
    `(conn_id, kind, task, subject, cycle, begun_ns, client)` (see `src/http/watch.rs`)."""
    if not rows:
        return None
    task = block.task
    if task is not None:
        row = next((r for r in rows if r[2] is not None and r[2] is task), None)
        if row is None:
            row = _row_in_frames(task, rows)
        if row is not None:
            return _from_row(row)
    # A first step runs inline in the read callback: the request began inside the slice.
    end = block.start_ns + int(block.duration * 1e9)
    inside = [r for r in rows if r[1] == "latest" and block.start_ns <= r[5] <= end]
    if inside:
        return _from_row(max(inside, key=lambda r: r[5]))
    return None


def _from_row(row: tuple) -> BlockedRequest:
    conn_id, _kind, _task, subject, cycle, _begun, client = row
    # The worker's pid in hex first, so ids from several workers never clash (read now: a
    # worker is a fork of whoever imported this module).
    return _describe(subject, client, f"{os.getpid():x}-{conn_id}-{cycle}")


def _row_in_frames(task: Any, rows: list[tuple]) -> tuple | None:
    """A task of a request's own older than the connection's latest such task: its coroutine
    chain, while it runs, holds the request's scope (or Request) as a local."""
    by_id = {id(r[3]): r for r in rows}
    coro = task.get_coro()
    for _ in range(64):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        for value in frame.f_locals.values():
            row = by_id.get(id(value))
            if row is not None and row[3] is value:
                return row
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if coro is None:
            break
    return None


def _describe(subject: Any, client: Any, generated_id: str) -> BlockedRequest:
    if isinstance(subject, dict):  # an ASGI scope
        method = subject.get("method", "-")
        path = subject.get("path", "-")
        headers = subject.get("headers") or ()
        route = _route_of(subject)
        client = subject.get("client") or client
    else:  # a native Request
        method, path = subject.method, subject.path
        headers = subject.headers
        route = None
    rid = None
    for name, value in headers:
        if name.lower() == b"x-request-id":
            rid = value.decode("latin-1")
            break
    return BlockedRequest(
        method=method,
        path=path,
        route=route,
        request_id=rid or generated_id,
        client=f"{client[0]}:{client[1]}" if client else "-",
    )


def _route_of(scope: dict) -> str | None:
    route = scope.get("route")  # Starlette, FastAPI
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    template = scope.get("path_template")  # Litestar
    if isinstance(template, str):
        return template
    return None


def format_block(block: Block, req: BlockedRequest | None) -> str:
    """The log line (see the module docs)."""
    by = "-"
    if req is not None:
        by = (
            f"{req.method} {req.path} route={req.route or '-'} request_id={req.request_id} "
            f"client={req.client}"
        )
    where = ""
    line = block.line or block.next_await
    if line is not None:
        where = f" at {line.filename}:{line.lineno} in {line.name}"
        if block.line is None:
            where += " (next await; the block was in C code before it)"
    text = f"loop blocked {block.duration * 1000:.1f} ms by {by}{where} [{block.kind}]"
    if block.causes:
        text += ": " + ", ".join(c.describe() for c in block.causes)
        if block.application_time() < block.threshold:
            text += " (no line of the request is to blame)"
    return text


class RequestWatch:
    """The watch of one worker's server: started on its loop, stopped at shutdown."""

    def __init__(
        self,
        threshold: float,
        on_request_block: Callable[[Block, BlockedRequest | None], Any] | None = None,
    ) -> None:
        self.threshold = threshold
        self.on_request_block = on_request_block
        self.state: Any = None
        self.consumer: monitor.Consumer | None = None

    def start(self, state: Any, loop: Any) -> None:
        # A consumer of its own rather than `ringloop.watch.start()`, which is the
        # application's to call: the two then watch the same loop side by side.
        self.state = state
        state._track_requests(True)
        self.consumer = monitor.Consumer(self.threshold, self.on_block)
        monitor.attach(loop, self.consumer)

    def stop(self) -> None:
        if self.consumer is not None:
            monitor.detach(self.consumer)
            self.consumer = None
        if self.state is not None:
            self.state._track_requests(False)

    def on_block(self, block: Block) -> None:
        rows = self.state._recent_requests() if self.state is not None else []
        req = request_of(block, rows)
        logger.warning("%s", format_block(block, req))
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s", block)
        if self.on_request_block is not None:
            self.on_request_block(block, req)
