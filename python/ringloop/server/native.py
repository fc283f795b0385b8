"""The native handler API: a plain function per request, called straight from the protocol.

```python
from ringloop.server.native import Response, native_handler

@native_handler
def hello(request):                      # called on the loop thread, no task, no scope dict
    return Response(200, [(b"content-type", b"text/plain")], b"Hello, world!")

@native_handler
async def echo(request):                 # or async: a task, like an ASGI app
    return Response(200, body=await request.read())
```

`request` has `method`, `path` (decoded), `raw_path`, `query_string`, `http_version`,
`headers` (lowercased `(name, value)` bytes pairs), `header(name)`, `client`, `server`,
`scheme`, `root_path`; a synchronous handler also gets the whole body as `request.body`, an
async one reads it with `await request.read()` or `async for chunk in request.stream()`.

A handler returns a `Response` (or `bytes`/`str`: a 200 `text/plain`). Its body is `bytes`,
`str`, a `FileBody(path)` (sent with `sendfile`), or an iterator or async iterator of bytes,
streamed with back-pressure: the next chunk is pulled only once the transport's buffer is below
its high-water mark. An async handler that wants to write as it goes takes a second parameter,
a `Writer`: `writer.start(status, headers)`, `writer.write(data)` (returns `False` when the
buffer is above its high-water mark), `await writer.drain()`, `writer.end()`.

Exceptions are logged with their traceback and answered with a 500 (or, once the response
started, by closing the connection); they never stop the server.

WebSocket: give the handler a `WebSocketHandler` (any object with some of its methods), and
upgrade requests go to it — its callbacks are called straight from the connection, with the
message as the `str` or `bytes` it is:

```python
from ringloop.server.native import WebSocketHandler, broadcast, native_handler

class Chat(WebSocketHandler):
    def __init__(self):
        self.members = set()

    def on_open(self, ws):
        self.members.add(ws)

    def on_message(self, ws, data):      # str (text) or bytes (binary)
        broadcast(self.members, data)    # one native loop over the members

    def on_close(self, ws, code, reason):
        self.members.discard(ws)

@native_handler(websocket=Chat())
def app(request):                        # plain HTTP requests still come here
    return Response(200, body=b"use a WebSocket")
```

`ws.send(data)` returns `False` once the transport's buffer is above its high-water mark; no
further message is delivered to that session until it drains (the client is held back by TCP).
`ws.close(code=1000, reason="")`, `ws.ping(data)`, `ws.closed`, `ws.request` (the upgrade
request) and `ws.subprotocol` complete it; an exception in a callback is logged and closes the
session with 1011.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from .. import _core
from .asgi import pathsend

Request = _core.Request
Response = _core.Response
ClientDisconnected = _core.ClientDisconnected
WebSocket = _core.WebSocket
broadcast = _core.broadcast


class WebSocketHandler:
    """The callbacks of native WebSocket sessions (see the module docs); each is optional."""

    def on_connect(self, request: Request) -> bool | str | None:
        """Before the 101: `False` denies the upgrade (403), a `str` picks that subprotocol
        (one the client offered: `request.header(b"sec-websocket-protocol")`), anything else
        accepts."""
        return None

    def on_open(self, ws: WebSocket) -> None:
        """After the 101."""

    def on_message(self, ws: WebSocket, data: str | bytes) -> None:
        """A whole message: `str` for text, `bytes` for binary."""

    def on_close(self, ws: WebSocket, code: int, reason: str) -> None:
        """The session ended: the client's close code (1005 if it gave none), 1006 when the
        connection went without a close, or ours after a protocol error."""


def native_handler(fn: Callable | None = None, *, websocket: Any = None) -> Callable:
    """Mark `fn` as a native handler (`--interface auto` then serves it natively);
    `websocket`: the `WebSocketHandler` that upgrade requests go to. Used bare (`@native_handler`)
    or with arguments (`@native_handler(websocket=Chat())`)."""
    if fn is None:
        return lambda f: native_handler(f, websocket=websocket)
    if websocket is not None:
        fn.__ringloop_websocket__ = websocket
    if inspect.iscoroutinefunction(fn):
        fn.__ringloop_interface__ = "native-async"
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        fn.__ringloop_wants_writer__ = len(params) >= 2
    else:
        fn.__ringloop_interface__ = "native"
    return fn


class FileBody:
    """A response body read from a file and sent with `sendfile`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)


class Writer:
    """Streaming writes for an async handler (see the module docs)."""

    def __init__(self, send) -> None:
        self._send = send
        self._last = None

    def start(self, status: int = 200, headers=()) -> None:
        self._send({"type": "http.response.start", "status": status, "headers": list(headers)})

    def write(self, data: bytes) -> bool:
        """Queue `data`; `False` when the transport's buffer is above its high-water mark
        (await `drain()` before writing more)."""
        self._last = self._send({"type": "http.response.body", "body": data, "more_body": True})
        return self._last.done()

    async def drain(self) -> None:
        if self._last is not None and not self._last.done():
            await self._last

    def end(self, data: bytes = b"") -> None:
        self._send({"type": "http.response.body", "body": data, "more_body": False})


async def read_body(receive) -> bytes:
    """`await request.read()`: the whole request body."""
    parts = []
    async for chunk in stream_body(receive):
        parts.append(chunk)
    return b"".join(parts)


async def stream_body(receive):
    """`async for chunk in request.stream()`: the body as it arrives."""
    if receive is None:
        raise RuntimeError("request.read()/stream() are for async handlers; use request.body")
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected("the client disconnected before the body was read")
        if message["body"]:
            yield message["body"]
        if not message.get("more_body"):
            return


async def _write(send, answer: Any) -> None:
    """Send `answer` (a `Response` whose body is a file or an iterator) through `send`."""
    if not isinstance(answer, Response):
        raise TypeError(
            f"a native handler must return a Response, bytes or str, not {type(answer).__name__}"
        )
    body = answer.body
    await send(
        {
            "type": "http.response.start",
            "status": answer.status,
            "headers": list(answer.headers or ()),
        }
    )
    if isinstance(body, FileBody):
        await send({"type": "http.response.pathsend", "path": body.path})
        return
    if hasattr(body, "__aiter__"):
        async for chunk in body:
            await send({"type": "http.response.body", "body": _bytes(chunk), "more_body": True})
    elif hasattr(body, "__iter__"):
        for chunk in body:
            await send({"type": "http.response.body", "body": _bytes(chunk), "more_body": True})
    else:
        raise TypeError(
            f"a response body must be bytes, str, a FileBody or an iterator, not {type(body).__name__}"
        )
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _bytes(chunk: Any) -> bytes:
    return chunk.encode() if isinstance(chunk, str) else chunk


class NativeRunner:
    """What the connection calls for the native interfaces (see `src/http/native.rs`)."""

    pathsend = staticmethod(pathsend)

    def __init__(self, interface: str) -> None:
        self.interface = interface

    async def stream(self, send, answer) -> None:
        """A synchronous handler's answer with a file or iterator body (its own task)."""
        try:
            await _write(send, answer)
        except BaseException as exc:  # noqa: BLE001 - every ending is reported to the connection
            send._failed(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            send._returned(None)

    async def run_async(self, handler, request, receive, send) -> None:
        """An async handler's request, in its task."""
        try:
            if getattr(handler, "__ringloop_wants_writer__", False):
                answer = await handler(request, Writer(send))
            else:
                answer = await handler(request)
            if answer is not None and not send._respond(answer):
                await _write(send, answer)
        except BaseException as exc:  # noqa: BLE001 - every ending is reported to the connection
            send._failed(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            send._returned(None)
