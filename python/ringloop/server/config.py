"""`Config`: every setting of `ringloop serve` and `ringloop.serve()`, with uvicorn's names and
defaults where uvicorn has the setting, checked once when it is made.

A bad value raises `ConfigError` with one line that names the setting and what is wrong; the
command line prints that line and exits with code 2 (see `cli`).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

from .. import _core

INTERFACES = ("auto", "asgi", "wsgi", "native")
LIFESPANS = ("auto", "on", "off")
BACKENDS = ("auto", "io_uring", "epoll")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
WS_MODES = ("auto", "on", "off")
HTTP_MODES = ("auto", "1", "2")
# uvicorn's --http values (its HTTP/1.1 parser): accepted, warned about, and serve as auto.
UVICORN_HTTP = ("h11", "httptools")
# granian's defaults: one --static-path-mount without a route is served here, cached a day.
STATIC_ROUTE = "/static"
STATIC_EXPIRES = 86400


class ConfigError(ValueError):
    """A setting has a value the server cannot use (the message names it)."""


# The secret the session tickets of every worker of this server are sealed with (see
# `src/tls/tickets.rs`): made when this module is first imported, which is in the process that
# forks the workers (our supervisor, gunicorn's arbiter), so a ticket one worker issued
# resumes on any other. It lives only in memory: a restarted server issues new tickets.
_TICKET_SECRET = os.urandom(32)


@dataclass
class Config:
    """What one server runs and how (see `ringloop serve --help` for each setting)."""

    app: Any
    # -- where it listens
    host: str = "127.0.0.1"
    port: int = 8000
    uds: str | None = None
    fd: int | None = None
    backlog: int = 2048
    # -- what it runs
    interface: str = "auto"
    factory: bool = False
    lifespan: str = "auto"
    root_path: str = ""
    workers: int = 1
    loop_backend: str = "auto"
    wsgi_threads: int = 32
    app_dir: str = "."
    env_file: str | None = None
    # -- proxies
    proxy_headers: bool = True
    forwarded_allow_ips: str | None = None
    # -- limits and timeouts (seconds)
    limit_concurrency: int | None = None
    limit_max_requests: int | None = None
    limit_max_requests_jitter: int = 0
    limit_max_rss: int | None = None  # MiB
    limit_request_line: int = 8 * 1024
    limit_request_headers: int = 100
    limit_request_header_size: int = 16 * 1024
    limit_request_body: int | None = None
    timeout_keep_alive: float = 5.0
    timeout_request_head: float = 10.0
    timeout_request_body: float = 30.0
    timeout_graceful_shutdown: float | None = None
    # On shutdown, a keep-alive connection idle for less than this waits for its client's
    # next request (answered with `connection: close`) rather than being closed under it.
    timeout_drain_idle: float = 2.0
    timeout_worker_healthcheck: float = 30.0
    # -- TLS
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0  # ssl.CERT_NONE; 1 optional, 2 required
    ssl_ciphers: str = "TLSv1"
    ssl_crl: list[str] = field(default_factory=list)
    ssl_protocol_min: str | None = None
    # -- headers and logs
    server_header: bool = True
    date_header: bool = True
    headers: list[tuple[str, str]] = field(default_factory=list)
    log_level: str = "info"
    access_log: bool = True
    access_log_format: str | None = None
    use_colors: bool | None = None
    # -- development
    reload: bool = False
    reload_dirs: list[str] = field(default_factory=list)
    reload_includes: list[str] = field(default_factory=list)
    reload_excludes: list[str] = field(default_factory=list)
    reload_delay: float = 0.25
    # -- the watch and metrics
    watch_threshold: float | None = None  # seconds; None: blocks are not reported
    metrics_port: int | None = None  # None: no /metrics endpoint
    metrics_host: str = "127.0.0.1"
    # -- the readiness probe (health.py)
    health_port: int | None = None  # None: no probe
    health_host: str = "127.0.0.1"
    health_path: str = "/healthz"
    health_max_lag: float = 1.0  # seconds
    # -- HTTP/2 (granian's flags): auto speaks h2 to a client that asks (ALPN h2 over TLS, the
    # h2c preface in cleartext), 1 only HTTP/1.1, 2 only HTTP/2
    http: str = "auto"
    http2_max_concurrent_streams: int = 100
    http2_initial_stream_window_size: int = 256 * 1024
    http2_initial_connection_window_size: int = 1024 * 1024
    http2_max_headers_size: int = 32 * 1024
    http2_max_frame_size: int = 16 * 1024
    # -- HTTP/2 attack bounds (issue 22): streams reset before their response (Rapid Reset),
    # empty frames in a row (CVE-2019-9518), a send() waiting on a closed window (CVE-2019-9517)
    http2_max_reset_streams: int = 100
    http2_max_empty_frames: int = 100
    http2_send_timeout: float = 30.0  # seconds
    # keep-alive PINGs (granian's flags): one after this many ms without a byte from the
    # client (0: off, as granian's and hyper's default); no ACK within the timeout: close
    http2_keep_alive_interval: int = 0
    http2_keep_alive_timeout: float = 20.0
    # -- WebSocket (the WebSocket issue)
    ws: str = "auto"
    ws_max_size: int = 16 * 1024 * 1024
    ws_ping_interval: float | None = 20.0
    ws_ping_timeout: float | None = 20.0
    ws_per_message_deflate: bool = True
    # -- static files (granian's flags): route i serves directory i, before the application
    static_path_route: list[str] = field(default_factory=list)
    static_path_mount: list[str] = field(default_factory=list)
    static_path_expires: list[int] = field(default_factory=list)  # seconds; [] is 86400

    def __post_init__(self) -> None:
        self._check()

    # -- checks -----------------------------------------------------------------------------

    def _check(self) -> None:
        def choice(name: str, allowed: tuple[str, ...]) -> None:
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(
                    f"--{name.replace('_', '-')}: {value!r} is not one of {', '.join(allowed)}"
                )

        def positive(name: str, value: float | None, *, zero: bool = False) -> None:
            if value is None:
                return
            if value < 0 or (value == 0 and not zero):
                limit = ">= 0" if zero else "> 0"
                raise ConfigError(f"--{name.replace('_', '-')}: must be {limit}, got {value}")

        choice("interface", INTERFACES)
        choice("lifespan", LIFESPANS)
        choice("loop_backend", BACKENDS)
        choice("ws", WS_MODES)
        choice("http", HTTP_MODES)
        h2_ranges = {
            "http2_max_concurrent_streams": (1, 2**31 - 1),
            "http2_initial_stream_window_size": (1, 2**31 - 1),
            "http2_initial_connection_window_size": (65535, 2**31 - 1),
            "http2_max_headers_size": (1, 2**32 - 1),
            "http2_max_frame_size": (16384, 2**24 - 1),
            "http2_max_reset_streams": (1, 2**31 - 1),
            "http2_max_empty_frames": (0, 2**31 - 1),
            "http2_keep_alive_interval": (0, 86_400_000),
        }
        for name, (low, high) in h2_ranges.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ConfigError(
                    f"--{name.replace('_', '-')}: {value} is out of range ({low} to {high})"
                )
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(
                f"--log-level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port: {self.port} is not a TCP port (0-65535)")
        if self.uds is not None and self.fd is not None:
            raise ConfigError("--uds and --fd: give one of them, not both")
        for name in ("workers", "backlog", "wsgi_threads", "limit_request_line"):
            positive(name, getattr(self, name))
        for name in ("limit_request_headers", "limit_request_header_size", "ws_max_size"):
            positive(name, getattr(self, name))
        for name in (
            "limit_concurrency",
            "limit_max_requests",
            "limit_max_rss",
            "limit_request_body",
        ):
            positive(name, getattr(self, name))
        positive("limit_max_requests_jitter", self.limit_max_requests_jitter, zero=True)
        positive("http2_keep_alive_timeout", self.http2_keep_alive_timeout)
        for name in (
            "timeout_keep_alive",
            "timeout_request_head",
            "timeout_request_body",
            "timeout_graceful_shutdown",
            "timeout_drain_idle",
            "timeout_worker_healthcheck",
            "reload_delay",
            "ws_ping_interval",
            "ws_ping_timeout",
            "http2_send_timeout",
        ):
            positive(name, getattr(self, name), zero=True)
        if self.watch_threshold is not None and not self.watch_threshold > 0:
            raise ConfigError(f"--watch-threshold: must be > 0 seconds, got {self.watch_threshold}")
        if self.health_port is not None and not 0 <= self.health_port <= 65535:
            raise ConfigError(f"--health-port: {self.health_port} is not a TCP port (0-65535)")
        if not self.health_path.startswith("/"):
            raise ConfigError(f"--health-path: must start with /, got {self.health_path!r}")
        if not self.health_max_lag > 0:
            raise ConfigError(f"--health-max-lag: must be > 0 seconds, got {self.health_max_lag}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port: {self.metrics_port} is not a TCP port (0-65535)")
        if self.metrics_port is not None and self.metrics_port + self.workers - 1 > 65535:
            raise ConfigError(
                f"--metrics-port: {self.metrics_port} + {self.workers} workers runs past 65535"
            )
        if self.limit_request_headers > 256:
            raise ConfigError("--limit-request-headers: at most 256")
        if bool(self.ssl_keyfile) != bool(self.ssl_certfile):
            raise ConfigError("--ssl-keyfile and --ssl-certfile: TLS needs both")
        for name, value in self.headers:
            if not name or any(c in name + value for c in "\r\n\0"):
                raise ConfigError(f"--header: {name}: {value!r} is not a valid header")
        self.trusted_proxies()  # parses --forwarded-allow-ips
        self.static_mounts()

    # -- derived ------------------------------------------------------------------------------

    @property
    def is_ssl(self) -> bool:
        return bool(self.ssl_keyfile and self.ssl_certfile)

    def ssl_context(self) -> _core.TlsConfig | None:
        """The server's TLS configuration (rustls, in Rust: `src/tls/`), or None for plain
        HTTP. A key or certificate that cannot be used is a `ConfigError` of one line."""
        if not self.is_ssl:
            return None
        try:
            return _core.TlsConfig(
                self.ssl_certfile,
                self.ssl_keyfile,
                password=self.ssl_keyfile_password,
                ca_certs=self.ssl_ca_certs,
                cert_reqs=int(self.ssl_cert_reqs),
                ciphers=self.ssl_ciphers or None,
                crls=list(self.ssl_crl),
                min_version=self.ssl_protocol_min,
                # ALPN: h2 first for a client that speaks both (RFC 7301: the server picks).
                alpn={"1": ["http/1.1"], "2": ["h2"]}.get(self.http, ["h2", "http/1.1"]),
                ticket_secret=_TICKET_SECRET,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def trusted_proxies(self) -> TrustedProxies | None:
        """Who may set `X-Forwarded-*` (None: proxy headers are off)."""
        if not self.proxy_headers:
            return None
        spec = self.forwarded_allow_ips
        if spec is None:
            spec = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        return TrustedProxies(spec)

    def static_mounts(self) -> list[tuple[str, str, int]]:
        """`(route, directory, expires seconds)` per `--static-path-mount`, paired as granian
        pairs them: one mount without a route is served at `/static`; otherwise the i-th route
        serves the i-th mount. One `--static-path-expires` applies to every mount, or give one
        per mount; none is granian's default, a day."""
        mounts, routes, expires = (
            self.static_path_mount,
            self.static_path_route,
            self.static_path_expires,
        )
        if not mounts:
            if routes:
                raise ConfigError("--static-path-route: needs a --static-path-mount to serve")
            return []
        if not routes and len(mounts) == 1:
            routes = [STATIC_ROUTE]
        if len(routes) != len(mounts):
            raise ConfigError(
                f"--static-path-route and --static-path-mount: {len(routes)} routes for "
                f"{len(mounts)} mounts (give one route per mount, in the same order)"
            )
        if not expires:
            expires = [STATIC_EXPIRES]
        if len(expires) == 1:
            expires = expires * len(mounts)
        if len(expires) != len(mounts):
            raise ConfigError(
                f"--static-path-expires: {len(expires)} values for {len(mounts)} mounts "
                "(give one for all, or one per mount)"
            )
        for route in routes:
            if not route.startswith("/"):
                raise ConfigError(f"--static-path-route: {route!r} does not start with '/'")
        for mount in mounts:
            if not os.path.isdir(mount):
                raise ConfigError(f"--static-path-mount: {mount!r} is not a directory")
        for value in expires:
            if value < 0:
                raise ConfigError(f"--static-path-expires: must be >= 0, got {value}")
        return [
            (r, os.path.abspath(m), int(e)) for r, m, e in zip(routes, mounts, expires, strict=True)
        ]

    def max_requests(self, worker: int = 0) -> int | None:
        """This worker's request budget: the limit plus a jitter that spreads restarts."""
        if self.limit_max_requests is None:
            return None
        if not self.limit_max_requests_jitter:
            return self.limit_max_requests
        import random

        return self.limit_max_requests + random.Random(os.getpid() + worker).randint(
            0, self.limit_max_requests_jitter
        )


