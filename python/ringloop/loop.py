"""`ringloop.Loop`: the Python half of the event loop.

The class stacks three layers, first match wins:

1. `_core.LoopCore` (Rust): the hot path — `call_soon*`, `call_later`, `call_at`, `time`,
   `add_reader`/`add_writer`, the ready queue, the timer heap and the dispatcher.
2. ringloop's Python mixins, on top of the native fd callbacks: socket operations
   (`_sockops`), signals (`_signals`), pipes and subprocesses (`_pipes`), the stream
   transports and accept loop (`_streams`, native I/O), UDP (`_datagrams`, native I/O), and
   the few asyncio pieces still borrowed as they are (`_nettransports`).
3. `asyncio.BaseEventLoop`: semantics asyncio already gets right and that are not hot —
   `run_until_complete`, tasks and futures (CPython's C `Task`/`Future`), the exception
   handler, executors, `getaddrinfo`, async-generator shutdown, `sendfile` fallbacks.

`BaseEventLoop.__init__` runs unchanged; the attributes it sets that the native core owns
(`_closed`, `_stopping`, `_debug`, `slow_callback_duration`) are native properties, and the
Python queues it creates (`_ready`, `_scheduled`) are deleted so that any code path still
reaching for them fails loudly instead of silently queueing into a list nobody runs.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from asyncio import base_events, events, selector_events
from asyncio.log import logger

from . import _core
from ._datagrams import DatagramTransportsMixin
from ._handles import callback_source
from ._nettransports import SelectorTransportsMixin
from ._pipes import PipesMixin
from ._signals import SignalMixin
from ._sockops import SockOpsMixin
from ._streams import Handover, StreamTransportsMixin


class Loop(
    _core.LoopCore,
    SockOpsMixin,
    SignalMixin,
    PipesMixin,
    StreamTransportsMixin,
    DatagramTransportsMixin,
    SelectorTransportsMixin,
    base_events.BaseEventLoop,
):
    """A drop-in asyncio event loop on io_uring (or epoll).

    `Loop(backend=None)` picks `RINGLOOP_BACKEND` or probes io_uring and falls back to epoll;
    `loop.backend` says which one runs and `loop.backend_fallback_reason` why, if it fell back.

    `Loop(thread_bound=True)` promises that the loop only ever runs on one thread (the first
    that runs it; it may be made, changed and closed from others). On io_uring (kernel 6.1+)
    that allows a single-issuer ring whose completion work runs in batches, measurably
    cheaper per request; running it on a second thread then raises `RuntimeError`.
    `ringloop.run()` makes its loop thread-bound. The default, like asyncio, runs anywhere.
    """

    def __init__(self, *, backend: str | None = None, thread_bound: bool = False) -> None:
        base_events.BaseEventLoop.__init__(self)
        # The native core owns the queues; see the module docstring.
        del self._ready
        del self._scheduled
        # fd -> transport, held weakly, for _ensure_fd_no_transport: asyncio's
        # WeakValueDictionary in Rust (a native connection registers with no Python run).
        self._transports = _core.TransportMap()
        # listening fd -> token of its multishot accept (io_uring; see _streams).
        self._accepting = {}
        # listening fd -> its _core.NativeAccept, for the listeners served natively.
        self._native_accepts = {}
        # Listening fds other processes accept on too: served on readiness (see _streams).
        self._shared_listeners = set()
        # Listeners handed over to a successor (see _streams).
        self._handover = Handover()
        # Python 3.13+: listening Unix socket -> its path's inode, filled by the borrowed
        # create_unix_server(cleanup_socket=True) and emptied by _stop_serving.
        self._unix_server_sockets = {}
        SignalMixin._init_signals(self)
        # CPython 3.11's C Task looks up `loop.call_soon` as an attribute on every step, which
        # builds (and frees) a bound-method object each time; with one bound once into the
        # instance dict, the lookup finds it there and allocates nothing.
        self.call_soon = self.call_soon

    if hasattr(events, "_ThreadSafeHandle"):  # 3.14+

        def call_soon_threadsafe(self, callback, *args, context=None):
            """asyncio 3.14's contract: the handle is an `events._ThreadSafeHandle`, whose
            `cancel()`/`cancelled()` from another thread wait for a callback already running
            (its lock), and whose `_run` re-checks cancellation under that lock. The native
            queue runs that `_run`; before 3.14 the native handle is returned as it is."""
            self._check_closed()
            if self._debug:
                self._check_callback(callback, "call_soon_threadsafe")
            elif not callable(callback):
                raise TypeError(
                    f"a callable object was expected by call_soon_threadsafe(), got {callback!r}"
                )
            handle = events._ThreadSafeHandle(callback, args, self, context)
            if handle._source_traceback:
                del handle._source_traceback[-1]
            _core.LoopCore.call_soon_threadsafe(self, handle._run)
            return handle

    def _share_listener(self, sock) -> None:
        """Mark `sock` as a listener other processes accept on too (before serving it): it is
        then accepted on readiness, which spreads connections over the processes."""
        self._shared_listeners.add(sock.fileno())

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} backend={self.backend} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    # -- running ---------------------------------------------------------------------------

    def run_forever(self) -> None:
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        old_agen_hooks = sys.get_asyncgen_hooks()
        try:
            self._thread_id = threading.get_ident()
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook,
                finalizer=self._asyncgen_finalizer_hook,
            )
            events._set_running_loop(self)
            self._run_forever_native()
        finally:
            self._stopping = False
            self._thread_id = None
            events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_agen_hooks)

    def close(self) -> None:
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        self._close_signals()
        self._close_native()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)

    # -- name resolution ----------------------------------------------------------------------

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        """asyncio's getaddrinfo, with a fast path: a numeric host (or none) and a numeric
        port are resolved inline with AI_NUMERICHOST, which never touches DNS, so no thread
        hop to the executor is needed. Anything else (and debug mode, which logs the
        resolution) goes to asyncio's executor-based implementation."""
        if not self._debug and _numeric(host) and _numeric_port(port):
            try:
                return socket.getaddrinfo(
                    host, port, family, type, proto, flags | socket.AI_NUMERICHOST
                )
            except socket.gaierror:
                pass  # e.g. an address family this host lacks: let the slow path report it
        return await super().getaddrinfo(
            host, port, family=family, type=type, proto=proto, flags=flags
        )

    # -- called by the native dispatcher ----------------------------------------------------

    def _callback_error(self, handle, exc: BaseException) -> None:
        """A callback raised: report it like asyncio's `Handle._run` does."""
        cb = callback_source(handle._callback, handle._args)
        context = {
            "message": f"Exception in callback {cb}",
            "exception": exc,
            "handle": handle,
        }
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    def _log_slow_callback(self, handle, dt: float) -> None:
        """Debug mode: the warning asyncio logs for a callback slower than
        `slow_callback_duration`."""
        fmt = getattr(base_events, "_format_handle", str)
        # Through `base_events.logger`, as asyncio's `_run_once` does, so that whoever patches
        # it (CPython's test_log_slow_callbacks, log-capturing tools) sees this warning too.
        base_events.logger.warning("Executing %s took %.3f seconds", fmt(handle), dt)

    # -- transports bookkeeping (sock_* and the transports check fds against _transports) ----

    # asyncio's own check, taken by reference like the transport code in _nettransports.py,
    # so its behaviour and messages track the running Python.
    _ensure_fd_no_transport = selector_events.BaseSelectorEventLoop._ensure_fd_no_transport

    # The public fd-watcher API refuses an fd a live transport owns, as asyncio's does (a
    # reader callback on a transport's socket would steal its data): asyncio's methods, which
    # check `_transports` and then call `_add_reader` & co, here the unchecked native watchers
    # the transports register through (`_pipes.PipesMixin`).
    add_reader = selector_events.BaseSelectorEventLoop.add_reader
    remove_reader = selector_events.BaseSelectorEventLoop.remove_reader
    add_writer = selector_events.BaseSelectorEventLoop.add_writer
    remove_writer = selector_events.BaseSelectorEventLoop.remove_writer


def _numeric(host) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        try:
            host = host.decode("idna")
        except UnicodeError:
            return False
    if not isinstance(host, str):
        return False
    try:
        ipaddress.ip_address(host.partition("%")[0])  # allow IPv6 scope ids: fe80::1%eth0
    except ValueError:
        return False
    return True


def _numeric_port(port) -> bool:
    if port is None or isinstance(port, int):
        return True
    if isinstance(port, bytes):
        port = port.decode("ascii", "replace")
    return isinstance(port, str) and port.isdigit()


def new_event_loop(*, backend: str | None = None, thread_bound: bool = False) -> Loop:
    """A new `Loop` (what `asyncio.Runner(loop_factory=...)` wants; see `Loop` for the
    arguments)."""
    return Loop(backend=backend, thread_bound=thread_bound)
