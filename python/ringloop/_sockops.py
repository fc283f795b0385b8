"""asyncio's low-level socket API (`loop.sock_*`) on ringloop's native fd callbacks.

Every operation follows the same shape, which is asyncio's selector-loop contract:

1. Try the syscall at once. Most calls on a live connection succeed without waiting, and
   skipping the wait saves a reactor round trip and a future.
2. Only on `BlockingIOError`/`InterruptedError`, register a native reader or writer that retries
   the call on readiness, and await a future. The future's done-callback unregisters the fd, so
   completion, failure and cancellation all leave the loop clean.

Invariants the code below relies on:

- An fd has at most one reader and one writer; registering a new one cancels the old `Handle`
  (native `add_reader`/`add_writer`). So a done-callback may only unregister the fd if *its own*
  handle is still live: after a cancelled `sock_recv`, a new `sock_recv` on the same socket has
  usually registered before the old future's done-callbacks run, and removing blindly would
  strand the new one.
- A readiness callback can run after its future was cancelled (cancellation is seen one
  iteration later); it must then do nothing, above all not consume data or a connection.
- Whoever stores an exception in a future clears its own reference to that future, because the
  exception's traceback holds the frame, the frame holds the future, and the future holds the
  exception: a cycle only the GC would free (asyncio does the same with `fut = None`).

Unlike asyncio, which checks it only in debug mode, a blocking socket is always refused: one
blocking `recv` would stall every task on the loop.
"""

from __future__ import annotations

import errno
import io
import os
import socket
import stat
from asyncio import exceptions

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without OpenSSL
    ssl = None

_AGAIN = (BlockingIOError, InterruptedError)
_INET_FAMILIES = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))
# One sendfile(2) call moves at most this much. Linux caps a call at 0x7ffff000 bytes anyway; the
# clamp keeps the size a valid C ssize_t on 32-bit builds too.
_SENDFILE_MAX_BLOCK = 1 << 30


def _check_sock(sock) -> None:
    if ssl is not None and isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")
    if sock.gettimeout() != 0:
        raise ValueError("the socket must be non-blocking")


# -- steps: what a readiness callback does; each returns the result or raises BlockingIOError --


def _call(sock, method: str, *args):
    # Looked up on every call, as asyncio does, so that wrappers and mocks that swap a
    # socket's methods see the swap.
    return getattr(sock, method)(*args)


def _sendall_step(sock, view, pos) -> None:
    # `pos` is a one-item list: the progress survives between readiness callbacks.
    pos[0] += sock.send(view[pos[0] :])
    if pos[0] < len(view):
        raise BlockingIOError  # more to send: wait for the socket to be writable again


def _connect_outcome(sock, address) -> None:
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        # OSError(errno, ...) builds the matching subclass (ConnectionRefusedError, ...).
        raise OSError(err, f"Connect call failed {address}")


def _accept(sock):
    conn, address = sock.accept()
    conn.setblocking(False)
    return conn, address


