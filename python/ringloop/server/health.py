"""`ringloop serve --health-port PORT`: a readiness probe that knows whether the worker's loop
is running, answered on a thread of its own.

`GET /healthz` (`--health-path`) on `--health-host:PORT` (worker *i* of `--workers N` on
`PORT + i`, as `--metrics-port`) answers

* `200 {"status": "ok", "lag_seconds": ...}` while the loop's lag is under
  `--health-max-lag` (default 1 s);
* `503 {"status": "blocked", "lag_seconds": ..., "blocked_by": {...}}` when it is over: the
  loop has not run a timer that was due that long ago. With `--watch-threshold`,
  `blocked_by` names the request whose code holds the loop right now (method, path, route,
  request id, client; see `watching`), else it is null;
* `503 {"status": "draining"}` once the worker is shutting down, so that an orchestrator stops
  sending it traffic while its connections finish.

Why a thread, and a port of its own. The point of the probe is to answer when the loop cannot:
anything served by the loop — the application's port, or `--metrics-port` (served on the loop)
— goes silent with it, and a probe that times out cannot say why. A thread on the application's
own port would have to accept there, taking connections meant for the loop. So the probe has
a listener of its own and a thread that accepts on it; the loop's only part is a heartbeat
timer (`BEAT`) that records when it next expects to run, and the lag is how far past that the
thread's clock is. The thread needs the GIL to answer: a loop blocked in Python code gives it up
every switch interval (5 ms), a loop waiting in a system call or a C extension that releases the
GIL gives it up at once; a C call that holds the GIL for seconds blocks the probe too, and the
probe's timeout then says what a 503 would have said.

Finding the blocking request reads the connections' records (`ServerState._recent_requests`)
and the loop's current task from this thread while the loop thread is inside the application:
both are read under the GIL, and anything unexpected leaves `blocked_by` null rather than
failing the probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from .listen import bind_tcp
from .logs import logger
from .watching import _from_row

# How often the loop's heartbeat runs (seconds): the lag is known to this much, and a loop that
# runs nothing else wakes this often.
BEAT = 0.1


class Health:
    """One worker's probe (see the module docs)."""

    def __init__(self, path: str, max_lag: float) -> None:
        self.path = path
        self.max_lag = max_lag
        self.draining = False
        self.state: Any = None  # the ServerState, when --watch-threshold records requests
        self._loop: Any = None
        self._due = time.monotonic() + BEAT
        self._beat: asyncio.TimerHandle | None = None
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- on the loop ------------------------------------------------------------------------------

    def start(self, loop: Any, host: str, port: int, *, state: Any = None, reuse_port: bool) -> int:
        """Bind, start the thread and the heartbeat; the port bound."""
        self._loop = loop
        self.state = state
        sock = bind_tcp(host, port, reuse_port=reuse_port, flag="--health-port", backlog=64)
        sock.setblocking(True)  # http.server's thread blocks in accept()
        httpd = _ProbeServer(sock, self)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.25},
            name="ringloop-health",
            daemon=True,
        )
        self._thread.start()
        self._beat_now()
        bound = sock.getsockname()[1]
        logger.info("Health probe on http://%s:%d%s", host, bound, self.path)
        return bound

    def _beat_now(self) -> None:
        self._due = time.monotonic() + BEAT
        self._beat = self._loop.call_later(BEAT, self._beat_now)

    def stop(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    # -- on the probe's thread --------------------------------------------------------------------

    def lag(self) -> float:
        return max(0.0, time.monotonic() - self._due)

    def answer(self) -> tuple[int, dict[str, Any]]:
        if self.draining:
            return 503, {"status": "draining"}
        lag = self.lag()
        if lag < self.max_lag:
            return 200, {"status": "ok", "lag_seconds": round(lag, 4)}
        return 503, {
            "status": "blocked",
            "lag_seconds": round(lag, 4),
            "blocked_by": self._blocker(),
        }

    def _blocker(self) -> dict[str, str] | None:
        if self.state is None:
            return None
        try:
            rows = self.state._recent_requests()
            task = asyncio.current_task(self._loop)
            row = None
            if task is not None:
                row = next((r for r in rows if r[2] is task), None)
            if row is None and task is None:
                # No task runs: the block is a request's first step, which the connection's
                # read callback runs inline; that request is the latest to have begun.
                latest = [r for r in rows if r[1] == "latest"]
                row = max(latest, key=lambda r: r[5]) if latest else None
            if row is None:
                return None
            req = _from_row(row)
        except Exception:  # noqa: BLE001 - the probe answers whatever the records hold
            return None
        return {
            "method": req.method,
            "path": req.path,
            "route": req.route or "-",
            "request_id": req.request_id,
            "client": req.client,
        }


class _ProbeServer(HTTPServer):
    """http.server on an already bound socket, one request at a time, on the probe's thread."""

    def __init__(self, sock: socket.socket, health: Health) -> None:
        self.health = health
        super().__init__(sock.getsockname()[:2], _ProbeHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock


class _ProbeHandler(BaseHTTPRequestHandler):
    timeout = 5  # a client that sends nothing does not hold the probe's one thread for long
    server: _ProbeServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        health = self.server.health
        if self.path.split("?", 1)[0] != health.path:
            self._send(404, {"status": "not found", "path": health.path})
            return
        self._send(*health.answer())

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode() + b"\n"
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("cache-control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            with contextlib.suppress(OSError):
                self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # probes every few seconds would drown the log
