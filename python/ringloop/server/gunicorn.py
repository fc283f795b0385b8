"""`gunicorn -k ringloop.server.GunicornWorker module:app`: ringloop's server as a gunicorn
worker class, for deployments that keep gunicorn as their process manager.

gunicorn's arbiter binds the listeners, forks the workers and restarts them; each worker
here runs ringloop's `Server` on a ringloop loop made in the worker process, over the
sockets gunicorn already bound. gunicorn's settings map onto `Config`:

==========================  ====================================================
gunicorn                    ringloop
==========================  ====================================================
keepalive                   timeout_keep_alive
graceful_timeout            timeout_graceful_shutdown
max_requests (+ jitter)     limit_max_requests (gunicorn draws the jitter)
limit_request_line          limit_request_line (0, "unlimited": 1 MiB)
limit_request_fields        limit_request_headers (at most 256, ringloop's cap)
limit_request_field_size    limit_request_header_size, which bounds the whole header
                            section: at least this, at least ringloop's default
                            (0, "unlimited": 1 MiB)
forwarded_allow_ips         forwarded_allow_ips
backlog                     backlog
keyfile, certfile, ca_certs, cert_reqs, ciphers   ssl_*
==========================  ====================================================

Signals, as gunicorn documents them for a worker: TERM stops gracefully (stop accepting,
finish the requests in flight up to graceful_timeout, lifespan shutdown); QUIT and INT stop
quickly (the requests in flight are closed, lifespan shutdown still runs) — the arbiter sends
QUIT when it is itself told to stop quickly; USR1 reopens gunicorn's log files; ABRT (a
missed heartbeat) runs gunicorn's worker_abort hook and exits. The heartbeat gunicorn's arbiter watches (`notify`) is sent from a
timer on the worker's loop, so a blocked loop stops it and the arbiter's `--timeout` kills
the worker, as it would a stuck sync worker.

This module imports gunicorn; `ringloop.server` exports `GunicornWorker` lazily, so plain
`import ringloop` never does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker

from .config import Config
from .importer import detect_interface, native_kind
from .server import Server

UNLIMITED = 1024 * 1024  # what gunicorn's 0 ("no limit") becomes for a limit ringloop needs


def config_from_gunicorn(cfg: Any, *, max_requests: int, app: Any = None) -> Config:
    """The `Config` that gunicorn's settings `cfg` describe (see the module docs)."""
    settings: dict[str, Any] = {
        "app": app,
        "timeout_keep_alive": float(cfg.keepalive),
        "timeout_graceful_shutdown": float(cfg.graceful_timeout),
        "backlog": cfg.backlog,
        "limit_request_line": cfg.limit_request_line or UNLIMITED,
        "limit_request_headers": min(cfg.limit_request_fields or 256, 256),
        "limit_request_header_size": max(
            cfg.limit_request_field_size or UNLIMITED, Config.limit_request_header_size
        ),
        "forwarded_allow_ips": ",".join(cfg.forwarded_allow_ips)
        if isinstance(cfg.forwarded_allow_ips, list | tuple)
        else cfg.forwarded_allow_ips,
    }
    if 0 < max_requests < sys.maxsize:
        settings["limit_max_requests"] = max_requests
    if cfg.is_ssl:
        settings.update(
            ssl_keyfile=cfg.keyfile,
            ssl_certfile=cfg.certfile,
            ssl_ca_certs=cfg.ca_certs,
            ssl_cert_reqs=int(cfg.cert_reqs),
        )
        if cfg.ciphers:
            settings["ssl_ciphers"] = cfg.ciphers
    return Config(**settings)


class GunicornWorker(Worker):
    """A gunicorn worker that serves with ringloop (see the module docs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Our loggers write through gunicorn's handlers, at gunicorn's levels.
        for name, source in (
            ("ringloop.server", self.log.error_log),
            ("ringloop.access", self.log.access_log),
        ):
            target = logging.getLogger(name)
            target.handlers = source.handlers
            target.setLevel(source.level)
            target.propagate = False
        # gunicorn's max_requests already carries its jitter (self.max_requests).
        self.config = config_from_gunicorn(self.cfg, max_requests=self.max_requests)
        self.server: Server | None = None
        self._heartbeat: asyncio.TimerHandle | None = None

    def init_signals(self) -> None:
        # gunicorn's handlers would run its own shutdown; ours go on the loop in `run`.
        # Reset the rest so a child process of the application keeps default signals.
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, self.handle_usr1)
        signal.siginterrupt(signal.SIGUSR1, False)
        # The arbiter sends ABRT to a worker that missed its heartbeat: gunicorn's handler
        # runs the worker_abort hook and exits (SIGKILL follows if the loop is stuck in C).
        signal.signal(signal.SIGABRT, self.handle_abort)

    def run(self) -> None:
        import ringloop

        loop = ringloop.new_event_loop(thread_bound=True)
        asyncio.set_event_loop(loop)
        try:
            started = loop.run_until_complete(self._serve(loop))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                asyncio.set_event_loop(None)
        if not started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> bool:
        from .lifespan import LifespanFailed

        server = Server(self.config, worker=self.age)
        server.app = self.wsgi  # what gunicorn loaded: WSGI, ASGI or native alike
        interface = self.config.interface
        if interface == "auto":
            interface = detect_interface(server.app)
        elif interface == "native":
            interface = native_kind(server.app) or "native"
        server.interface = interface
        self.server = server
        loop.add_signal_handler(signal.SIGTERM, self._stop, False)
        loop.add_signal_handler(signal.SIGQUIT, self._stop, True)
        loop.add_signal_handler(signal.SIGINT, self._stop, True)
        self._beat()
        try:
            await server.serve([s.sock for s in self.sockets], signals=False, shared=True)
        except LifespanFailed as exc:
            self.log.error("Application startup failed. Exiting. %s", exc)
            return False
        finally:
            if self._heartbeat is not None:
                self._heartbeat.cancel()
            for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return server.started

    def _stop(self, quick: bool) -> None:
        self.alive = False
        if self.server is None:
            return
        if quick:
            # Server._shutdown stops waiting for busy connections and closes them.
            self.server.force_exit = True
            self.cfg.worker_int(self)
        self.server.stop()

    def _beat(self) -> None:
        """gunicorn's heartbeat, from the loop: a blocked loop misses it."""
        self.notify()
        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            self._stop(False)
            return
        interval = min(1.0, self.timeout / 2) if self.timeout else 1.0
        self._heartbeat = asyncio.get_running_loop().call_later(interval, self._beat)
