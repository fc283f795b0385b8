"""Unix signal handlers for `ringloop.Loop` (`add_signal_handler`/`remove_signal_handler`).

How it works: Python's C-level signal handler writes the signal number into the fd given to
`signal.set_wakeup_fd` the moment the signal arrives, whatever the loop is doing. That fd is
one end of a socketpair whose other end is an ordinary native reader of the loop, so a signal
wakes a loop blocked in io_uring/epoll at once, and its handler then runs as a normal callback
on the loop thread (never inside the signal handler itself).
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
import warnings
from asyncio import coroutines
from asyncio.log import logger

# asyncio's own check, without the DeprecationWarning 3.14 put on the public name.
_iscoroutinefunction = getattr(coroutines, "_iscoroutinefunction", coroutines.iscoroutinefunction)


def _sighandler_noop(signum, frame):
    """Installed as the Python-level handler so that the C handler (and the wakeup fd) is
    active; the real work happens on the loop."""


class SignalMixin:
    def _init_signals(self) -> None:
        self._signal_handlers: dict[int, tuple] = {}
        self._ssock: socket.socket | None = None
        self._csock: socket.socket | None = None

    def _make_self_pipe(self) -> None:
        if self._ssock is not None:
            return
        self._ssock, self._csock = socket.socketpair()
        self._ssock.setblocking(False)
        self._csock.setblocking(False)
        self.add_reader(self._ssock.fileno(), self._read_signal_pipe)

    def _close_self_pipe(self) -> None:
        if self._ssock is None:
            return
        self.remove_reader(self._ssock.fileno())
        self._ssock.close()
        self._csock.close()
        self._ssock = self._csock = None

    def _read_signal_pipe(self) -> None:
        while True:
            try:
                data = self._ssock.recv(4096)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            if not data:
                return
            for signum in data:
                if signum:
                    self._handle_signal(signum)

    def _handle_signal(self, sig: int) -> None:
        entry = self._signal_handlers.get(sig)
        if entry is not None:
            callback, args = entry
            self.call_soon(callback, *args)

    def _check_signal(self, sig) -> None:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")

    def add_signal_handler(self, sig, callback, *args) -> None:
        if coroutines.iscoroutine(callback) or _iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()
        if not callable(callback):
            raise TypeError(
                f"a callable object was expected by add_signal_handler(), got {callback!r}"
            )
        self._make_self_pipe()
        try:
            # Only the main thread may set the wakeup fd; asyncio reports that as RuntimeError.
            signal.set_wakeup_fd(self._csock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None
        self._signal_handlers[sig] = (callback, args)
        try:
            signal.signal(sig, _sighandler_noop)
            # Restart interrupted syscalls in other threads rather than failing them.
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                try:
                    signal.set_wakeup_fd(-1)
                except (ValueError, OSError) as nexc:
                    logger.info("set_wakeup_fd(-1) failed: %s", nexc)
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise

    def remove_signal_handler(self, sig) -> bool:
        self._check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise
        if not self._signal_handlers:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as exc:
                logger.info("set_wakeup_fd(-1) failed: %s", exc)
        return True

    def _close_signals(self) -> None:
        for sig in list(self._signal_handlers):
            if sys.is_finalizing():
                # Too late to restore handlers safely; say so, like asyncio. (warnings is
                # imported at module level: an import here fails once the interpreter has
                # torn down its import machinery.)
                warnings.warn(
                    f"Closing the loop {self!r} on interpreter shutdown stage, "
                    f"skipping signal handlers removal",
                    ResourceWarning,
                    stacklevel=2,
                    source=self,
                )
                self._signal_handlers.clear()
                break
            self.remove_signal_handler(sig)
        self._close_self_pipe()
