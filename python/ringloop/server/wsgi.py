"""WSGI (PEP 3333) on ringloop's server: applications run in a bounded thread pool, because
they block by nature; the connection stays on the loop thread.

Per request the connection hands the pool (native: src/http/wsgi_pool.rs) the native `Request`
and the cycle's `receive`/`send` (the same the ASGI path uses). A worker thread builds the
environ, runs the application with a native `start_response` (src/http/wsgi_start.rs) and hands
a response known whole (a list or tuple of `bytes`) back to the loop in batches; what streams
is done here, talking to the loop with `call_soon_threadsafe`:
- `wsgi.input` is streamed, not pre-read: a read the buffer cannot satisfy asks the loop for
  the next piece of body (`receive`) and waits for it;
- the head is sent with the first non-empty chunk (or when the iterable ends), as PEP 3333
  says; a body given as a list or tuple of `bytes` (most frameworks') goes out in one message
  with its length known, so it gets `content-length` and no chunked framing;
- chunks of an iterated body wait for the transport's buffer to drain below its high-water
  mark before the next is pulled (memory stays bounded whatever the app yields);
- `write()` from `start_response` works; the iterable's `close()` is always called;
- `wsgi.file_wrapper` wraps a file; returned as the body, it is sent with `sendfile`.

An exception before the head was sent is answered with a 500, after it by closing the
connection; both are logged with the traceback, and neither stops the server.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import deque
from typing import Any

from .._core import WsgiPool


class FileWrapper:
    """`wsgi.file_wrapper`: iterates a file in blocks; the bridge sends it with `sendfile`."""

    def __init__(self, filelike, blksize: int = 8192) -> None:
        self.filelike = filelike
        self.blksize = blksize
        if hasattr(filelike, "close"):
            self.close = filelike.close

    def __iter__(self):
        while block := self.filelike.read(self.blksize):
            yield block


class _Input:
    """`wsgi.input`: the request body, pulled from the loop as the application reads.

    The pieces `receive` gave are kept as they are and cut only when read: a read that matches
    a piece returns it as is, any other copies its bytes once.
    """

    def __init__(self, bridge: WSGIBridge, receive, has_body: bool) -> None:
        self._bridge = bridge
        self._receive = receive
        self._parts: deque[bytes] = deque()
        self._head = 0  # bytes of _parts[0] already read
        self._size = 0  # bytes buffered and not read
        self._done = not has_body

    def _more(self, want: int = 1) -> bool:
        """Pull at least `want` more bytes (fewer at the end of the body): one trip to the loop
        and back however many pieces that takes there, since the trip, not the copy, is what
        costs (a thread handoff each way)."""
        if self._done:
            return False
        parts, more = self._bridge.call(_receive_some, self._receive, want)
        for part in parts:
            self._parts.append(part)
            self._size += len(part)
        if not more:
            self._done = True
        return bool(parts) or more

    def _take(self, n: int) -> bytes:
        """The next `n` buffered bytes (`n` <= what is buffered)."""
        if n <= 0:
            return b""
        first = self._parts[0]
        head = self._head
        if head == 0 and n == len(first):
            self._parts.popleft()
            self._size -= n
            return first
        if head + n <= len(first):
            out = first[head : head + n]
            self._advance(n)
            return out
        pieces = []
        left = n
        for part in self._parts:
            view = memoryview(part)[head:]
            head = 0
            pieces.append(view[:left])
            left -= len(pieces[-1])
            if not left:
                break
        out = b"".join(pieces)
        self._advance(n)
        return out

    def _advance(self, n: int) -> None:
        self._size -= n
        while n:
            first = self._parts[0]
            rest = len(first) - self._head
            if n < rest:
                self._head += n
                return
            n -= rest
            self._parts.popleft()
            self._head = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            while self._more(1 << 62):
                pass
            return self._take(self._size)
        while self._size < size and self._more(size - self._size):
            pass
        return self._take(min(size, self._size))

    def _newline(self) -> int:
        """Bytes up to and including the first buffered newline, or -1."""
        offset = 0
        head = self._head
        for part in self._parts:
            i = part.find(b"\n", head)
            if i >= 0:
                return offset + i - head + 1
            offset += len(part) - head
            head = 0
        return -1

    def readline(self, size: int = -1) -> bytes:
        while True:
            n = self._newline()
            if n >= 0 and (size < 0 or n <= size):
                return self._take(n)
            if 0 <= size <= self._size or not self._more():
                return self._take(self._size if size < 0 else min(size, self._size))

    def readlines(self, hint: int = -1) -> list[bytes]:
        lines = []
        total = 0
        while line := self.readline():
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:  # as io's readlines: hint <= 0 means no limit
                break
        return lines

    def __iter__(self):
        while line := self.readline():
            yield line


class _NoBody:
    """`wsgi.input` of a request without a body: always at its end, so one serves them all."""

    def read(self, size: int = -1) -> bytes:
        return b""

    def readline(self, size: int = -1) -> bytes:
        return b""

    def readlines(self, hint: int = -1) -> list[bytes]:
        return []

    def __iter__(self):
        return iter(())


_NO_BODY = _NoBody()


async def _receive_some(receive, want: int) -> tuple[list[bytes], bool]:
    """Body pieces until `want` bytes or the end: (pieces, whether more may come)."""
    parts: list[bytes] = []
    size = 0
    while size < want:
        message = await receive()
        if message["type"] == "http.disconnect":
            return parts, False
        body = message.get("body", b"")
        if body:
            parts.append(body)
            size += len(body)
        if not message.get("more_body"):
            return parts, False
    return parts, True


def _environ_template(multiprocess: bool) -> dict[str, Any]:
    """The environ keys every request shares; the rest are the request's own
    (`Request::wsgi_environ`, in src/http/wsgi.rs: strings are latin-1 "bytes as str")."""
    return {
        "wsgi.version": (1, 0),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
        "wsgi.file_wrapper": FileWrapper,
    }


def _head_message(start, send) -> dict:
    """The `http.response.start` message of the head `start` recorded (marked sent)."""
    status, headers = start._take_head()
    return {"type": "http.response.start", "status": status, "headers": send._wsgi_headers(headers)}


async def _send_all(send, messages) -> None:
    for m in messages:
        await send(m)


def _send_now(send, messages) -> None:
    """Send without waiting for the buffer to drain (the response's last messages)."""
    try:
        for m in messages:
            send(m)
    except OSError:
        pass  # the client is gone (ClientDisconnected): nothing left to tell it


class WSGIBridge:
    """A bounded pool of threads that run a WSGI application for the loop's connections.

    The pool itself is native (`WsgiPool`, src/http/wsgi_pool.rs): it queues the requests,
    builds the environ, calls the application with a native `start_response` and writes a
    response known whole. What it hands back here is what streams: `wsgi.input` with a body,
    `write()`, an iterated body, `wsgi.file_wrapper`.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, threads: int, multiprocess: bool = False
    ) -> None:
        self.loop = loop
        self.multiprocess = multiprocess
        self._pool = WsgiPool(loop, _environ_template(multiprocess), self, _NO_BODY)
        # What the connection calls, on the loop thread, per request: (app, request, receive,
        # send) straight into the native queue.
        self.submit = self._pool.submit
        self._threads = [
            threading.Thread(target=self._pool.work, name=f"ringloop-wsgi-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def shutdown(self) -> None:
        self._pool.shutdown()

    # -- worker side: called by the native pool ---------------------------------------------------

    def call(self, fn, *args):
        """Run coroutine function `fn(*args)` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop).result()

    def _input(self, receive) -> _Input:
        """`wsgi.input` of a request with a body."""
        return _Input(self, receive, True)

    def _write(self, start, send, data) -> None:
        """PEP 3333's `write()` callable, and each chunk of an iterated body: the head (the
        first time) and `data`, on the loop before this returns."""
        if not data:
            return
        messages = [] if start.head_sent else [_head_message(start, send)]
        messages.append({"type": "http.response.body", "body": bytes(data), "more_body": True})
        self.call(_send_all, send, messages)

    def _last(self, start, send, last: bytes = b"") -> None:
        # The last message needs no answer: the worker moves on to the next request.
        if not start.head_sent:
            status, headers = start._take_head()
            # The whole response in one native call on the loop (src/http/wsgi.rs).
            self.loop.call_soon_threadsafe(send._wsgi_respond, status, headers, last)
            return
        messages = [{"type": "http.response.body", "body": last, "more_body": False}]
        self.loop.call_soon_threadsafe(_send_now, send, messages)

    def _finish(self, start, result, send) -> None:
        """The response of `result`, which the native pool did not send whole."""
        if isinstance(result, FileWrapper) and hasattr(result.filelike, "fileno"):
            self.call(_send_file, send, _head_message(start, send), result.filelike)
            return
        if isinstance(result, (list, tuple)) and len(result) <= 1:
            self._last(start, send, bytes(result[0]) if result else b"")
            return
        for chunk in result:
            self._write(start, send, chunk)
        self._last(start, send)

    def _close_failed(self, exc: BaseException) -> None:
        from .logs import error

        error("Exception closing a WSGI response", exc)


async def _send_file(send, head, f) -> None:
    """A `wsgi.file_wrapper` body: its size as the length, its bytes sent by the request's
    stream (`send._sendfile`: `sendfile` on cleartext, read and encrypted over TLS)."""
    import os

    size = os.fstat(f.fileno()).st_size - f.tell()
    await send(head)
    if send._pathsend_head(size) and size:
        await send._sendfile(f, f.tell(), size)
    send._pathsend_done()
