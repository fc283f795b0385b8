"""The Unix-socket entry points and sendfile hand-off for `ringloop.Loop`, from asyncio.

The stream transports (TCP, Unix sockets), the accept loop (`_streams.py`) and UDP
(`_datagrams.py`) are ringloop's own, over native I/O. What is still asyncio's, taken by reference so it
always matches the installed Python (3.11 here; 3.12+ keep their own versions of the same
hooks), and running on ringloop's native fd watchers:

* `_sendfile_native`: `loop.sendfile()` on a stream transport; it hands the socket to
  `sock_sendfile`, whose `_sock_sendfile_native` is ringloop's own (`_sockops`). It uses the
  transport's `_make_empty_waiter`/`_reset_empty_waiter`, which `StreamTransport` keeps.
* `create_unix_connection` / `create_unix_server`: argument handling for Unix sockets; they
  end in the stream transport factories.

What the borrowed code reaches for on the loop, besides the public API:

* `_add_reader`/`_remove_reader`/`_add_writer`/`_remove_writer`: aliased onto the native fd
  watchers by `_pipes.PipesMixin` (unchecked, as asyncio's are; the public `add_reader` & co
  check `_transports` first, in `loop.py`).
* `_transports` (fd -> transport held weakly, a `_core.TransportMap` made in `Loop.__init__`:
  asyncio's `WeakValueDictionary` in Rust): every
  transport registers itself there, so `_ensure_fd_no_transport` makes `sock_*` and the public
  fd watchers refuse an fd a transport owns, as asyncio does.
* `_selector`: read only by the transports' `__repr__`, which asks `get_key(fd).events` to
  print `read=polling`/`write=<idle, ...>`. ringloop has no selector; `_SelectorView` answers
  that one question from the native watcher table (`_fd_callbacks`), and is `None` on a closed
  loop, as asyncio's selector is. A stream transport reading with a multishot recv on io_uring
  has no reader callback; its native `reading` flag answers for it, so its repr says
  `read=polling` as on asyncio.
"""

from __future__ import annotations

import selectors
from asyncio import selector_events, unix_events

_Sel = selector_events.BaseSelectorEventLoop
_Unix = unix_events._UnixSelectorEventLoop


class _SelectorView:
    """The one corner of a `selectors.BaseSelector` that asyncio's selector transports read
    (`get_key`, from `_SelectorTransport.__repr__`), answered from the native watchers."""

    __slots__ = ("_loop",)

    def __init__(self, loop) -> None:
        self._loop = loop

    def get_key(self, fileobj) -> selectors.SelectorKey:
        fd = selectors._fileobj_to_fd(fileobj)
        reader, writer = self._loop._fd_callbacks(fd)
        io = getattr(self._loop._transports.get(fd), "_io", None)
        reading = reader is not None or bool(getattr(io, "reading", False))
        events = (selectors.EVENT_READ if reading else 0) | (
            selectors.EVENT_WRITE if writer is not None else 0
        )
        if not events:
            raise KeyError(f"{fileobj!r} is not registered")
        return selectors.SelectorKey(fileobj, fd, events, (reader, writer))


class SelectorTransportsMixin:
    """asyncio's sendfile hand-off and Unix-socket entry points for `Loop` (see the module
    docstring)."""

    # -- transport factories (what BaseEventLoop leaves abstract) -----------------------------

    # -- loop.sendfile() on a socket transport ----------------------------------------------

    _sendfile_native = _Sel._sendfile_native

    # -- Unix sockets -------------------------------------------------------------------------

    create_unix_connection = _Unix.create_unix_connection
    create_unix_server = _Unix.create_unix_server

    # -- what the borrowed transports read ----------------------------------------------------

    @property
    def _selector(self) -> _SelectorView | None:
        # None once closed, as on asyncio (its close() drops the selector): the pipe
        # transports' __repr__ tests for that and then prints "open" instead of polling state.
        return None if self.is_closed() else _SelectorView(self)
