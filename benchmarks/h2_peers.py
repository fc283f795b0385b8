"""The HTTP/2 suite's servers: who they are, how each is started for h2c or TLS, when it is ready.

Every subject is one server serving the plaintext answer (``Hello, world!``) over HTTP/2, one
worker, access log off, pinned to one CPU by ``taskset``:

- ``ringloop-asgi``: ``ringloop serve --http 2`` (h2c with prior knowledge; over TLS ALPN
  offers only ``h2``), the raw ASGI app of ``http_apps/app_asgi.py``;
- ``granian-asgi``: granian ``--http 2`` with the HTTP suite's other flags (one worker, one
  runtime thread, ``--runtime-mode st``, uvloop);
- ``hypercorn``: hypercorn on uvloop (h2c by prior knowledge, ALPN ``h2`` over TLS);
- ``uvicorn-zttp``: uvicorn ``--http zttp --http2`` (experimental in uvicorn 0.53+);
- ``nginx``: Debian's, ``listen ... http2`` (prior knowledge in cleartext), ``return 200``;
- ``h2-floor``: ``h2_floor/``, a canned responder on the ``h2`` crate and tokio's
  current-thread runtime (the least a server on hyper's HTTP/2 spends; h2c only).

The servers that speak only HTTP/2 on their port do not answer the HTTP suite's HTTP/1.1
readiness GET, so readiness here is a SETTINGS frame answering our client preface. Nothing
here measures: ``h2_suite.py`` loads the servers, ``h2_report.py`` renders.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import http_peers
import tools

PY = http_peers.PY
FLOOR = "h2-floor"
NGINX = "nginx"
FLOOR_DIR = harness.BENCH_DIR / "h2_floor"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@dataclass(frozen=True)
class Tls:
    """A certificate and its key, for the TLS rows."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Subject:
    name: str
    server: str  # the project it comes from (versions, chart colours)
    how: str  # for the README
    command: Callable[[int, Path, Tls | None], list[str]]  # (port, workdir, tls) -> argv
    packages: tuple[str, ...] = ()  # PyPI distributions that must import
    tls: bool = True  # whether it has a TLS row
    reference: bool = False  # canned answers: the body is not checked