class SockOpsMixin:
    """`sock_*` coroutines for `Loop`; see the module docstring for the contract."""

    # -- waiting ---------------------------------------------------------------------------

    def _sock_wait(self, sock, writer: bool, callback, *args):
        """Register `callback(fut, *args)` for readiness of `sock`; return the future to await."""
        fut = self.create_future()
        fd = sock.fileno()
        self._ensure_fd_no_transport(fd)
        if writer:
            self.add_writer(fd, callback, fut, *args)
        else:
            self.add_reader(fd, callback, fut, *args)
        # The native add_* return None; fetch the handle just stored so that the done-callback
        # can tell whether it still owns the fd (see the module docstring).
        handle = self._fd_callbacks(fd)[1 if writer else 0]
        fut.add_done_callback(lambda _f: self._sock_unwait(fd, writer, handle))
        return fut

    def _sock_unwait(self, fd: int, writer: bool, handle) -> None:
        if handle is not None and not handle.cancelled():
            if writer:
                self.remove_writer(fd)
            else:
                self.remove_reader(fd)

    def _sock_settle(self, fut, step, *args) -> None:
        """The readiness callback of every operation: run `step(*args)` and settle `fut` with
        its result or exception. A step raises `BlockingIOError` to be called again on the
        next readiness (the call would block, or there is more to do)."""
        if fut.done():
            return  # cancelled: must not consume data or a connection
        try:
            result = step(*args)
        except _AGAIN:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        finally:
            fut = None

    # -- receiving -------------------------------------------------------------------------

    async def _sock_call(self, sock, write, method, *args):
        """Try `sock.<method>(*args)` at once; only if it would block, wait for readiness
        (writable if `write`) and retry from the readiness callback."""
        _check_sock(sock)
        try:
            return getattr(sock, method)(*args)
        except _AGAIN:
            pass
        return await self._sock_wait(sock, write, self._sock_settle, _call, sock, method, *args)

    async def sock_recv(self, sock, n):
        """Receive up to `n` bytes from `sock`; `b""` at end of stream."""
        return await self._sock_call(sock, False, "recv", n)

    async def sock_recv_into(self, sock, buf):
        """Receive into the writable buffer `buf`; return the number of bytes written."""
        return await self._sock_call(sock, False, "recv_into", buf)

    async def sock_recvfrom(self, sock, bufsize):
        """Receive a datagram of up to `bufsize` bytes; return `(data, address)`."""
        return await self._sock_call(sock, False, "recvfrom", bufsize)

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        """Receive a datagram into `buf` (at most `nbytes`, 0 = all of it); return
        `(nbytes, address)`."""
        return await self._sock_call(sock, False, "recvfrom_into", buf, nbytes or len(buf))

    # -- sending ---------------------------------------------------------------------------

    async def sock_sendall(self, sock, data):
        """Send all of `data`. On error some of it may have been sent; there is no way to know
        how much the peer received."""
        _check_sock(sock)
        try:
            n = sock.send(data)
        except _AGAIN:
            n = 0
        # Count bytes, not items: len() of an array('i') is not its size on the wire.
        view = memoryview(data).cast("B")
        if n == len(view):
            return
        return await self._sock_wait(sock, True, self._sock_settle, _sendall_step, sock, view, [n])

    async def sock_sendto(self, sock, data, address):
        """Send the datagram `data` to `address`; return the number of bytes sent."""
        return await self._sock_call(sock, True, "sendto", data, address)

    # -- connecting and accepting ------------------------------------------------------------

    async def sock_connect(self, sock, address):
        """Connect `sock` to `address`, resolving host names for IP sockets first."""
        _check_sock(sock)
        if sock.family in _INET_FAMILIES:
            resolved = await self._ensure_resolved(
                address, family=sock.family, type=sock.type, proto=sock.proto, loop=self
            )
            address = resolved[0][4]
        try:
            sock.connect(address)
            return
        except _AGAIN:
            # EINPROGRESS (and EINTR: the kernel carries on connecting in the background). The
            # socket turns writable once the handshake ends either way; SO_ERROR says how.
            pass
        return await self._sock_wait(sock, True, self._sock_settle, _connect_outcome, sock, address)

    async def sock_accept(self, sock):
        """Accept a connection on the listening `sock`; return `(conn, address)` with `conn`
        non-blocking."""
        _check_sock(sock)
        try:
            return _accept(sock)
        except _AGAIN:
            return await self._sock_wait(sock, False, self._sock_settle, _accept, sock)

    # -- sendfile --------------------------------------------------------------------------

    async def _sock_sendfile_native(self, sock, file, offset, count):
        """Zero-copy `os.sendfile` for `BaseEventLoop.sock_sendfile`.

        `SendfileNotAvailableError` sends the caller to its read()+sendall fallback. It is raised
        for files that are not regular files, and when sendfile(2) fails before any byte went
        out (the socket or file system does not support it), when falling back is still safe.
        Once sendfile(2) was tried, the file position is `offset + bytes sent`, as with the
        fallback, even when the transfer sent nothing, failed or was cancelled.
        """
        _check_sock(sock)
        if not hasattr(os, "sendfile"):
            raise exceptions.SendfileNotAvailableError("os.sendfile() is not available")
        try:
            fileno = file.fileno()
            st = os.fstat(fileno)
        except (AttributeError, io.UnsupportedOperation, OSError):
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        # asyncio only stats the file, so for a pipe it "sends" st_size = 0 bytes and reports
        # success. Only a regular file has a size and offsets that sendfile(2) can honour.
        if not stat.S_ISREG(st.st_mode):
            raise exceptions.SendfileNotAvailableError("not a regular file")
        if not (count or st.st_size):
            return 0  # empty file
        job = _Sendfile(sock.fileno(), fileno, offset, count, st.st_size)
        try:
            try:
                return job.step()
            except _AGAIN:
                pass
            return await self._sock_wait(sock, True, self._sock_settle, job.step)
        finally:
            # os.sendfile() leaves the file position alone; move it past what was sent, as the
            # fallback and asyncio's native path do, even when nothing was sent (an offset at
            # the end of the file: the position is still `offset`, not where the caller left
            # it). file.seek() rather than os.lseek() so that a buffered file drops its
            # read-ahead instead of reporting a stale tell().
            file.seek(offset + job.sent)


class _Sendfile:
    """One sendfile transfer, advanced by `step()` on each writer readiness.

    `step()` has the contract of every `_sock_settle` step: it returns the result
    (total bytes sent) when the transfer is over, and raises `BlockingIOError` to be called
    again once the socket is writable.
    """

    __slots__ = ("out_fd", "in_fd", "offset", "count", "fsize", "sent")

    def __init__(self, out_fd: int, in_fd: int, offset: int, count: int | None, fsize: int):
        self.out_fd, self.in_fd, self.offset = out_fd, in_fd, offset
        self.count, self.fsize, self.sent = count, fsize, 0

    def step(self) -> int:
        # Without a count, ask for the whole file every time and stop when sendfile(2) returns
        # 0 at EOF; a file that grows meanwhile is sent to its new end, as the fallback would.
        block = min(self.count - self.sent if self.count else self.fsize, _SENDFILE_MAX_BLOCK)
        if block <= 0:
            return self.sent
        try:
            n = os.sendfile(self.out_fd, self.in_fd, self.offset, block)
        except _AGAIN:
            raise
        except OSError as exc:
            if not self.sent:
                raise exceptions.SendfileNotAvailableError("os.sendfile call failed") from exc
            if exc.errno == errno.ENOTCONN and type(exc) is not ConnectionError:
                # The peer left mid-transfer. Linux says ENOTCONN where send() and other
                # systems say a ConnectionError; report one error for one event.
                raise ConnectionError(errno.ENOTCONN, "socket is not connected") from exc
            raise
        if n == 0:
            return self.sent  # EOF
        self.offset += n
        self.sent += n
        if self.count and self.sent >= self.count:
            return self.sent
        # A short write means the socket buffer is full: wait for writability rather than
        # spend a syscall learning EAGAIN.
        raise BlockingIOError
