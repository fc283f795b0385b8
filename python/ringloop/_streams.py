"""ringloop's stream transport (TCP and Unix sockets): asyncio's semantics, native I/O.

`StreamTransport` subclasses asyncio's own `_SelectorSocketTransport` so that everything that
is not on the per-read or per-write path — connection setup order (`connection_made`, then
reading, then the waiter), `close`/`abort`/`_fatal_error`/`_call_connection_lost`, `Server`
attach/detach, `eof_received` handling, `pause_reading`/`resume_reading`, flow-control
callbacks, `repr`, the unclosed-transport `ResourceWarning` — is asyncio's code, taken from the
running Python. The per-connection I/O is `_core.StreamIO` (Rust, `src/transport/stream.rs`):

* reading: on io_uring a multishot recv into the loop's provided-buffer ring, whose
  completions the dispatcher hands to `StreamIO._on_recv`; on epoll the fd's reader callback
  `StreamIO._on_readable`, which `recv`s natively. Either way the native side calls
  `data_received` (or `get_buffer`/`buffer_updated`) itself;
* writing: `write`/`writelines` are `StreamIO`'s, bound into the instance so a call goes
  straight to native code; the write buffer, `_conn_lost`, `_eof` and "sendfile in progress"
  live there because the write path checks them on every call.

asyncio's methods read `self._buffer` (for truthiness), `self._conn_lost` and `self._eof`;
here they are properties over the native state, so the inherited code keeps working. The
methods overridden below are the ones that *mutate* the buffer (`_force_close` clears it) or
must tell the native side to report the buffer draining (`close`, `write_eof`, sendfile's
empty waiter) — asyncio's versions do that inside `_write_ready`, which the native flush
replaces.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import sys
from asyncio import BufferedProtocol, constants, selector_events, sslproto, tasks, trsock
from asyncio.log import logger
from typing import NamedTuple

from . import _core, _native_sendfile, _tls_info

_Base = selector_events._SelectorSocketTransport
# 3.15's transports, `_start_serving` and `_accept_connection2` take the protocol's `context`.
_CONTEXT_HOOKS = sys.version_info >= (3, 15)
# 3.13's asyncio.Server keeps its transports (close_clients): _attach/_detach take one.
_ATTACH_TAKES_TRANSPORT = sys.version_info >= (3, 13)
# A TLS connection that fails (bad input, a handshake timeout) is the client's business:
# said at debug, under the server's logger (`ringloop serve --log-level debug` shows it).
_tls_log = logging.getLogger("ringloop.server.tls")


def _native_state(name: str) -> property:
    """An asyncio transport attribute kept in `StreamIO` (the write path reads it)."""
    return property(
        lambda self: getattr(self._io, name),
        lambda self, value: setattr(self._io, name, value),
        doc=f"asyncio's attribute, stored as StreamIO.{name}",
    )


class StreamTransport(_Base):
    """A TCP or Unix-socket transport with native reads and writes (see the module docs)."""

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None, context=None):
        # The protocol's callbacks run in `context` when given (asyncio 3.15 gives every
        # connection one): the native reads and writes are handles in it (StreamIO), and the
        # callbacks asyncio's code schedules take it through `_call_soon` (3.15's base class;
        # before 3.15 asyncio passes no context and `connection_made` runs as it always did).
        io = _core.StreamIO(loop, sock.fileno(), self, context)
        self._io = io
        self._context = context
        self._empty_waiter_fut = None
        # Instance attributes, so the lookups asyncio's code and user code make find the
        # native callables directly (no Python frame in between).
        self._read_ready = io._on_readable
        self.write = io.write
        self.writelines = io.writelines
        # asyncio's __init__ sets the water marks through _set_write_buffer_limits (below),
        # which hands them to `io`.
        if _CONTEXT_HOOKS:
            super().__init__(loop, sock, protocol, waiter, extra, server, context=context)
        elif context is None:
            super().__init__(loop, sock, protocol, waiter, extra, server)
        else:
            # Before 3.15 asyncio's __init__ schedules connection_made with a bare call_soon:
            # it sees a loop whose call_soon passes the context, then the loop itself.
            super().__init__(_WithContext(loop, context), sock, protocol, waiter, extra, server)
            self._loop = loop

    # -- state the native write path owns ------------------------------------------------------

    @property
    def _buffer(self):
        # asyncio's code only tests it for truthiness: the number of unsent bytes does.
        return self._io.buffer_size

    @_buffer.setter
    def _buffer(self, value):
        pass  # _SelectorTransport.__init__ assigns a fresh bytearray; the buffer is native.

    _conn_lost = _native_state("conn_lost")
    _eof = _native_state("eof")

    @property
    def _empty_waiter(self):
        return self._empty_waiter_fut

    @_empty_waiter.setter
    def _empty_waiter(self, fut):
        self._empty_waiter_fut = fut
        self._io.sendfile_busy = fut is not None
        if fut is not None:
            self._io.watch_drain = True

    def set_protocol(self, protocol):
        super().set_protocol(protocol)
        self._io.set_protocol(protocol)

    def get_write_buffer_size(self):
        return self._io.buffer_size

    def _set_write_buffer_limits(self, high=None, low=None):
        super()._set_write_buffer_limits(high, low)
        self._io.set_limits(self._high_water, self._low_water)

    def _maybe_pause_protocol(self):
        super()._maybe_pause_protocol()
        if self._protocol_paused:
            # However it got paused (a write, or a water mark lowered below the buffer), the
            # native flush must call _maybe_resume_protocol once the buffer drains.
            self._io.pause_signalled = True

    # -- TLS in Rust (a server's `_core.TlsConfig`; see src/transport/stream/tls.rs) ---------

    _tls = False
    _tls_timer = None

    def _start_tls(self, config, handshake_timeout):
        if isinstance(self._protocol, BufferedProtocol):
            raise TypeError("ringloop's native TLS serves Protocol, not BufferedProtocol")
        self._io.enable_tls(config)
        self._tls = True
        self._tls_config = config
        # loop.sendfile must read and encrypt, never send the file in the clear.
        self._sendfile_compatible = constants._SendfileMode.FALLBACK
        if handshake_timeout:
            self._tls_timer = self._loop.call_later(handshake_timeout, self._tls_timeout)

    def _tls_timeout(self):
        self._tls_timer = None
        if self._io.tls_handshaking and not self._closing:
            _tls_log.debug("TLS handshake timed out: %s", self._tls_peer())
            self.abort()

    def _tls_peer(self):
        peer = self._extra.get("peername")
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else repr(peer)

    def _tls_failed(self, reason):
        """The TLS session failed (its alert is already queued): close this connection."""
        _tls_log.debug("TLS error from %s: %s", self._tls_peer(), reason)
        if not self._closing:
            self.close()

    def _tls_peer_closed(self):
        """The peer sent close_notify: as asyncio's SSL transport, tell the protocol
        (`eof_received`; its answer cannot keep a TLS connection open) and close, which sends
        our close_notify."""
        if self._closing:
            return
        keep_open = self._eof_received()
        if keep_open is None:
            return
        if keep_open:
            logger.warning("returning true from eof_received() has no effect when using ssl")
        self.close()

    def _eof_received(self):
        """The protocol's `eof_received()`, called as asyncio calls it: its answer, or None
        when it raised (the transport has then failed)."""
        try:
            return bool(self._protocol.eof_received())
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return None

    def get_extra_info(self, name, default=None):
        if self._tls and name in _tls_info.KEYS:
            value = _tls_info.extra_info(self._io, name)
            return default if value is None else value
        if self._tls and name == "sslcontext":
            return self._tls_config
        return super().get_extra_info(name, default)

    # -- edges the native side calls back into --------------------------------------------------

    def _on_drained(self):
        """The write buffer emptied while someone was waiting for it (asyncio's tail of
        `_write_ready`)."""
        if self._empty_waiter is not None and not self._empty_waiter.done():
            self._empty_waiter.set_result(None)
        if self._closing:
            self._call_connection_lost(None)
        elif self._eof and self._sock is not None:
            self._sock.shutdown(socket.SHUT_WR)

    def _write_error(self, exc):
        """A buffered write failed: the buffer is already dropped natively."""
        self._fatal_error(exc, "Fatal write error on socket transport")
        if self._empty_waiter is not None and not self._empty_waiter.done():
            self._empty_waiter.set_exception(exc)

    # -- reading: started and stopped natively ---------------------------------------------------
    # asyncio's code registers `_read_ready` with `_add_reader` and removes it with
    # `self._loop._remove_reader(fd)`. On io_uring the native side reads with a multishot recv
    # instead of a reader callback, so every place that starts or stops reading goes through
    # `StreamIO.start_reading`/`stop_reading`, which pick the mechanism.

    def _add_reader(self, fd, callback, *args):
        if not self.is_reading():
            return
        self._io.start_reading()

    def pause_reading(self):
        if not self.is_reading():
            return
        self._paused = True
        self._io.stop_reading()
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def _read_ready__on_eof(self):
        # asyncio's: with keep_open it removes the reader itself; here the recv has already
        # ended at EOF, and stop_reading records that reading is off.
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        keep_open = self._eof_received()
        if keep_open is None:
            return
        if keep_open:
            self._io.stop_reading()
        else:
            self.close()

    # -- asyncio methods that mutate the buffer or need a drain report -------------------------

    def close(self):
        if self._closing:
            return
        self._io.stop_reading()
        if self._tls:
            self._io.tls_close()  # close_notify, ahead of the socket's close
        super().close()
        if self._io.buffer_size:
            self._io.watch_drain = True

    def write_eof(self):
        super().write_eof()
        if self._eof and self._io.buffer_size:
            self._io.watch_drain = True

    def _force_close(self, exc):
        if self._conn_lost:
            return
        if self._io.buffer_size:
            self._io.clear_writes()
        if not self._closing:
            self._closing = True
            self._io.stop_reading()
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc, context=self._context)

    def _call_connection_lost(self, exc):
        # Before the socket closes: an in-flight recv holds the file (see StreamIO.stop_reading).
        self._io.stop_reading()
        if self._tls_timer is not None:
            self._tls_timer.cancel()
            self._tls_timer = None
        try:
            super()._call_connection_lost(exc)
        finally:
            # Unregisters the writer and breaks the transport <-> StreamIO cycle.
            self._io.detach()


_Sel = selector_events.BaseSelectorEventLoop

# accept() errors that mean "out of resources": asyncio stops accepting for
# ACCEPT_RETRY_DELAY seconds instead of spinning on them.
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# accept() errors about one connection that died in the backlog: skip it, keep serving.
_SKIP_ERRNOS = (errno.EAGAIN, errno.EINTR, errno.ECONNABORTED)


class _Serving(NamedTuple):
    """`_start_serving`'s arguments, in its order: what every accepted connection needs."""

    protocol_factory: object
    sock: socket.socket
    sslcontext: object
    server: object
    backlog: int
    ssl_handshake_timeout: float | None
    ssl_shutdown_timeout: float | None
    # asyncio 3.15's server context: each connection runs in a copy of it.
    context: object = None