def load_env_file(path: str) -> None:
    """`--env-file`: put the file's variables into os.environ (python-dotenv); variables
    already set win, as with uvicorn."""
    if not os.path.isfile(path):
        raise ConfigError(f"--env-file: {path}: no such file")
    try:
        from dotenv import load_dotenv
    except ImportError:
        raise ConfigError(
            "--env-file: needs python-dotenv (pip install 'ringloop[serve]')"
        ) from None
    load_dotenv(path, override=False)


class TrustedProxies:
    """`--forwarded-allow-ips`: comma-separated addresses and networks, or `*` for any."""

    def __init__(self, spec: str) -> None:
        self.any = False
        self.hosts: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            if item == "*":
                self.any = True
            elif "/" in item:
                try:
                    self.networks.append(ipaddress.ip_network(item, strict=False))
                except ValueError as exc:
                    raise ConfigError(f"--forwarded-allow-ips: {item!r}: {exc}") from exc
            else:
                self.hosts.add(item)

    def __call__(self, client: Any) -> bool:
        """Whether `client` (a host string, or a `(host, port)` tuple) is a trusted proxy."""
        host = client[0] if isinstance(client, tuple) else client
        if host is None:
            return self.any or "unix" in self.hosts
        if self.any or host in self.hosts:
            return True
        if not self.networks:
            return False
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(addr in net for net in self.networks)
