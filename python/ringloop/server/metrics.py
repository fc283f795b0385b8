"""`ringloop serve --metrics-port PORT`: one worker's Prometheus metrics on `/metrics`.

The endpoint is prometheus_client's own ASGI app (`make_asgi_app`: the text format, gzip,
`name[]` filters) served by a second `ServerState` on the worker's loop, bound to
`--metrics-host` (default 127.0.0.1: metrics say how the service behaves and are not for the
world). Series (`ringloop_` prefix):

- `http_requests_total{status}` (counter) and `http_request_duration_seconds{status}`
  (histogram, prometheus_client's default buckets, head read to response end);
- `http_requests_in_flight`, `http_connections` (gauges: responses not finished, open
  connections; read off the native `ServerState` at scrape time);
- `loop_lag_seconds` (gauge): the latest a `HEARTBEAT` timer fired since the previous scrape,
  i.e. how long a ready callback waited for the loop;
- `http_blocks_total{method,route}` (counter, with `--watch-threshold`): blocks of the loop by
  the request that owned them (`watching`); the route is the template, never the raw path,
  so the label set stays bounded (`-` when the framework exposes none);
- `http_block_causes_total{method,route,cause}` and `http_block_seconds_total{method,route,cause}`
  (counters): the same blocks broken down by cause (`gc`, `throttled`, `starved`, `gil`, or the
  application's `cpu`/`wait`/I/O kind; `ringloop.watch.causes`): in how many each had a share,
  and the seconds each accounts for;
- with `--watch-threshold`, the watch's own series too (`ringloop_watch_*`, see
  `ringloop.watch.metrics`), and prometheus_client's `process_*` series.

Requests are counted by the access-log callback the connection already calls after each
response (`ServerState(access_log=...)`): a dict update and a bisect, no lock, no
prometheus_client object per request; the families are built when scraped.

Several workers (`--workers N`): each worker serves its own metrics, worker *i* on
`PORT + i`, so no number is summed twice or lost with a dead worker; scrape them all (a
Prometheus target per port) and sum in the query. The metrics socket has `SO_REUSEPORT` so a
replacement worker (`--limit-max-rss`, healthcheck) can bind its slot's port while the worker
it replaces still runs; during that overlap either one answers.
"""

from __future__ import annotations

import asyncio
import bisect
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import _core
from . import asgi, logs
from .config import ConfigError
from .listen import bind_tcp
from .logs import logger

# prometheus_client's default histogram buckets (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# How often the loop-lag timer fires (seconds): lag shorter than a few ms is not worth a
# wake-up more often than this.
HEARTBEAT = 0.25
PREFIX = "ringloop"