class Handover:
    """A loop's listeners handed over to a successor (see "handing a listener over" below):
    one attribute of the loop, so its instance dict, where the C Task looks up `call_soon`
    on every step, stays as small as it was."""

    __slots__ = ("draining", "ending", "listeners", "pending", "settled")

    def __init__(self) -> None:
        self.listeners: set[int] = set()  # listening fds marked by _hand_over_listener
        self.draining: set = set()  # their sockets, once stopped, until the last accept
        self.ending: set = set()  # futures: the last accept of each was delivered
        self.pending = 0  # connections accepted meanwhile and not yet set up
        self.settled = None  # the future _handover_done waits on for them


class StreamTransportsMixin:
    """The loop's factories for stream transports (what `BaseEventLoop` leaves abstract) and
    its accept loop: a multishot accept on io_uring, asyncio's readiness loop on epoll."""

    # -- the accept loop asyncio.Server drives ------------------------------------------------

    def _start_serving(
        self,
        protocol_factory,
        sock,
        sslcontext=None,
        server=None,
        backlog=100,
        ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
        context=None,
    ):
        serving = _Serving(
            protocol_factory,
            sock,
            sslcontext,
            server,
            backlog,
            ssl_handshake_timeout,
            ssl_shutdown_timeout,
            context,
        )
        fd = sock.fileno()
        on_accept = functools.partial(self._on_accepted, serving)
        # Not an int (a test's mock socket): asyncio's path reports it as asyncio would.
        # A listener other processes accept on too (a supervisor's `--fd`/`--uds` workers) is
        # served on readiness: the kernel hands every connection to the oldest multishot accept
        # waiting on it, so one process would get them all, where readiness wakes each.
        shared = fd in self._shared_listeners if isinstance(fd, int) else False
        acceptor = self._native_accept(serving, on_accept) if isinstance(fd, int) else None
        token = None
        if isinstance(fd, int) and not shared:
            token = self._accept_start(fd, acceptor or on_accept)
        if acceptor is not None:
            self._native_accepts[fd] = acceptor
            if token is None:
                # Readiness (epoll, a shared listener): the acceptor is the listener's reader.
                self._add_reader(fd, acceptor._on_readable)
        if token is not None:
            self._accepting[fd] = token
        elif acceptor is None:  # asyncio's accept-on-readiness loop
            if _CONTEXT_HOOKS:
                _Sel._start_serving(self, *serving)
            elif context is not None:
                # Before 3.15 asyncio's loop takes no context: its accepts run in a copy of
                # this one, and so each connection's task (still a copy per connection).
                context.run(_Sel._start_serving, self, *serving[:-1])
            else:
                _Sel._start_serving(self, *serving[:-1])

    _accept_connection = _Sel._accept_connection

    def _native_accept(self, serving, on_accept):
        """The accept's completion handler that sets connections up natively, with no Python
        code (docs/native-accept.md), if the protocol is native; else None. An accept error
        still goes to `on_accept`."""
        tls = serving.sslcontext
        if not (
            getattr(serving.protocol_factory, "_ringloop_native", False)
            and serving.context is None
            and (tls is None or isinstance(tls, _core.TlsConfig))
        ):
            return None
        return _core.NativeAccept(
            self,
            serving.protocol_factory,
            serving.server,
            on_accept,
            tls=tls,
            handshake_timeout=serving.ssl_handshake_timeout if tls is not None else None,
            server_takes_transport=_ATTACH_TAKES_TRANSPORT,
            listener=serving.sock.fileno(),
            backlog=serving.backlog,
        )

    def _stop_serving(self, sock):
        # Python 3.13+ (create_unix_server's cleanup_socket): the path goes with the server
        # if it still names this socket, asyncio's own rule.
        ino = self._unix_server_sockets.pop(sock, None)
        path = sock.getsockname() if ino is not None else None
        fd = sock.fileno()
        token = self._accepting.pop(fd, None)
        handed_over = fd in self._handover.listeners
        self._handover.listeners.discard(fd)
        acceptor = self._native_accepts.pop(fd, None)
        if acceptor is not None:
            # What the accept still delivers: served uncounted if handed over, else closed.
            acceptor.hand_over() if handed_over else acceptor.stop()
        if token is None:
            # Readiness (epoll): nothing was accepted that is not served already; what waits
            # in the listener's queue is the successor's.
            self._remove_reader(fd)
        elif handed_over:
            self._stop_handing_over(sock, token)
        else:
            self._accept_stop(token)
        sock.close()
        if path is not None:
            try:
                if os.stat(path).st_ino == ino:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                logger.error("Unable to clean up listening UNIX socket %r: %r", sock, err)

    # -- handing a listener over ---------------------------------------------------------------
    #
    # A worker being replaced stops accepting while its successor already accepts on the same
    # listening socket (a supervisor's slot, a reloader's listener). On io_uring, the cancel of
    # its multishot accept reaches the kernel a moment after serving stopped, and the
    # connections the kernel handed the accept meanwhile are off the listener's queue: closing
    # them resets clients the successor would have served. A listener marked here has them
    # served instead, by this server's protocol (its connections close after one request when
    # the server is shutting down), and `_handover_done()` waits until the last has arrived.

    def _hand_over_listener(self, sock) -> None:
        """Mark `sock` (before serving it): when serving stops, connections its accept
        already took are served rather than reset (see above)."""
        self._handover.listeners.add(sock.fileno())

    def _stop_handing_over(self, sock, token) -> None:
        ended = self.create_future()

        def then(_none=None) -> None:
            self._handover.draining.discard(sock)
            if not ended.done():
                ended.set_result(None)

        # Recognised in _on_accepted by the socket object: closed by then, its fileno() is -1.
        self._handover.draining.add(sock)
        if self._accept_stop_then(token, then):
            self._handover.ending.add(ended)
            ended.add_done_callback(self._handover.ending.discard)
        else:
            then()

    async def _handover_done(self) -> None:
        """Wait until the accepts of listeners handed over have delivered their last
        connection and every connection accepted meanwhile is set up (its protocol's
        connection_made ran): the server's count of connections is then complete."""
        while self._handover.ending or self._handover.pending:
            if self._handover.ending:
                await tasks.wait(set(self._handover.ending))
                continue
            self._handover.settled = self.create_future()
            await self._handover.settled

    def _accept_connection2(
        self, protocol_factory, conn, extra, sslcontext=None, server=None, *rest, context=None
    ):
        # Called where a connection was accepted, synchronously (asyncio's readiness loop, and
        # _on_accepted): while a listener is handed over, the connection is counted from here
        # until it is set up, so _handover_done cannot miss one whose task has not run yet.
        kw = {"context": context} if context is not None else {}
        if not (self._handover.listeners or self._handover.draining):
            return self._accept_and_set_up(
                protocol_factory, conn, extra, sslcontext, server, *rest, **kw
            )
        self._handover.pending += 1
        return self._counted_accept(protocol_factory, conn, extra, sslcontext, server, *rest, **kw)

    def _accept_and_set_up(self, *args, context=None):
        """asyncio's `_accept_connection2` coroutine, given the connection's context where
        asyncio's own takes none (before 3.15: the transport is made with it here)."""
        if _CONTEXT_HOOKS:
            return _Sel._accept_connection2(self, *args, context=context)
        if context is None:
            return _Sel._accept_connection2(self, *args)
        return _Sel._accept_connection2(_WithContext(self, context), *args)

    async def _counted_accept(self, protocol_factory, conn, extra, sslcontext, server, *rest, **kw):
        try:
            if server is not None and server._sockets is None:
                # Accepted before the server closed, set up after: asyncio's Server._attach
                # asserts it is open, and the connection would be dropped unanswered (its
                # client sees a reset). It is served, uncounted by the closed Server.
                server = None
            return await self._accept_and_set_up(
                protocol_factory, conn, extra, sslcontext, server, *rest, **kw
            )
        finally:
            self._handover.pending -= 1
            settled = self._handover.settled
            if not self._handover.pending and settled is not None and not settled.done():
                settled.set_result(None)

    def _on_accepted(self, serving, res):
        """One completion of the multishot accept: a new connection's fd, or -errno. What
        follows is asyncio's `_accept_connection` for one connection."""
        sock = serving.sock
        handed_over = False
        if res >= 0 and self._accepting.get(sock.fileno()) is None:
            if sock not in self._handover.draining:
                # Accepted by a multishot accept still in flight when serving stopped: nobody
                # will serve it, so close it now (the client sees a reset, not a hang).
                os.close(res)
                return
            handed_over = True  # served after all (see "handing a listener over")
        if res < 0:
            code = -res
            if code in _SKIP_ERRNOS:
                return
            exc = OSError(code, os.strerror(code))
            if code in _RESOURCE_ERRNOS:
                # As asyncio: report, stop accepting, try again after a delay.
                self.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": exc,
                        "socket": trsock.TransportSocket(sock),
                    }
                )
                self._stop_accepting(sock)
                self.call_later(constants.ACCEPT_RETRY_DELAY, self._start_serving, *serving)
                return
            raise exc  # the loop's exception handler logs it; serving goes on
        # The accept set O_NONBLOCK; SOCK_NONBLOCK in the type tells the socket object so
        # (timeout 0.0, as asyncio's accepted sockets have) without another syscall.
        conn = socket.socket(sock.family, sock.type | socket.SOCK_NONBLOCK, sock.proto, fileno=res)
        try:
            addr = conn.getpeername()
        except OSError:
            addr = None  # reset while in the backlog: the transport finds out on first read
        if self._debug:
            logger.debug("%r got a new connection from %r: %r", serving.server, addr, conn)
        # asyncio 3.15: the connection's set-up task and its protocol share one copy of the
        # server's context (a handler's changes stay in its connection).
        conn_context = serving.context.copy() if serving.context is not None else None
        accept = self._accept_connection2(
            serving.protocol_factory,
            conn,
            {"peername": addr},
            serving.sslcontext,
            # A closed asyncio.Server takes no more connections to count.
            None if handed_over else serving.server,
            serving.ssl_handshake_timeout,
            serving.ssl_shutdown_timeout,
            context=conn_context,
        )
        self.create_task(accept, context=conn_context)

    def _stop_accepting(self, sock):
        fd = sock.fileno()
        acceptor = self._native_accepts.pop(fd, None)
        if acceptor is not None:
            acceptor.stop()
        token = self._accepting.pop(fd, None)
        if token is not None:
            self._accept_stop(token)
        elif acceptor is not None:
            self._remove_reader(fd)  # a native acceptor on readiness

    async def sendfile(self, transport, file, offset=0, count=None, *, fallback=True):
        if type(transport) is _core.NativeTransport:
            # A natively accepted connection (pathsend, wsgi.file_wrapper, static files):
            # sendfile(2) in the clear, read and write (and encrypt) under TLS.
            return await _native_sendfile.sendfile(self, transport, file, offset, count)
        return await super().sendfile(transport, file, offset, count, fallback=fallback)

    def _make_socket_transport(
        self, sock, protocol, waiter=None, *, extra=None, server=None, context=None
    ):
        return StreamTransport(self, sock, protocol, waiter, extra, server, context)

    def _make_ssl_transport(
        self,
        rawsock,
        protocol,
        sslcontext,
        waiter=None,
        *,
        server_side=False,
        server_hostname=None,
        extra=None,
        server=None,
        ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT,
        context=None,
    ):
        if isinstance(sslcontext, _core.TlsConfig):
            # The server's TLS in Rust (rustls): the native transport decrypts and encrypts;
            # the protocol sees plaintext. Reads start only after `enable_tls` (call_soon).
            transport = StreamTransport(self, rawsock, protocol, waiter, extra, server, context)
            transport._start_tls(sslcontext, ssl_handshake_timeout)
            return transport
        # TLS is the stdlib's SSLProtocol (a BufferedProtocol) over the native transport.
        ssl_protocol = sslproto.SSLProtocol(
            self,
            protocol,
            sslcontext,
            waiter,
            server_side,
            server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        StreamTransport(self, rawsock, ssl_protocol, extra=extra, server=server, context=context)
        return ssl_protocol._app_transport


class _WithContext:
    """The loop, seen by asyncio's code before 3.15, which passes no context: the transport's
    `__init__` (its `call_soon`) and `_accept_connection2` (the transport factories) get
    `context`; everything else is the loop's."""

    __slots__ = ("_loop", "_context")

    def __init__(self, loop, context) -> None:
        self._loop = loop
        self._context = context

    def __getattr__(self, name):
        return getattr(self._loop, name)

    def call_soon(self, callback, *args, context=None):
        return self._loop.call_soon(callback, *args, context=self._context)

    def _make_socket_transport(self, *args, **kw):
        return self._loop._make_socket_transport(*args, **kw, context=self._context)

    def _make_ssl_transport(self, *args, **kw):
        return self._loop._make_ssl_transport(*args, **kw, context=self._context)
