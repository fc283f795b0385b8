"""ringloop's UDP transport: asyncio's semantics, native reads and sends.

`DatagramTransport` subclasses asyncio's own `_SelectorDatagramTransport`, so buffering,
flow control, `close`/`abort`, `connection_lost` and error reporting are asyncio's code. The
per-datagram work is `_core.DatagramIO` (Rust, `src/transport/datagram.rs`):

* reading is `DatagramIO.start_reading`/`stop_reading`: on io_uring a multishot `recvmsg`
  into the loop's datagram buffer ring (one completion per datagram, no syscall), on epoll a
  native reader callback doing `recvfrom`; either way the address is built as the socket
  module builds it, then `datagram_received(data, addr)`. asyncio starts reading through
  `_add_reader(fd, _read_ready)` and stops it with `_remove_reader(fd)`; the overrides below
  route exactly those calls to `DatagramIO`;
* `sendto` first offers the datagram to `DatagramIO.send_fast`, which sends it at once when
  nothing is buffered and the address is numeric (or the socket connected); anything else —
  host names, a full kernel buffer, bad arguments — goes to asyncio's `sendto`, which raises,
  buffers or reports exactly as on stock asyncio.

IPv4 and IPv6 only: a Unix datagram socket keeps asyncio's transport (its addresses are paths
whose decoding the socket module owns).
"""

from __future__ import annotations

import socket
from asyncio import selector_events

from . import _core

_Base = selector_events._SelectorDatagramTransport


class DatagramTransport(_Base):
    """A UDP transport with native reads and sends (see the module docs)."""

    def __init__(self, loop, sock, protocol, address=None, waiter=None, extra=None):
        self._io = _core.DatagramIO(loop, sock.fileno(), self)
        super().__init__(loop, sock, protocol, address, waiter, extra)

    def _add_reader(self, fd, callback, *args):
        # asyncio's __init__ schedules _add_reader(fd, _read_ready): start native reading.
        if fd == self._sock_fd and callback == self._read_ready and not args:
            if not self._closing:
                self._io.start_reading()
            return
        super()._add_reader(fd, callback, *args)

    def close(self):
        if self._closing:
            return
        self._io.stop_reading()
        super().close()

    def _force_close(self, exc):
        if not self._closing:
            self._io.stop_reading()
        super()._force_close(exc)

    def set_protocol(self, protocol):
        super().set_protocol(protocol)
        self._io.set_protocol(protocol)

    def sendto(self, data, addr=None):
        if not self._buffer and not self._conn_lost:
            if self._extra["peername"]:
                # Connected: asyncio sends with send() (after checking addr against _address).
                if (addr is None or addr == self._address) and self._io.send_fast(data):
                    return
            elif addr is not None and not self._address and self._io.send_fast(data, addr):
                return
        super().sendto(data, addr)

    def _call_connection_lost(self, exc):
        # Before the socket closes: an in-flight recvmsg holds the file.
        self._io.stop_reading()
        try:
            super()._call_connection_lost(exc)
        finally:
            self._io.detach()  # breaks the transport <-> DatagramIO cycle


class DatagramTransportsMixin:
    """The loop's factory for UDP transports (what `BaseEventLoop` leaves abstract)."""

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            return DatagramTransport(self, sock, protocol, address, waiter, extra)
        return _Base(self, sock, protocol, address, waiter, extra)