def require_client() -> None:
    """`--metrics-port` needs prometheus_client: a `ConfigError` (one line) without it."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--metrics-port: needs prometheus_client (pip install 'ringloop[serve]')"
        ) from None


class ServerMetrics:
    """One worker's metrics (see the module docs)."""

    def __init__(self) -> None:
        # status -> per-bucket counts (the last slot: above every bound), and the sums.
        self.buckets: dict[int, list[int]] = {}
        self.sums: dict[int, float] = {}
        self.blocks: Counter[tuple[str, str]] = Counter()
        # (method, route, cause) -> seconds, and blocks in which the cause had a share
        self.block_seconds: Counter[tuple[str, str, str]] = Counter()
        self.block_causes: Counter[tuple[str, str, str]] = Counter()
        self.lag = 0.0
        self.state: Any = None
        self.registry: Any = None
        self._mstate: Any = None
        self._listener: asyncio.AbstractServer | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._due = 0.0

    # -- per response and per block --------------------------------------------------------

    def response(self, client, method, path, query, version, status, sent, seconds) -> None:
        """The access-log callback's signature (see `logs.AccessLog`)."""
        counts = self.buckets.get(status)
        if counts is None:
            counts = self.buckets[status] = [0] * (len(DURATION_BUCKETS) + 1)
            self.sums[status] = 0.0
        counts[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sums[status] += seconds

    def response_hook(self, access_log: Callable[..., None] | None) -> Callable[..., None]:
        """The callback the connections call after each response: these counts, then the
        access log if it is on."""
        if access_log is None:
            return self.response
        count = self.response

        def both(*args: Any) -> None:
            count(*args)
            access_log(*args)

        return both

    def on_block(self, block: Any, req: Any) -> None:
        """`watching.RequestWatch`'s hook: count the block under its request's route."""
        key = ("-", "-") if req is None else (req.method, req.route_label)
        self.blocks[key] += 1
        for c in getattr(block, "causes", ()):
            self.block_seconds[(*key, c.cause)] += c.seconds
            self.block_causes[(*key, c.cause)] += 1

    # -- the endpoint ---------------------------------------------------------------------------

    async def serve(self, loop: Any, state: Any, host: str, port: int, *, reuse_port: bool) -> None:
        """Start `/metrics` on `host:port` and the loop-lag timer."""
        from prometheus_client import CollectorRegistry, ProcessCollector, make_asgi_app

        self.state = state
        self.registry = CollectorRegistry()
        self.registry.register(self)
        ProcessCollector(registry=self.registry)
        self._mstate = _core.ServerState(
            make_asgi_app(self.registry), "asgi", asgi, loop, log_error=logs.error
        )
        sock = bind_tcp(host, port, reuse_port=reuse_port, flag="--metrics-port")
        family = sock.family
        mstate = self._mstate
        self._listener = await loop.create_server(lambda: _core.HttpConn(mstate), sock=sock)
        name = sock.getsockname()
        shown = f"[{name[0]}]" if family == socket.AF_INET6 else name[0]
        logger.info("ringloop metrics on http://%s:%d/metrics", shown, name[1])
        self._due = loop.time() + HEARTBEAT
        self._beat = loop.call_at(self._due, self._heartbeat, loop)

    def _heartbeat(self, loop: Any) -> None:
        now = loop.time()
        self.lag = max(self.lag, now - self._due)
        self._due = now + HEARTBEAT
        self._beat = loop.call_at(self._due, self._heartbeat, loop)

    def sweep(self) -> None:
        """Close idle scrapers' keep-alive connections (called with the server's sweep)."""
        if self._mstate is not None:
            self._mstate.sweep()

    def close(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        if self._listener is not None:
            self._listener.close()
        if self._mstate is not None:
            self._mstate.abort_all()

    # -- prometheus_client's collector protocol ---------------------------------------------

    def describe(self) -> list:
        return []  # families are only known when collected (the status labels seen)

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        requests = CounterMetricFamily(
            f"{PREFIX}_http_requests", "HTTP responses finished, by status.", labels=["status"]
        )
        duration = HistogramMetricFamily(
            f"{PREFIX}_http_request_duration_seconds",
            "From a request's head to the end of its response, by status.",
            labels=["status"],
        )
        for status, counts in sorted(self.buckets.items()):
            total = sum(counts)
            requests.add_metric([str(status)], total)
            cumulative, running = [], 0
            for bound, n in zip(DURATION_BUCKETS, counts, strict=False):
                running += n
                cumulative.append((str(bound), running))
            cumulative.append(("+Inf", total))
            duration.add_metric([str(status)], cumulative, self.sums[status])
        yield requests
        yield duration
        state = self.state
        yield GaugeMetricFamily(
            f"{PREFIX}_http_requests_in_flight",
            "Requests whose response has not ended.",
            value=state.in_flight if state is not None else 0,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_http_connections",
            "Open HTTP connections.",
            value=state.connections if state is not None else 0,
        )
        lag, self.lag = self.lag, 0.0
        yield GaugeMetricFamily(
            f"{PREFIX}_loop_lag_seconds",
            f"Latest a {HEARTBEAT} s timer fired since the previous scrape.",
            value=lag,
        )
        blocks = CounterMetricFamily(
            f"{PREFIX}_http_blocks",
            "Slices that blocked the loop past --watch-threshold, by the request's route.",
            labels=["method", "route"],
        )
        for (method, route), n in sorted(self.blocks.items()):
            blocks.add_metric([method, route], n)
        yield blocks
        for name, text, values in (
            (
                "http_block_causes",
                "Blocks by the request's route and each cause with a share.",
                self.block_causes,
            ),
            (
                "http_block_seconds",
                "Seconds of blocked loop by the request's route and cause.",
                self.block_seconds,
            ),
        ):
            family = CounterMetricFamily(
                f"{PREFIX}_{name}", text, labels=["method", "route", "cause"]
            )
            for labels, v in sorted(values.items()):
                family.add_metric(list(labels), v)
            yield family
