"""The listening sockets `ringloop serve` serves: `--fd`, `--uds` or `--host`/`--port`.

Bound by whoever owns the listeners' lifetime: the worker itself (one process), the supervisor
of `--workers` (one `SO_REUSEPORT` listener per slot, see `supervisor`), or the reloader of
`--reload`. This module knows nothing of the server that accepts on them.
"""

from __future__ import annotations

import contextlib
import os
import socket

from .config import Config, ConfigError


def bind_socket(config: Config, *, reuse_port: bool = False) -> socket.socket:
    """The listening socket `config` asks for: `--fd`, `--uds` or `--host`/`--port`."""
    if config.fd is not None:
        sock = socket.socket(fileno=config.fd)
        sock.setblocking(False)
        return sock
    if config.uds:
        path = config.uds
        with contextlib.suppress(FileNotFoundError):
            if os.path.exists(path) and not _is_socket(path):
                raise ConfigError(f"--uds: {path} exists and is not a socket")
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chmod(path, 0o666)
    else:
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((config.host, config.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot listen on {config.host}:{config.port}: {exc.strerror}"
            ) from exc
    sock.listen(config.backlog)
    sock.setblocking(False)
    return sock


def _is_socket(path: str) -> bool:
    import stat

    return stat.S_ISSOCK(os.stat(path).st_mode)


def bind_tcp(
    host: str, port: int, *, reuse_port: bool, flag: str, backlog: int = 128
) -> socket.socket:
    """A side listener of a worker's own (`--metrics-port`, `--health-port`), non-blocking;
    `SO_REUSEPORT` lets a replacement bind the same port while the worker it replaces runs.
    A failure is a `ConfigError` naming `flag`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{flag}: cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
