"""`loop.sendfile` on a natively accepted connection's transport (`_core.NativeTransport`).

asyncio's `loop.sendfile` asks the transport for its `_sendfile_compatible` mode and then
works on its `_sock`, its selector registration and an empty-buffer waiter; a native
transport has none of those as Python attributes, so this is the same two paths, on what it
has instead:

* in the clear, asyncio's `_sendfile_native`: the transport's fd leaves `loop._transports`
  for the transfer, reading is paused, its writes are refused (`StreamIO.sendfile_busy`, as
  asyncio's "sendfile is in progress"), the buffer is waited empty (`_empty()`), then
  `loop.sock_sendfile` (sendfile(2)) on the transport's own socket object; a file that is not
  a regular one goes the fallback's way;
* under TLS, asyncio's fallback: read, write (encrypted by the transport), and wait while the
  buffer is above its high-water mark (`_drained()`), never the file sent in the clear.

Either way the file's position ends past what was sent, as asyncio leaves it.
"""

from __future__ import annotations

import os
from asyncio import exceptions

# One read of a file the fallback sends.
_BLOCK = 256 * 1024


async def sendfile(loop, transport, file, offset: int, count: int | None) -> int:
    """`loop.sendfile(transport, file, offset, count)` for a `_core.NativeTransport`."""
    if transport.is_closing():
        raise RuntimeError("Transport is closing")
    if not transport._tls:
        try:
            return await _zero_copy(loop, transport, file, offset, count)
        except exceptions.SendfileNotAvailableError:
            pass  # not a regular file (raised before anything was sent)
    return await _read_and_write(transport, file, offset, count)


async def _zero_copy(loop, transport, file, offset, count):
    sock = transport.get_extra_info("socket")._sock  # detached by the transport at its close
    fd = sock.fileno()
    io = transport._io
    # sock_sendfile refuses an fd a transport owns (asyncio takes it out the same way).
    loop._transports.pop(fd, None)
    resume_reading = transport.is_reading()
    transport.pause_reading()
    io.sendfile_busy = True
    try:
        empty = transport._empty()
        if empty is not None:
            await empty
        if transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        return await loop.sock_sendfile(sock, file, offset, count, fallback=False)
    finally:
        io.sendfile_busy = False
        if resume_reading:
            transport.resume_reading()
        if sock.fileno() != -1:  # still the transport's fd (not closed meanwhile)
            loop._transports[fd] = transport


async def _read_and_write(transport, file, offset, count):
    if transport.is_closing():
        raise RuntimeError("Transport is closing")
    fd = file.fileno()
    sent = 0
    try:
        while count is None or sent < count:
            want = _BLOCK if count is None else min(_BLOCK, count - sent)
            data = os.pread(fd, want, offset + sent)
            if not data:
                break
            if transport.is_closing():
                raise ConnectionError("Connection closed by peer")
            transport.write(data)
            sent += len(data)
            drained = transport._drained()
            if drained is not None:
                await drained
        return sent
    finally:
        if sent:
            file.seek(offset + sent)
