"""`Server`: one worker's HTTP server on the running ringloop loop.

It loads the application, runs lifespan startup, listens (on sockets it binds, or ones the
supervisor gives it), serves until it is told to stop, then shuts down gracefully: it stops
accepting (serving the connections its accept had already taken off a listener it hands over
to a successor), answers each connection's next request with `connection: close`, closes a
keep-alive connection idle for `--timeout-drain-idle` (at once if it already was: a client
still looping requests on one sends its next within that, and a close would race with it),
waits for them (up to `--timeout-graceful-shutdown`), runs lifespan shutdown, and returns.

The per-request work is native (`_core.ServerState`, `_core.HttpConn`); this module only
wires configuration into it and runs the lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import _core
from . import asgi, logs
from .config import Config, ConfigError
from .importer import AppLoadError, detect_interface, load
from .lifespan import Lifespan, LifespanFailed
from .listen import bind_socket
from .logs import logger

# Timeouts are checked this often (a connection is cut at most this late), and at most
# SWEEP_BATCH connections are closed before the loop serves the others (see ServerState.sweep).
SWEEP_INTERVAL = 0.25
SWEEP_BATCH = 64
# A sweep that runs this much later than it was due follows a blocked loop: it steps aside
# for one iteration (see `_sweep`).
SWEEP_LATE = 0.05


# The name of the tasks an application coroutine gets when its connection's task is busy
# (src/http/conn/mod.rs); a connection's own task is named after its request (`GET /path`,
# src/http/host.rs) and is told by its coroutine, a `_core.Host`.
TASK_NAME = "ringloop.http"


def _is_request_task(task: asyncio.Task) -> bool:
    return task.get_name() == TASK_NAME or type(task.get_coro()) is _core.Host


class Server:
    """One worker's server (see the module docs)."""

    def __init__(
        self,
        config: Config,
        *,
        worker: int = 0,
        on_started: Callable[[Callable[[], None]], None] | None = None,
        on_stopping: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.worker = worker
        # Called on the loop once the listeners accept, with `stop` (the graceful stop): how
        # a supervisor learns this worker is ready (before a rolling restart stops the worker
        # it replaces), and how its channel stops it. It is given the stop, not the server.
        self.on_started = on_started
        # Called when the worker decides to stop by itself (--limit-max-requests), so that
        # a supervisor starts its successor while it drains.
        self.on_stopping = on_stopping
        self.app: Any = None
        self.interface = config.interface
        self.state: _core.ServerState | None = None
        self.started = False
        self._stop: asyncio.Future | None = None
        self._listeners: list[asyncio.AbstractServer] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_due = 0.0  # when the sweep was meant to run (loop.time())
        self._wsgi = None
        self._uds: tuple[str, int] | None = None  # a --uds socket file this server made
        self.force_exit = False
        # --metrics-port and --watch-threshold (metrics.py, watching.py)
        self.metrics: Any = None
        self.watching: Any = None
        self.health: Any = None  # --health-port (health.py)

    # -- setup --------------------------------------------------------------------------------

    def load(self) -> None:
        """Import the application and pick its interface (errors: `AppLoadError`)."""
        self.app = load(self.config.app, factory=self.config.factory, app_dir=self.config.app_dir)
        if self.interface == "auto":
            self.interface = detect_interface(self.app)
        elif self.interface == "native":
            from .importer import native_kind

            self.interface = native_kind(self.app) or "native"
        if self.config.ws == "on" and not (
            self.interface == "asgi"
            or (self.interface != "wsgi" and hasattr(self.app, "__ringloop_websocket__"))
        ):
            raise AppLoadError(
                f"--ws on: a {self.interface} application has no WebSocket side "
                "(ASGI apps have; native handlers need native_handler(..., websocket=...))"
            )

    def _state(self, loop) -> _core.ServerState:
        state = self._new_state(loop)
        mounts = self.config.static_mounts()
        if mounts:
            state.set_static_files(mounts)
        return state

    def _new_state(self, loop) -> _core.ServerState:
        c = self.config
        trusted = c.trusted_proxies()
        runner: Any = asgi
        wsgi_submit = None
        if self.interface in ("native", "native-async"):
            from .native import NativeRunner

            runner = NativeRunner(self.interface)
        elif self.interface == "wsgi":
            from .wsgi import WSGIBridge

            self._wsgi = WSGIBridge(loop, c.wsgi_threads)
            wsgi_submit = self._wsgi.submit
        return _core.ServerState(
            self.app,
            self.interface,
            runner,
            loop,
            max_request_line=c.limit_request_line,
            max_header_bytes=c.limit_request_header_size,
            max_headers=c.limit_request_headers,
            max_body=c.limit_request_body,
            timeout_keep_alive=c.timeout_keep_alive,
            timeout_head=c.timeout_request_head,
            timeout_body=c.timeout_request_body,
            root_path=c.root_path,
            scheme="https" if c.is_ssl else "http",
            server_header="ringloop" if c.server_header else None,
            date_header=c.date_header,
            headers=list(c.headers),
            access_log=self._response_hook(),
            log_error=logs.error,
            log_debug=logs.debug,
            proxy_trusted=trusted,
            limit_concurrency=c.limit_concurrency,
            max_requests=c.max_requests(self.worker),
            on_max_requests=self._max_requests_reached,
            wsgi_submit=wsgi_submit,
            ws=c.ws,
            ws_max_size=c.ws_max_size,
            ws_ping_interval=c.ws_ping_interval,
            ws_ping_timeout=c.ws_ping_timeout,
            ws_per_message_deflate=c.ws_per_message_deflate,
            ws_handler=getattr(self.app, "__ringloop_websocket__", None),
            http=c.http,
            http2_max_concurrent_streams=c.http2_max_concurrent_streams,
            http2_initial_stream_window_size=c.http2_initial_stream_window_size,
            http2_initial_connection_window_size=c.http2_initial_connection_window_size,
            http2_max_headers_size=c.http2_max_headers_size,
            http2_max_frame_size=c.http2_max_frame_size,
            http2_max_reset_streams=c.http2_max_reset_streams,
            http2_max_empty_frames=c.http2_max_empty_frames,
            http2_send_timeout=c.http2_send_timeout,
            http2_keep_alive_interval=c.http2_keep_alive_interval,
            http2_keep_alive_timeout=c.http2_keep_alive_timeout,
        )

    def _response_hook(self) -> Any:
        """What the connections call after each response: the access log, the metrics' counts,
        both, or nothing."""
        c = self.config
        access = logs.AccessLog(c.access_log_format) if c.access_log else None
        if self.metrics is not None:
            return self.metrics.response_hook(access)
        return access

    async def _start_watch_and_metrics(self, loop) -> None:
        """`--metrics-port` and `--watch-threshold`, once the server state exists."""
        c = self.config
        if self.metrics is not None:
            await self.metrics.serve(
                loop,
                self.state,
                c.metrics_host,
                c.metrics_port + self.worker if c.metrics_port else 0,
                reuse_port=c.workers > 1,
            )
        if c.watch_threshold is not None:
            from .watching import RequestWatch

            hook = self.metrics.on_block if self.metrics is not None else None
            self.watching = RequestWatch(c.watch_threshold, on_request_block=hook)
            self.watching.start(self.state, loop)
            if self.metrics is not None:
                from ..watch import metrics as watch_metrics

                watch_metrics.register_prometheus_client(self.metrics.registry)
        if c.health_port is not None:
            from .health import Health

            self.health = Health(c.health_path, c.health_max_lag)
            self.health.start(
                loop,
                c.health_host,
                c.health_port + self.worker if c.health_port else 0,
                state=self.state if self.watching is not None else None,
                reuse_port=c.workers > 1,
            )

    # -- running ------------------------------------------------------------------------------

    async def serve(
        self,
        sockets: list[socket.socket] | None = None,
        *,
        signals: bool = True,
        shared: bool | None = None,
    ) -> None:
        """Serve until `stop()` (or SIGINT/SIGTERM with `signals`), then shut down gracefully.
        `shared`: other processes accept on the same listeners (default: a supervisor's
        `--uds`/`--fd` workers)."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, _core.LoopCore):
            raise RuntimeError("ringloop's server runs on ringloop's event loop (ringloop.run)")
        if self.app is None:
            self.load()
        self._stop = loop.create_future()
        if self.config.metrics_port is not None and self.metrics is None:
            from .metrics import ServerMetrics

            self.metrics = ServerMetrics()
        lifespan = Lifespan(self.app, self.config.lifespan if self.interface == "asgi" else "off")
        await lifespan.startup()
        try:
            self.state = self._state(loop)
            if lifespan.supported:
                self.state.set_lifespan_state(lifespan.state)
            await self._start_watch_and_metrics(loop)
            own = sockets is None
            if own:
                sockets = [bind_socket(self.config)]
                if self.config.uds:
                    # Ours to remove at the end (unless someone replaced it meanwhile).
                    self._uds = (self.config.uds, os.stat(self.config.uds).st_ino)
            ssl_ctx = self.config.ssl_context()
            state = self.state
            if shared is None:
                shared = self.config.workers > 1 and (
                    bool(self.config.uds) or self.config.fd is not None
                )
            factory = functools.partial(_core.HttpConn, state)
            # Each connection is then set up natively, no Python per accept (see
            # docs/native-accept.md).
            factory._ringloop_native = True  # type: ignore[attr-defined]
            for sock in sockets:
                if shared:
                    loop._share_listener(sock)
                elif not own:
                    # A parent's listener: a successor accepts on it once this worker stops.
                    loop._hand_over_listener(sock)
                self._listeners.append(
                    await loop.create_server(
                        factory,
                        sock=sock,
                        backlog=self.config.backlog,
                        ssl=ssl_ctx,
                        # A TLS slowloris meets the same limit as a stalled request head.
                        ssl_handshake_timeout=(self.config.timeout_request_head or None)
                        if ssl_ctx
                        else None,
                    )
                )
        except BaseException:
            # Cannot listen (a busy port, a bad TLS key): the application started, so it
            # gets its shutdown, instead of a lifespan task left pending on a closed loop.
            for listener in self._listeners:
                listener.close()
            self._stop_watch_and_metrics()
            with contextlib.suppress(LifespanFailed):
                await lifespan.shutdown()
            raise
        self._sweep_due = loop.time() + SWEEP_INTERVAL
        self._sweeper = loop.call_later(SWEEP_INTERVAL, self._sweep)
        if signals:
            self._install_signals(loop)
        self.started = True
        self._log_started(sockets)
        if self.on_started is not None:
            self.on_started(self.stop)
        try:
            await self._stop
        finally:
            # The handlers stay through the shutdown: a second signal there is what sets
            # force_exit (see _on_signal).
            try:
                await self._shutdown(lifespan)
            finally:
                if signals:
                    self._remove_signals(loop)

    def stop(self) -> None:
        """Begin the graceful shutdown (safe to call more than once, from the loop thread)."""
        if self._stop is not None and not self._stop.done():
            self._stop.set_result(None)

    def _max_requests_reached(self) -> None:
        logger.info(
            "Maximum request limit of %s exceeded. Terminating process.", self.state.requests
        )
        if self.on_stopping is not None:
            self.on_stopping()
        self.stop()

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._sweep_due > SWEEP_LATE:
            # The loop was blocked (an application's synchronous work): requests that arrived
            # meanwhile may still be queued behind this callback, unread, and their
            # connections would look idle since before the block. A timer due now runs after
            # the next iteration's I/O: sweep then.
            self._sweep_due = now
            self._sweeper = loop.call_later(0, self._sweep)
            return
        if self.metrics is not None:
            self.metrics.sweep()
        if self.state is not None and self.state.sweep(SWEEP_BATCH):
            # More to close: the rest after the loop has served what is ready.
            self._sweep_due = now
            self._sweeper = loop.call_soon(self._sweep)
            return
        self._sweep_due = now + SWEEP_INTERVAL
        self._sweeper = loop.call_later(SWEEP_INTERVAL, self._sweep)

    async def _shutdown(self, lifespan: Lifespan) -> None:
        logger.info("Shutting down")
        if self.health is not None:
            self.health.draining = True  # out of rotation while the connections finish
        for listener in self._listeners:
            listener.close()
        # Connections a handed-over listener's accept took before it stopped are served too.
        await asyncio.get_running_loop()._handover_done()
        if self.state is not None:
            busy = self.state.shutdown(self.config.timeout_drain_idle)
            deadline = self.config.timeout_graceful_shutdown
            t0 = time.monotonic()
            if busy:
                logger.info("Waiting for connections to close. (CTRL+C to force quit)")
            while self.state.connections and not self.force_exit:
                if deadline is not None and time.monotonic() - t0 >= deadline:
                    logger.warning(
                        "Graceful shutdown timed out after %ss; closing the rest.", deadline
                    )
                    break
                await asyncio.sleep(0.05)
            self.state.abort_all()
            await self._wait_for_requests(t0, deadline)
        if self._sweeper is not None:
            self._sweeper.cancel()
        for listener in self._listeners:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(listener.wait_closed(), 1)
        if self._wsgi is not None:
            self._wsgi.shutdown()
        self._stop_watch_and_metrics()
        if self._uds is not None:
            path, ino = self._uds
            self._uds = None
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == ino:
                    os.unlink(path)
        if lifespan.supported:
            logger.info("Waiting for application shutdown.")
            try:
                await lifespan.shutdown()
            except LifespanFailed as exc:
                logger.error("Application shutdown failed: %s", exc)
            else:
                logger.info("Application shutdown complete.")

    def _stop_watch_and_metrics(self) -> None:
        if self.health is not None:
            self.health.stop()
            self.health = None
        if self.watching is not None:
            self.watching.stop()
            self.watching = None
        if self.metrics is not None:
            self.metrics.close()

    async def _wait_for_requests(self, t0: float, deadline: float | None) -> None:
        """Application coroutines still running past their response (background work, as
        Starlette's BackgroundTasks): waited for, as uvicorn does, within the graceful timeout,
        then cancelled."""
        await asyncio.sleep(0)  # the tasks of connections just closed end here
        me = asyncio.current_task()
        pending = {t for t in asyncio.all_tasks() if t is not me and _is_request_task(t)}
        if not pending:
            return
        logger.info("Waiting for background tasks to complete. (CTRL+C to force quit)")
        while pending and not self.force_exit:
            if deadline is not None and time.monotonic() - t0 >= deadline:
                break
            _, pending = await asyncio.wait(pending, timeout=0.05)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1)

    def _install_signals(self, loop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _remove_signals(self, loop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        if self._stop is not None and self._stop.done():
            # A second Ctrl+C: stop waiting for connections.
            self.force_exit = True
            return
        self.stop()

    def _log_started(self, sockets: list[socket.socket]) -> None:
        scheme = "https" if self.config.is_ssl else "http"
        for sock in sockets:
            name = sock.getsockname()
            if sock.family == socket.AF_UNIX:
                where = f"unix socket {name}"
            else:
                host = f"[{name[0]}]" if sock.family == socket.AF_INET6 else name[0]
                where = f"{scheme}://{host}:{name[1]}"
            logger.info(
                "ringloop serving %s (%s) on %s (Press CTRL+C to quit)",
                self.interface.upper(),
                os.getpid(),
                where,
            )


def run(
    config: Config,
    sockets: list[socket.socket] | None = None,
    *,
    worker: int = 0,
    on_started: Callable[[Callable[[], None]], None] | None = None,
    on_stopping: Callable[[], None] | None = None,
) -> int:
    """Run one worker in this process until it stops; the exit status (1: failed to start,
    3: lifespan startup failed). `on_started(stop)` runs on the loop once it accepts."""
    import ringloop

    from .importer import AppLoadError

    logs.configure(config.log_level, config.use_colors)
    server = Server(config, worker=worker, on_started=on_started, on_stopping=on_stopping)
    try:
        server.load()
    except AppLoadError as exc:
        logger.error("%s", exc)
        return 1
    loop = ringloop.new_event_loop(
        backend=None if config.loop_backend == "auto" else config.loop_backend, thread_bound=True
    )
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets))
    except LifespanFailed as exc:
        logger.error("Application startup failed. Exiting. %s", exc)
        return 3
    except ConfigError as exc:
        logger.error("%s", exc)
        return 1
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        asyncio.set_event_loop(None)
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m ringloop.server.server` is not an entry
    sys.exit("use `ringloop serve` or `python -m ringloop serve`")
