"""Network transports for `ringloop.Loop`, borrowed from asyncio: an *interim* layer.

**Interim.** ringloop's own TCP, Unix-socket and UDP transports are native (Rust, on the
ring's multishot accept/recv; see DESIGN.md, `src/transport/`) and come in a dedicated step
of the transports issue. When they land, they replace the TCP/Unix/UDP parts of this module
(`_make_socket_transport`, `_make_datagram_transport` and the accept path). Until then this
mixin makes every network API of asyncio work on ringloop, correctly, by running asyncio's own
selector transports over ringloop's native fd watchers. It copies no asyncio code: every
function below is the running Python's own, taken by reference, so it always matches the
installed asyncio (3.11 here; 3.12+ keep their own versions of the same hooks).

What `BaseEventLoop` leaves abstract, and this mixin fills in as `BaseSelectorEventLoop`
(and, for the two Unix-socket entry points, `_UnixSelectorEventLoop`) does:

* `_make_socket_transport` / `_make_ssl_transport` / `_make_datagram_transport`: the factories
  `create_connection`, `create_server`, `connect_accepted_socket`, `create_datagram_endpoint`
  and `start_tls` end in. They build `selector_events._SelectorSocketTransport` and
  `_SelectorDatagramTransport`; SSL is `sslproto.SSLProtocol` over the socket transport, as on
  stock asyncio (and as DESIGN.md plans for the native transports too).
* `_start_serving` / `_accept_connection` / `_accept_connection2` / `_stop_serving`: the accept
  loop that `asyncio.Server` drives (`start_serving`, `serve_forever`, `close`).
* `_sendfile_native`: `loop.sendfile()` on a socket transport; it hands the socket to
  `sock_sendfile`, whose `_sock_sendfile_native` is ringloop's own (`_sockops`).
* `create_unix_connection` / `create_unix_server`.

What the borrowed transports reach for on the loop, besides the public API:

* `_add_reader`/`_remove_reader`/`_add_writer`/`_remove_writer`: aliased onto the native fd
  watchers by `_pipes.PipesMixin`. asyncio's versions return the `Handle`; ringloop's return
  `None`, and no borrowed transport code uses the return value (only the selector loop's own
  `sock_*` coroutines do, which ringloop does not borrow).
* `_transports` (fd -> transport, a `WeakValueDictionary` made in `Loop.__init__`): every
  selector transport registers itself there, so `_ensure_fd_no_transport` (asyncio's,
  borrowed in loop.py) makes the `sock_*` calls refuse an fd a transport owns, as asyncio does.
* `_selector`: read only by the transports' `__repr__`, which asks `get_key(fd).events` to
  print `read=polling`/`write=<idle, ...>` (the pipe transports do the same, through
  `getattr(loop, "_selector", None)`). ringloop has no selector; `_SelectorView` answers that
  one question from the native watcher table (`_fd_callbacks`), and is `None` on a closed
  loop, as asyncio's selector is.

Not provided here: the public `add_reader`/`add_writer` refuse an fd owned by a transport on
stock asyncio (`_ensure_fd_no_transport`); the native ones do not check yet. No borrowed code
path depends on that refusal (the transports register through the unchecked `_add_*`), so
this layer leaves it to the native side.
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
        events = (selectors.EVENT_READ if reader is not None else 0) | (
            selectors.EVENT_WRITE if writer is not None else 0
        )
        if not events:
            raise KeyError(f"{fileobj!r} is not registered")
        return selectors.SelectorKey(fileobj, fd, events, (reader, writer))


class SelectorTransportsMixin:
    """asyncio's selector network transports and server plumbing for `Loop`; interim, see the
    module docstring."""

    # -- transport factories (what BaseEventLoop leaves abstract) -----------------------------

    _make_datagram_transport = _Sel._make_datagram_transport

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
