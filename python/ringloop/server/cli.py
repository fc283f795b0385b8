"""`ringloop serve module:app`: the command line (also `python -m ringloop serve`).

The flags are uvicorn's, with uvicorn's names and defaults where uvicorn has the setting, so a
command line written for uvicorn runs unchanged (its `--loop` and `--http`, which pick what
ringloop replaces, are accepted and ignored with a warning); the defaults are read from
`Config` so the two cannot drift apart. `main()` turns every failure into one line on stderr and an exit
status, never a traceback:

* 2 — a bad flag value (argparse's own checks, then `Config`'s), a TLS key that does not
  load, or a flag whose optional package is missing (python-dotenv, watchfiles):
  `ringloop serve: error: --port: ...`;
* 1 — the application cannot be imported (`importer.AppLoadError`), or the server cannot
  listen;
* 3 — the application's lifespan startup failed (what `server.run` returns);
* 130 — interrupted before the server took over SIGINT.

Settings also come from a TOML file (`--config`) and `RINGLOOP_*` environment variables, under
the flags' own names; a flag wins over both, the environment over the file (`configfile`).
Before anything is imported, `--env-file` is loaded into the environment (python-dotenv;
variables already set win, as with uvicorn), then `WEB_CONCURRENCY` stands in for
`--workers` and `FORWARDED_ALLOW_IPS` for `--forwarded-allow-ips` when they are not given.
One worker without `--reload` runs in this process; more, or `--reload`, go to `supervisor`.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
from typing import Any, NoReturn

# The flags' value types (`argtypes`), under the names the parser below uses.
from .argtypes import boolean as _boolean
from .argtypes import cert_reqs as _cert_reqs
from .argtypes import duration as _duration
from .argtypes import header as _header
from .argtypes import integer as _integer
from .argtypes import seconds as _seconds
from .config import (
    BACKENDS,
    INTERFACES,
    LIFESPANS,
    LOG_LEVELS,
    UVICORN_HTTP,
    WS_MODES,
    Config,
    ConfigError,
)
from .configfile import config_from_args as config_from_args  # the tests parse with it
from .configfile import layered_config

PROG = "ringloop"

# `--watch-threshold` given without a value (seconds).
WATCH_THRESHOLD = 0.05

# Exit statuses (see the module docs).
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def _default(name: str) -> Any:
    """`Config`'s default for a setting: the one source of every default shown in --help."""
    f = _FIELDS[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise KeyError(name)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and exit with 2."""

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --port: invalid ..."; the flag alone reads better.
        message = message.removeprefix("argument ")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows a flag's default when it has one worth showing: not None, not empty, not a bare
    switch; an on/off pair names the form in force."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default:" in text or not action.option_strings:
            return text
        if isinstance(action, argparse.BooleanOptionalAction):
            if default is not None:
                on, off = action.option_strings[:2]
                text += f" (default: {on if default else off})"
        elif default not in (None, False, "", argparse.SUPPRESS) and action.nargs != 0:
            text += " (default: %(default)s)"
        return text


# -- the parser ---------------------------------------------------------------------------------


def _version() -> str:
    from .. import __version__

    return (
        f"ringloop {__version__} with {platform.python_implementation()} "
        f"{platform.python_version()} on {platform.system()}"
    )


def build_parser() -> argparse.ArgumentParser:
    """`ringloop` and its `serve` command (exposed for the tests and for --help)."""
    top = _Parser(
        prog=PROG,
        description="ringloop: an asyncio runtime and HTTP server on io_uring.",
        allow_abbrev=False,
    )
    top.add_argument("--version", action="version", version=_version())
    commands = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = commands.add_parser(
        "serve",
        allow_abbrev=False,
        help="serve an ASGI, WSGI or native application over HTTP/1.1 and HTTP/2",
        description="Serve APP (an ASGI, WSGI or native ringloop application) over HTTP/1.1, "
        "HTTP/2 and WebSocket. The flags are uvicorn's, with the same defaults.",
        formatter_class=_HelpFormatter,
    )
    _add_serve_arguments(serve)
    top.set_defaults(_serve_parser=serve)
    return top


def _add_serve_arguments(p: argparse.ArgumentParser) -> None:
    d = _default
    B = argparse.BooleanOptionalAction  # noqa: N806 - reads like the flag pairs it makes

    g = p.add_argument_group("app")
    g.add_argument(
        "app",
        metavar="APP",
        nargs="?",
        default=None,
        help='the application, as "module:attribute" (or `app` in --config)',
    )
    g.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="read settings from this TOML file: keys are the long flags' names "
        "(port = 8001, timeout-keep-alive = 10); RINGLOOP_<FLAG> environment variables "
        "override it, and flags override both",
    )
    g.add_argument("--version", action="version", version=_version())
    g.add_argument(
        "--interface",
        choices=INTERFACES,
        default=d("interface"),
        help="the application's interface; auto tells a coroutine (ASGI) from a two-argument "
        "callable (WSGI) and a ringloop.server.native_handler",
    )
    g.add_argument(
        "--factory",
        action="store_true",
        help="APP is a factory: call it with no arguments to get the application",
    )
    g.add_argument(
        "--lifespan", choices=LIFESPANS, default=d("lifespan"), help="ASGI lifespan events"
    )
    g.add_argument(
        "--app-dir",
        metavar="DIR",
        default=d("app_dir"),
        help="look for APP in this directory (put first on sys.path)",
    )
    g.add_argument(
        "--env-file",
        metavar="PATH",
        default=None,
        help="load environment variables from this file (dotenv format) before importing APP",
    )
    g.add_argument(
        "--root-path",
        metavar="PATH",
        default=d("root_path"),
        help="the ASGI root_path, for an application mounted below a path by a proxy",
    )

    g = p.add_argument_group("socket")
    g.add_argument("--host", default=d("host"), help="bind to this address")
    g.add_argument("--port", type=_integer(), default=d("port"), help="bind to this TCP port")
    g.add_argument("--uds", metavar="PATH", default=None, help="bind to this Unix socket")
    g.add_argument(
        "--fd",
        type=_integer(0),
        default=None,
        help="serve the listening socket this file descriptor holds (inherited)",
    )
    g.add_argument(
        "--backlog",
        metavar="N",
        type=_integer(),
        default=d("backlog"),
        help="the listen() backlog: connections the kernel queues before they are accepted",
    )

    g = p.add_argument_group("HTTP")
    g.add_argument(
        "--proxy-headers",
        action=B,
        default=d("proxy_headers"),
        help="take the client's address and scheme from X-Forwarded-For/-Proto "
        "(only from the addresses in --forwarded-allow-ips)",
    )
    g.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        default=None,
        help="comma-separated addresses and networks trusted to set proxy headers, or '*' "
        "(default: $FORWARDED_ALLOW_IPS, else 127.0.0.1)",
    )
    g.add_argument(
        "--server-header", action=B, default=d("server_header"), help="send 'server: ringloop'"
    )
    g.add_argument("--date-header", action=B, default=d("date_header"), help="send 'date'")
    g.add_argument(
        "--header",
        dest="headers",
        metavar="NAME:VALUE",
        type=_header,
        action="append",
        default=None,
        help="a header sent with every response (repeat for more)",
    )

    g = p.add_argument_group("limits and timeouts")
    g.add_argument(
        "--limit-concurrency",
        metavar="N",
        type=_integer(),
        default=None,
        help="answer 503 beyond this many connections and tasks at once",
    )
    g.add_argument(
        "--limit-max-requests",
        metavar="N",
        type=_integer(),
        default=None,
        help="a worker stops gracefully after this many requests (with --workers, the "
        "supervisor starts a fresh one)",
    )
    g.add_argument(
        "--limit-max-requests-jitter",
        metavar="N",
        type=_integer(),
        default=d("limit_max_requests_jitter"),
        help="add up to this many requests to each worker's limit, so workers do not all "
        "restart at once",
    )
    g.add_argument(
        "--limit-max-rss",
        metavar="MIB",
        type=_integer(),
        default=None,
        help="with --workers: replace a worker whose resident memory passes this many MiB",
    )
    g.add_argument(
        "--limit-request-line",
        metavar="BYTES",
        type=_integer(),
        default=d("limit_request_line"),
        help="longest request line (414 beyond)",
    )
    g.add_argument(
        "--limit-request-headers",
        metavar="COUNT",
        type=_integer(),
        default=d("limit_request_headers"),
        help="most header fields in a request (431 beyond; at most 256)",
    )
    g.add_argument(
        "--limit-request-header-size",
        metavar="BYTES",
        type=_integer(),
        default=d("limit_request_header_size"),
        help="largest header section of a request (431 beyond)",
    )
    g.add_argument(
        "--limit-request-body",
        metavar="BYTES",
        type=_integer(),
        default=None,
        help="largest request body (413 beyond; default: no limit)",
    )
    g.add_argument(
        "--timeout-keep-alive",
        metavar="SECONDS",
        type=_seconds,
        default=d("timeout_keep_alive"),
        help="close a keep-alive connection idle this long",
    )
    g.add_argument(
        "--timeout-request-head",
        metavar="SECONDS",
        type=_seconds,
        default=d("timeout_request_head"),
        help="longest wait for a request's head once it has begun",
    )
    g.add_argument(
        "--timeout-request-body",
        metavar="SECONDS",
        type=_seconds,
        default=d("timeout_request_body"),
        help="longest wait for the next piece of a request's body",
    )
    g.add_argument(
        "--timeout-graceful-shutdown",
        metavar="SECONDS",
        type=_seconds,
        default=None,
        help="on shutdown, wait this long for requests in flight, then close them "
        "(default: wait for them all)",
    )
    g.add_argument(
        "--timeout-drain-idle",
        metavar="SECONDS",
        type=_seconds,
        default=d("timeout_drain_idle"),
        help="on shutdown (and when a worker is replaced), a keep-alive connection used within "
        "this long stays open for its client's next request, answered with 'connection: "
        "close', instead of being closed as that request is sent; 0 closes idle connections "
        "at once",
    )

    g = p.add_argument_group("TLS")
    g.add_argument("--ssl-keyfile", metavar="PATH", default=None, help="the private key (PEM)")
    g.add_argument(
        "--ssl-certfile", metavar="PATH", default=None, help="the certificate chain (PEM)"
    )
    g.add_argument(
        "--ssl-keyfile-password", metavar="PASSWORD", default=None, help="the key's password"
    )
    g.add_argument(
        "--ssl-ca-certs", metavar="PATH", default=None, help="CA certificates to verify clients"
    )
    g.add_argument(
        "--ssl-cert-reqs",
        metavar="N",
        type=_cert_reqs,
        default=d("ssl_cert_reqs"),
        help="client certificates: 0 none, 1 optional, 2 required",
    )
    g.add_argument(
        "--ssl-ciphers",
        metavar="CIPHERS",
        default=d("ssl_ciphers"),
        help="OpenSSL-style cipher list, mapped onto rustls's suites",
    )
    g.add_argument(
        "--ssl-crl",
        metavar="PATH",
        action="append",
        default=None,
        help="a PEM certificate revocation list for client certificates (repeatable)",
    )
    g.add_argument(
        "--ssl-protocol-min",
        metavar="VERSION",
        choices=("tls1.2", "tls1.3"),
        default=None,
        help="the lowest TLS version accepted: tls1.2 (default) or tls1.3",
    )

    g = p.add_argument_group("logging")
    g.add_argument(
        "--log-level", choices=LOG_LEVELS, default=d("log_level"), help="the server's log level"
    )
    g.add_argument(
        "--access-log", action=B, default=d("access_log"), help="one log line per response"
    )
    g.add_argument(
        "--access-log-format",
        metavar="FORMAT",
        default=None,
        help="a %%-style format over client_addr, method, path, http_version, request_line, "
        "status_code, status_phrase, bytes, duration_ms (default: uvicorn's line)",
    )
    g.add_argument(
        "--use-colors",
        action=B,
        default=None,
        help="colour the log (default: when stderr is a terminal)",
    )

    g = p.add_argument_group("watch and metrics")
    g.add_argument(
        "--watch-threshold",
        metavar="SECONDS",
        type=_seconds,
        nargs="?",
        const=WATCH_THRESHOLD,
        default=None,
        help="log every slice that blocks the loop this long, with the request that owned it "
        f"(method, path, route, request id, client, duration, line); {WATCH_THRESHOLD} when "
        "given without a value (default: off)",
    )
    g.add_argument(
        "--metrics-port",
        metavar="PORT",
        type=_integer(0),
        default=None,
        help="serve Prometheus metrics on http://HOST:PORT/metrics (prometheus_client); "
        "with --workers N, worker i on PORT+i",
    )
    g.add_argument(
        "--metrics-host",
        metavar="HOST",
        default=d("metrics_host"),
        help="the address --metrics-port binds to",
    )

    g.add_argument(
        "--health-port",
        metavar="PORT",
        type=_integer(0),
        default=None,
        help="answer a readiness probe on http://HOST:PORT/healthz from a thread of its own: "
        "200 while the loop's lag is under --health-max-lag, 503 naming the lag (and, with "
        "--watch-threshold, the request blocking the loop) when over; worker i on PORT+i",
    )
    g.add_argument(
        "--health-host", metavar="HOST", default=d("health_host"), help="where --health-port binds"
    )
    g.add_argument(
        "--health-path", metavar="PATH", default=d("health_path"), help="the probe's path"
    )
    g.add_argument(
        "--health-max-lag",
        metavar="SECONDS",
        type=_seconds,
        default=d("health_max_lag"),
        help="the probe answers 503 once the loop is this late",
    )

    g = p.add_argument_group("workers")
    g.add_argument(
        "--workers",
        metavar="N",
        type=_integer(),
        default=None,
        help="worker processes, each with its own loop and SO_REUSEPORT listener "
        "(default: $WEB_CONCURRENCY, else 1; 1 runs in this process)",
    )
    g.add_argument(
        "--loop",
        dest="uvicorn_loop",
        metavar="NAME",
        default=None,
        help="uvicorn's choice of event loop, accepted and ignored: ringloop runs its own",
    )
    g.add_argument(
        "--loop-backend",
        choices=BACKENDS,
        default=d("loop_backend"),
        help="the loop's reactor (auto: io_uring when the kernel allows it, else epoll)",
    )
    g.add_argument(
        "--wsgi-threads",
        metavar="N",
        type=_integer(),
        default=d("wsgi_threads"),
        help="threads that run a WSGI application's calls",
    )
    g.add_argument(
        "--timeout-worker-healthcheck",
        metavar="SECONDS",
        type=_seconds,
        default=d("timeout_worker_healthcheck"),
        help="with --workers: kill and replace a worker whose loop does not answer the "
        "supervisor's ping within this long",
    )

    g = p.add_argument_group("development")
    g.add_argument(
        "--reload",
        action="store_true",
        help="restart the server when a watched file changes (one worker; development only)",
    )
    g.add_argument(
        "--reload-dir",
        dest="reload_dirs",
        metavar="DIR",
        action="append",
        default=None,
        help="a directory to watch (repeat for more; default: the current directory)",
    )
    g.add_argument(
        "--reload-include",
        dest="reload_includes",
        metavar="GLOB",
        action="append",
        default=None,
        help="also reload on changes to files matching this pattern (default: *.py)",
    )
    g.add_argument(
        "--reload-exclude",
        dest="reload_excludes",
        metavar="GLOB",
        action="append",
        default=None,
        help="ignore changes to files or directories matching this pattern "
        "(default: .*, .py[cod], .sw.*, ~*)",
    )
    g.add_argument(
        "--reload-delay",
        metavar="SECONDS",
        type=_seconds,
        default=d("reload_delay"),
        help="wait this long after a change for more before restarting",
    )

    g = p.add_argument_group("HTTP/2")
    g.add_argument(
        "--http",
        metavar="{auto,1,2}",
        default=None,
        help="protocols spoken: auto (HTTP/2 to a client that asks: ALPN h2 over TLS, the h2c "
        "preface in cleartext; else HTTP/1.1), 1 (HTTP/1.1 only), 2 (HTTP/2 only); uvicorn's "
        "h11 and httptools are accepted and ignored",
    )
    for name, what in (
        ("max-concurrent-streams", "streams a client may have open at once"),
        ("initial-stream-window-size", "request body bytes a stream may send ahead of the app"),
        (
            "initial-connection-window-size",
            "request body bytes a connection may send ahead of the apps",
        ),
        ("max-headers-size", "largest decoded request head"),
        ("max-frame-size", "largest frame the client may send"),
        (
            "max-reset-streams",
            "streams a client may reset before their response (net of those answered) before "
            "GOAWAY ENHANCE_YOUR_CALM (Rapid Reset, CVE-2023-44487)",
        ),
        (
            "max-empty-frames",
            "empty DATA/HEADERS/CONTINUATION frames in a row before GOAWAY ENHANCE_YOUR_CALM "
            "(CVE-2019-9518)",
        ),
    ):
        g.add_argument(
            f"--http2-{name}",
            metavar="N",
            type=_integer(),
            default=d(f"http2_{name.replace('-', '_')}"),
            help=what,
        )
    g.add_argument(
        "--http2-send-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=d("http2_send_timeout"),
        help="reset a stream whose response waits this long on a closed flow-control window "
        "(a client that gives no credit, CVE-2019-9517)",
    )
    g.add_argument(
        "--http2-keep-alive-interval",
        metavar="MS",
        type=_integer(0),
        default=d("http2_keep_alive_interval"),
        help="send a PING after this many milliseconds without a byte from the client "
        "(0: never, the default)",
    )
    g.add_argument(
        "--http2-keep-alive-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=d("http2_keep_alive_timeout"),
        help="close a connection whose PING is not acknowledged within this time",
    )

    g = p.add_argument_group("WebSocket")
    g.add_argument(
        "--ws",
        choices=WS_MODES,
        default=d("ws"),
        help="WebSocket support (auto: for ASGI apps and native handlers given websocket=; "
        "off: upgrade requests are plain HTTP requests)",
    )
    g.add_argument(
        "--ws-max-size",
        metavar="BYTES",
        type=_integer(),
        default=d("ws_max_size"),
        help="largest incoming WebSocket message",
    )
    g.add_argument(
        "--ws-ping-interval",
        metavar="SECONDS",
        type=_seconds,
        default=d("ws_ping_interval"),
        help="send a WebSocket ping this often",
    )
    g.add_argument(
        "--ws-ping-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=d("ws_ping_timeout"),
        help="close a WebSocket whose pong takes longer",
    )
    g.add_argument(
        "--ws-per-message-deflate",
        metavar="BOOL",
        type=_boolean,
        nargs="?",
        const=True,
        default=d("ws_per_message_deflate"),
        help="offer permessage-deflate compression",
    )

    g = p.add_argument_group("static files (served before the application)")
    g.add_argument(
        "--static-path-route",
        metavar="ROUTE",
        action="append",
        default=None,
        help="URL path of a static mount; repeatable, the i-th route serves the i-th mount "
        "(one mount without a route: /static)",
    )
    g.add_argument(
        "--static-path-mount",
        metavar="DIR",
        action="append",
        default=None,
        help="directory served natively at its route (GET/HEAD; ETag, ranges, .br/.gz "
        "siblings); repeatable",
    )
    g.add_argument(
        "--static-path-expires",
        metavar="DURATION",
        action="append",
        type=_duration,
        default=None,
        help="Cache-Control max-age for static files: seconds or 30m/12h/1d, 0 for none "
        "(default 1d); one for all mounts or one per mount",
    )


def _serve_words(argv: list[str] | None) -> list[str]:
    words = list(sys.argv[1:] if argv is None else argv)
    return words[words.index("serve") + 1 :] if "serve" in words else words


def main(argv: list[str] | None = None) -> int:
    """`ringloop ...`: the exit status (see the module docs)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # The top-level parser collects what `serve` did not know; say it as `serve`'s error.
        (args._serve_parser if args.command == "serve" else parser).error(
            f"unrecognized arguments: {' '.join(extra)}"
        )
    if args.command != "serve":
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"{PROG} serve"
    try:
        config = layered_config(args, _serve_words(argv))
        config.ssl_context()  # a key or certificate that does not load is a flag error
        if config.metrics_port is not None:
            from .metrics import require_client

            require_client()
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.uvicorn_loop is not None:
        print(f"{prog}: warning: --loop is uvicorn's; ignored", file=sys.stderr)
    if args.http in UVICORN_HTTP:
        print(f"{prog}: warning: --http {args.http} is uvicorn's; ignored", file=sys.stderr)
    if config.workers == 1 and not config.reload and config.limit_max_rss is not None:
        # Nothing would start the replacement: say so rather than ignore the flag quietly.
        print(
            f"{prog}: warning: --limit-max-rss needs a supervisor (--workers 2 or more); ignored",
            file=sys.stderr,
        )
    try:
        from .entry import run_config

        return run_config(config)
    except ConfigError as exc:  # what only the supervisor or reloader can tell
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl+C before the server installed its own SIGINT handler (importing the app).
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
