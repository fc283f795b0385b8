"""`--reload`: restart the server whenever a watched source file changes (development only).

The reloader process binds the listener once and keeps it, so connections made while the
server restarts wait in the backlog instead of being refused. The server runs in a child
started with multiprocessing's *spawn* method — a fresh interpreter, so the application is
imported anew each time (a fork would inherit the modules already imported). The listener
and the `control` channel reach the child through multiprocessing's socket pickling.

What is watched (watchfiles, inotify): `--reload-dir`s (default: the current directory),
recursively, minus watchfiles' usual ignores (`.git`, `__pycache__`, `.venv`, …). A change
counts when the file's name matches `*.py` or a `--reload-include` pattern and neither the
name nor a directory below the watched one matches `--reload-exclude` or the default
excludes (`.*`, `.py[cod]`, `.sw.*`, `~*`), as uvicorn does. Changes are gathered until
`--reload-delay` passes without another, then the child gets SIGTERM (a graceful stop), and a
new one starts. A child that fails (a syntax error) is reported, and the next change starts
it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import multiprocessing
import os
import signal
import socket
import threading
from pathlib import Path

from . import logs
from .config import Config, ConfigError
from .listen import bind_socket
from .logs import logger

DEFAULT_INCLUDES = ("*.py",)
DEFAULT_EXCLUDES = (".*", ".py[cod]", ".sw.*", "~*")
# A child told to stop gets --timeout-graceful-shutdown (or this, without one) and then
# STOP_GRACE more before SIGKILL: a development server should not hang a reload.
STOP_DEFAULT = 10.0
STOP_GRACE = 5.0


class ReloadFilter:
    """Which changed paths restart the server (see the module docs)."""

    def __init__(self, roots: list[Path], includes: list[str], excludes: list[str]) -> None:
        try:
            from watchfiles import DefaultFilter
        except ImportError:
            raise ConfigError(
                "--reload: needs watchfiles (pip install 'ringloop[serve]')"
            ) from None

        self.roots = roots
        self.includes = [*DEFAULT_INCLUDES, *(i for i in includes if i not in DEFAULT_INCLUDES)]
        # Asking to include a pattern that an exclude default would hide wins over the default.
        self.excludes = [e for e in DEFAULT_EXCLUDES if e not in includes] + list(excludes)
        self._default = DefaultFilter()

    def __call__(self, change: object, path: str) -> bool:
        if not self._default(change, path):
            return False
        p = Path(path)
        parts = self._relative_parts(p)
        for name in parts:
            if any(fnmatch.fnmatch(name, pattern) for pattern in self.excludes):
                return False
        if any(p.match(pattern) for pattern in self.excludes):
            return False
        return any(
            fnmatch.fnmatch(p.name, pattern) or p.match(pattern) for pattern in self.includes
        )

    def _relative_parts(self, path: Path) -> tuple[str, ...]:
        # Only what lies below the watched directory: a project under ~/.local is still
        # watched, a .venv inside it is not.
        for root in self.roots:
            with contextlib.suppress(ValueError):
                return path.relative_to(root).parts
        return (path.name,)


class Reloader:
    """The parent of a `--reload` server (see the module docs)."""

    def __init__(self, config: Config) -> None:
        if not isinstance(config.app, str):
            raise ConfigError("--reload: give the application as an import string, module:app")
        if config.workers > 1:
            logger.warning("--workers is ignored with --reload: one server process runs.")
        self.config = dataclasses.replace(config, reload=False, workers=1)
        self.roots = [Path(d).resolve() for d in (config.reload_dirs or [os.getcwd()])]
        self.filter = ReloadFilter(self.roots, config.reload_includes, config.reload_excludes)
        self.stop_event = threading.Event()
        self.context = multiprocessing.get_context("spawn")
        self.process = None
        self.channel: socket.socket | None = None
        self.sock: socket.socket | None = None

    def run(self) -> int:
        import watchfiles

        logs.configure(self.config.log_level, self.config.use_colors)
        try:
            self.sock = bind_socket(self.config)
        except (ConfigError, OSError) as exc:
            logger.error("%s", exc)
            return 1
        if self.config.port == 0 and self.sock.family != socket.AF_UNIX:
            # Every child serves the same listener; say once where it is.
            logger.info("Listening on port %d", self.sock.getsockname()[1])
        logger.info("Will watch for changes in these directories: %s", [str(r) for r in self.roots])
        logger.info("Started reloader process [%d] using WatchFiles", os.getpid())
        saved = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self._start()
            for changes in watchfiles.watch(
                *self.roots,
                watch_filter=self.filter,
                step=max(1, int(self.config.reload_delay * 1000)),
                stop_event=self.stop_event,
                yield_on_timeout=True,
                rust_timeout=1000,
                raise_interrupt=False,
            ):
                if self.stop_event.is_set():
                    break
                if not changes:
                    continue
                names = sorted({self._display(path) for _, path in changes})
                logger.warning(
                    "WatchFiles detected changes in %s. Reloading...",
                    ", ".join(repr(n) for n in names),
                )
                self._stop_child()
                self._start()
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            self._stop_child()
            self.sock.close()
            if self.config.uds:
                with contextlib.suppress(OSError):
                    os.unlink(self.config.uds)
        logger.info("Stopping reloader process [%d]", os.getpid())
        return 0

    def _on_signal(self, _sig: int, _frame: object) -> None:
        # Runs on the main thread while watchfiles waits in Rust (it checks for signals);
        # the stop event ends its loop.
        self.stop_event.set()

    def _display(self, path: str) -> str:
        p = Path(path)
        for root in self.roots:
            with contextlib.suppress(ValueError):
                return str(p.relative_to(root))
        return path

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        self.channel = ours
        self.process = self.context.Process(
            target=_child_main,
            args=(self.config, self.sock, theirs),
            name="ringloop-server",
        )
        self.process.start()
        theirs.close()

    def _stop_child(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.is_alive():
            process.terminate()  # SIGTERM: the server's graceful stop
            graceful = self.config.timeout_graceful_shutdown
            process.join((STOP_DEFAULT if graceful is None else graceful) + STOP_GRACE)
            if process.is_alive():
                logger.warning("The server process [%d] did not stop: killing it.", process.pid)
                process.kill()
                process.join()
        elif process.exitcode:
            logger.warning(
                "The server process [%d] had exited (%s).", process.pid, process.exitcode
            )
        process.close()
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def _child_main(config: Config, sock: socket.socket, channel: socket.socket) -> None:
    """The server process of `--reload` (a spawned interpreter)."""
    import sys

    from . import control
    from .server import run

    # Out of the terminal's process group: Ctrl+C is the reloader's to relay, once.
    os.setpgid(0, 0)
    sys.exit(run(config, [sock], on_started=control.worker_hook(channel)))
