"""What kind of I/O ran on the loop thread: audit events, classified, with the `AuditSource` seam.

The Python fallback listens with `sys.addaudithook` (hooks cannot be removed, so one hook is
installed per process and stays; it costs one dict lookup for events we do not care about, and
one more check for events raised outside a watched slice or off the loop thread). The native
loop may later provide a C-level source with the same shape: something that calls
``sink(event, args, frame)`` for audit events raised on a loop thread inside a slice.

Event names and their kinds. Not every blocking call raises an audit event: ``os.stat``,
``os.read``, ``socket.recv`` and sqlite queries do not, and ``time.sleep`` only raises one from
Python 3.12 on. Those still show up as blocks (by duration and stack samples), just without an
I/O kind; docs/watch.md lists this.

asyncio itself raises some of these events on the loop thread without blocking: ``connect``
on a non-blocking socket (``sock_connect``), ``subprocess.Popen`` from its subprocess
transports, ``os.remove`` of a stale unix socket path. `classify` drops an event when the
socket is non-blocking or when the first frame outside the standard library that raised it
is asyncio's own code.
"""

from __future__ import annotations

import sys
import weakref
from asyncio import events as _events
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .stacks import FrameTuple, is_asyncio, is_library

# event name -> kind. Kinds are what the metrics count blocks by.
EVENT_KINDS: dict[str, str] = {
    "open": "file",
    "os.listdir": "file",
    "os.scandir": "file",
    "os.remove": "file",
    "os.rename": "file",
    "os.mkdir": "file",
    "os.rmdir": "file",
    "os.truncate": "file",
    "os.chmod": "file",
    "os.chown": "file",
    "os.utime": "file",
    "os.link": "file",
    "os.symlink": "file",
    "os.chdir": "file",
    "shutil.copyfile": "file",
    "shutil.copymode": "file",
    "shutil.copystat": "file",
    "shutil.copytree": "file",
    "shutil.rmtree": "file",
    "shutil.move": "file",
    "shutil.make_archive": "file",
    "shutil.unpack_archive": "file",
    "glob.glob": "file",
    "time.sleep": "sleep",
    "socket.connect": "socket",
    "socket.sendto": "socket",
    "socket.sendmsg": "socket",
    "socket.getaddrinfo": "dns",
    "socket.gethostbyname": "dns",
    "socket.gethostbyname_ex": "dns",
    "socket.gethostbyaddr": "dns",
    "socket.getnameinfo": "dns",
    "http.client.connect": "http",
    "urllib.Request": "http",
    "ftplib.connect": "network",
    "smtplib.connect": "network",
    "poplib.connect": "network",
    "imaplib.open": "network",
    "nntplib.connect": "network",
    "telnetlib.Telnet.open": "network",
    "subprocess.Popen": "subprocess",
    "os.system": "subprocess",
    "os.posix_spawn": "subprocess",
    "os.spawn": "subprocess",
    "os.exec": "subprocess",
    "os.fork": "subprocess",
    "sqlite3.connect": "db",
}

# How far up the stack we look for the code that raised an event (stdlib wrappers such as
# subprocess.Popen.__init__ -> _execute_child sit between the event and its caller).
_MAX_WALK = 12


@dataclass(frozen=True)
class IoEvent:
    """One audited call made on the loop thread inside a watched slice."""

    kind: str
    event: str
    detail: str
    where: FrameTuple | None
    time_ns: int

    def to_dict(self) -> dict[str, Any]:
        where = None
        if self.where is not None:
            where = {"filename": self.where[0], "lineno": self.where[1], "name": self.where[2]}
        return {"kind": self.kind, "event": self.event, "detail": self.detail, "where": where}


def _detail(event: str, args: tuple) -> str:
    try:
        if event == "open":
            path, mode = args[0], args[1]
            return f"{path!r}" + (f" mode={mode!r}" if mode else "")
        if event.startswith("socket.") and event in ("socket.connect", "socket.sendto"):
            return repr(args[-1])
        if event == "subprocess.Popen":
            return repr(args[1])[:120]
        text = ", ".join(repr(a) for a in args)
    except Exception:  # detail is best effort: never let a repr break the loop thread
        text = "?"
    return text if len(text) <= 120 else text[:117] + "..."


def _nonblocking_socket(args: tuple) -> bool:
    sock = args[0] if args else None
    try:
        return sock is not None and sock.gettimeout() == 0.0
    except Exception:
        return False