def _ringloop(port: int, work: Path, tls: Tls | None) -> list[str]:
    cmd = [*http_peers._ringloop("asgi")("hello", port, work), "--http", "2"]
    if tls:
        cmd += ["--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    return cmd


def _granian(port: int, work: Path, tls: Tls | None) -> list[str]:
    cmd = http_peers._granian("asgi", "st")("hello", port, work)
    cmd[cmd.index("--http") + 1] = "2"
    if tls:
        cmd[-1:-1] = ["--ssl-certificate", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    return cmd


def _hypercorn(port: int, work: Path, tls: Tls | None) -> list[str]:
    # Its access log is off unless --access-logfile is given; uvloop as the other peers.
    cmd = [
        PY,
        "-m",
        "hypercorn",
        *("--bind", f"127.0.0.1:{port}", "--workers", "1", "--worker-class", "uvloop"),
        *("--keep-alive", str(http_peers.KEEP_ALIVE), "--log-level", "warning"),
    ]
    if tls:
        cmd += ["--certfile", str(tls.cert), "--keyfile", str(tls.key)]
    return [*cmd, http_peers.app_spec("asgi", "hello")]


def _uvicorn_zttp(port: int, work: Path, tls: Tls | None) -> list[str]:
    cmd = [*http_peers._uvicorn("uvloop", "zttp")("hello", port, work), "--http2"]
    if tls:
        cmd += ["--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    return cmd


NGINX_CONF = """\
# Written by the HTTP/2 suite for one run: one worker, no access log, a canned answer.
{user}daemon off;
master_process off;
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type text/plain;
    keepalive_timeout 60s;
    # Since 1.19.7 an HTTP/2 connection ends after keepalive_requests requests (1000 by
    # default): h2load would reconnect, which no other server here makes it do.
    keepalive_requests 1000000000;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    server {{
        # nginx 1.22 (Debian's) has no `http2 on;` yet: the listen flag, which in cleartext
        # is HTTP/2 with prior knowledge only.
        listen 127.0.0.1:{port} {listen};
        {tls}
        location = / {{ return 200 "Hello, world!"; }}
    }}
}}
"""


def _nginx(port: int, work: Path, tls: Tls | None) -> list[str]:
    (work / "tmp").mkdir(exist_ok=True)
    user = "user root;\n" if os.geteuid() == 0 else ""
    listen = "ssl http2" if tls else "http2"
    tls_lines = (
        f"ssl_certificate {tls.cert};\n        ssl_certificate_key {tls.key};" if tls else ""
    )
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(user=user, port=port, listen=listen, tls=tls_lines))
    return [http_peers.nginx_path() or "nginx", "-p", str(work), "-c", str(conf), "-e", "stderr"]


def _floor(port: int, work: Path, tls: Tls | None) -> list[str]:
    return [str(build_floor()), str(port)]


SUBJECT_LIST = [
    Subject("ringloop-asgi", "ringloop", "`ringloop serve --http 2`, raw ASGI", _ringloop),
    Subject(
        "granian-asgi",
        "granian",
        "granian `--http 2`, ASGI, `--runtime-mode st --loop uvloop`",
        _granian,
        ("granian", "uvloop"),
    ),
    Subject(
        "hypercorn",
        "hypercorn",
        "hypercorn, ASGI, `--worker-class uvloop`",
        _hypercorn,
        ("hypercorn", "uvloop"),
    ),
    Subject(
        "uvicorn-zttp",
        "uvicorn",
        "uvicorn `--http zttp --http2 --loop uvloop` (experimental)",
        _uvicorn_zttp,
        ("uvicorn", "uvloop", "zttp"),
    ),
    Subject(NGINX, NGINX, "nginx, `listen ... http2`, `return 200`", _nginx, reference=True),
    Subject(
        FLOOR,
        FLOOR,
        "`h2_floor/`: the `h2` crate on tokio, one thread, canned answer",
        _floor,
        tls=False,
        reference=True,
    ),
]
SUBJECTS: dict[str, Subject] = {s.name: s for s in SUBJECT_LIST}
# Who has a TLS row (issue 22: ringloop against granian, nginx as the reference).
TLS_SUBJECTS = ("ringloop-asgi", "granian-asgi", NGINX)


# --------------------------------------------------------------------------- the floor


@functools.cache
def build_floor() -> Path:
    """``h2_floor/``'s binary (``tools.cargo_build``); raises ``harness.ServerFailed``."""
    return tools.cargo_build(FLOOR_DIR, "h2_floor", FLOOR)


# --------------------------------------------------------------------------- availability


def check(subject: Subject) -> str | None:
    """Why ``subject`` cannot run here at all, or None."""
    if subject.name == FLOOR:
        try:
            build_floor()
        except harness.ServerFailed as exc:
            return str(exc)
        return None
    if subject.name == NGINX:
        _path, why = tools.ensure_debian("nginx", "nginx", present=http_peers.nginx_path)
        return why
    for package in subject.packages:
        why = http_peers._import_error(package)
        if why:
            return f"{package} does not import: {why}"
    return None


def versions(subject: Subject) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    names = [*subject.packages, *(["ringloop"] if subject.server == "ringloop" else [])]
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    if subject.name == NGINX and (path := http_peers.nginx_path()):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            text = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10).stderr
            out["nginx"] = text.strip().rpartition("/")[2] or None
    if subject.name == FLOOR:
        out["h2-floor"] = "h2 0.4, tokio current-thread"
    return out


# --------------------------------------------------------------------------- the process


def client_tls() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def answers_h2(port: int, tls: bool) -> bool:
    """Whether the port answers our HTTP/2 client preface with a SETTINGS frame."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            sock = client_tls().wrap_socket(raw) if tls else raw
            if tls and sock.selected_alpn_protocol() != "h2":
                return False
            sock.sendall(PREFACE + EMPTY_SETTINGS)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    return False
                head += chunk
            return head[3] == 0x4
    except OSError:
        return False


class H2Server(http_peers.PeerServer):
    """A subject's process: ready when its port answers HTTP/2 (or, the floor, on its line)."""

    def __init__(self, cmd: list[str], port: int | None, env: dict[str, str], tls: bool):
        super().__init__(cmd, port, env, "/")
        self.tls = tls

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        if self.port is None:
            return super().wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self._drain_stdout()
                raise harness.ServerFailed(self.failure_text())
            if answers_h2(self.port, self.tls):
                return {"type": "ready", "pid": self.pid, "port": self.port}
            time.sleep(0.05)
        self.stop(timeout=5)
        raise harness.ServerFailed(f"no HTTP/2 on port {self.port} after {timeout:.0f}s")


def start(subject: Subject, cpu: int | None, work: Path, tls: Tls | None) -> H2Server:
    """``subject`` serving plaintext over h2c (``tls`` None) or TLS, pinned to ``cpu``."""
    port = None if subject.name == FLOOR else http_peers.free_port()
    cmd = harness.pinned(subject.command(port or 0, work, tls), cpu)
    env = http_peers.server_env(http_peers.APPS_DIR)
    return H2Server(cmd, port, env, tls is not None)
