"""The server's logs: `ringloop.server` (errors, lifecycle) and `ringloop.access` (one line per
response, uvicorn's format by default: `127.0.0.1:51234 - "GET /path?q HTTP/1.1" 200`).

`--access-log-format` takes a %-style string over these fields: `client_addr`, `method`,
`path` (with the query string), `http_version`, `request_line`, `status_code`, `status_phrase`,
`bytes`, `duration_ms`. The line is formatted only when the logger is enabled for INFO, so a
disabled access log costs one level check per response.
"""

from __future__ import annotations

import http
import logging
import sys

logger = logging.getLogger("ringloop.server")
access_logger = logging.getLogger("ringloop.access")

TRACE = 5
LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE,
}
DEFAULT_ACCESS_FORMAT = '%(client_addr)s - "%(request_line)s" %(status_code)d'


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def configure(level: str = "info", use_colors: bool | None = None) -> None:
    """Give both loggers a stderr handler (unless the application configured them) and the
    level asked for."""
    logging.addLevelName(TRACE, "TRACE")
    fmt = logging.Formatter("%(levelname)s:     %(message)s")
    for name in ("ringloop.server", "ringloop.access"):
        lg = logging.getLogger(name)
        if not lg.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(fmt)
            lg.addHandler(handler)
            lg.propagate = False
        lg.setLevel(LEVELS[level.lower()])


def error(message: str, exc: BaseException | None) -> None:
    """An application's error, with its traceback (called by the connection)."""
    if exc is None:
        logger.error(message)
    else:
        logger.error(message, exc_info=(type(exc), exc, exc.__traceback__))


def debug(message: str, client) -> None:
    """A rejected request: the rule it broke, at debug level."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s (client %s)", message, _client(client))


def _client(client) -> str:
    return f"{client[0]}:{client[1]}" if client else "-"


class AccessLog:
    """The connection's per-response callback (see `ServerState`)."""

    def __init__(self, fmt: str | None = None) -> None:
        self.fmt = fmt or DEFAULT_ACCESS_FORMAT

    def __call__(self, client, method, path, query, version, status, sent, seconds) -> None:
        if not access_logger.isEnabledFor(logging.INFO):
            return
        full = f"{path}?{query.decode('latin-1')}" if query else path
        fields = {
            "client_addr": _client(client),
            "method": method,
            "path": full,
            "http_version": version,
            "request_line": f"{method} {full} HTTP/{version}",
            "status_code": status,
            "status_phrase": _phrase(status),
            "bytes": sent,
            "duration_ms": round(seconds * 1000, 3),
        }
        access_logger.info(self.fmt, fields)