def classify(event: str, args: tuple, frame) -> tuple[str, FrameTuple | None] | None:
    """Return (kind, caller frame) for a blocking event, or None for events we ignore.

    ``frame`` is the innermost Python frame when the event was raised.
    """
    kind = EVENT_KINDS.get(event)
    if kind is None:
        return None
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg") and _nonblocking_socket(args):
        return None
    first = None
    depth = 0
    while frame is not None and depth < _MAX_WALK:
        filename = frame.f_code.co_filename
        if is_asyncio(filename):
            return None  # asyncio's own machinery (subprocess transports, unix servers...)
        if not is_library(filename):
            first = (filename, frame.f_lineno or 0, frame.f_code.co_name)
            break
        if first is None:
            first = (filename, frame.f_lineno or 0, frame.f_code.co_name)
        frame = frame.f_back
        depth += 1
    if first is not None and first[0].startswith("<frozen importlib"):
        return None  # an import reading its module: real I/O, but not the application's call
    return kind, first


class AuditSink(Protocol):
    def __call__(self, loop: Any, event: str, args: tuple, frame) -> None: ...


class AuditSource(Protocol):
    """Something that reports audit events raised on loop threads.

    ``install(sink)`` starts delivery; ``uninstall()`` stops it. Implementations must be cheap
    when no slice is being watched: they run for every audited operation in the process.
    """

    def install(self, sink: AuditSink, is_watched: Callable[[Any], bool]) -> None: ...

    def uninstall(self) -> None: ...


class PyAuditHookSource:
    """The fallback source: one `sys.addaudithook` hook for the whole process.

    An audit hook cannot be removed, so `uninstall` only disconnects the sink; the hook stays
    and early-outs on a `None` check.
    """

    _hook_installed = False
    _sink: AuditSink | None = None
    _is_watched: Callable[[Any], bool] | None = None

    def install(self, sink: AuditSink, is_watched: Callable[[Any], bool]) -> None:
        cls = type(self)
        cls._sink = sink
        cls._is_watched = is_watched
        if not cls._hook_installed:
            sys.addaudithook(_hook)
            cls._hook_installed = True

    def uninstall(self) -> None:
        type(self)._sink = None


_get_running_loop = _events._get_running_loop
_getframe = sys._getframe
_KIND_GET = EVENT_KINDS.get


def _hook(event: str, args: tuple) -> None:
    # Hot: runs for every audit event in the process. Reject by name first.
    if _KIND_GET(event) is None:
        return
    sink = PyAuditHookSource._sink
    if sink is None:
        return
    loop = _get_running_loop()  # thread-local: None off any loop thread
    if loop is None or not PyAuditHookSource._is_watched(loop):
        return
    if loop in native_loops:
        return  # loops watched through the C-level hook report through _native_hook instead
    sink(loop, event, args, _getframe(1))


# Loops whose I/O the C-level hook reports: ringloop's (backends/native.py) and stock asyncio's
# (backends/asyncio_handles.py), whose slices tell the hook they run.
native_loops: weakref.WeakSet = weakref.WeakSet()


_native_sink: AuditSink | None = None
_native_is_watched: Callable[[Any], bool] = bool


def connect_native(sink: AuditSink, is_watched: Callable[[Any], bool]) -> None:
    """Where the C-level hook's eager events (strict mode) go. Its own connection, not the
    Python source's: a process that watches only ringloop or stock asyncio loops never
    installs that one, and its strict mode then reported no short I/O at all."""
    global _native_sink, _native_is_watched
    _native_sink, _native_is_watched = sink, is_watched


def _native_hook(event: str, args: tuple) -> None:
    """Called by ringloop's C-level audit hook, only for I/O-looking events raised inside a
    watched slice in strict mode (see src/watch/audit.rs; otherwise it buffers them)."""
    if _KIND_GET(event) is None:
        return
    sink = _native_sink
    loop = _get_running_loop()
    if sink is None or loop is None or not _native_is_watched(loop):
        return
    sink(loop, event, args, _getframe(1))


def install_native_hook() -> bool:
    """Install ringloop's C-level audit hook (once per process). False without the native
    module."""
    try:
        from .. import _core
    except ImportError:
        return False
    _core.audit_hook_install(_native_hook)
    return True
