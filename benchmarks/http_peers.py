"""The HTTP suite's servers: who they are, how each is started, and the process that runs one.

Every subject of the suite (a row of its tables) is one server speaking one interface —
``ringloop-asgi``, ``granian-rsgi``, ``uvicorn``, ``nginx``... — started as its own process,
one worker, access log off, with the settings its documentation gives for benchmarking, and
pinned to one CPU by ``taskset`` (inherited by every process and thread it starts). The apps
they serve live in ``http_apps/`` (one module per interface or framework); a subject's
``command`` names one of the app's responses (``hello``, ``big``, ``upload``, ``json``).

``PeerServer`` is ``harness.ServerProcess`` for servers that do not speak the benchmark's
line protocol: ready once its port answers HTTP, stopped with SIGTERM (and its leftover
processes killed), its stderr kept for the crash record. ``check`` says why a subject cannot
run here at all (a package or binary missing, installed from Debian where that is how it
comes); ``versions`` is what the JSON records of each. ``HEAD_TIMEOUTS`` says how each
server is given a head timeout for the slowloris scenario, where it has one.

Nothing here measures: ``http_suite.py`` loads the servers, ``http_report.py`` renders.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import queue
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import tools

APPS_DIR = harness.BENCH_DIR / "http_apps"
PY = sys.executable
# Long enough for the idle-connection scenario (it holds connections for a few seconds) on
# every server that has such a timeout; wrk's connections are never idle that long.
KEEP_ALIVE = 60

FLOOR = "c-floor"
NGINX = "nginx"

# --------------------------------------------------------------------------- the subjects


@dataclass(frozen=True)
class Subject:
    """One row: a server speaking one interface."""

    name: str
    server: str  # the project it comes from (versions, chart colours)
    interface: str  # "asgi", "native", "wsgi" or "reference"
    how: str  # how it runs, for the README
    command: Callable[[str, int, Path], list[str]]  # (response, port, workdir) -> argv
    packages: tuple[str, ...] = ()  # PyPI distributions that must import (versions recorded)
    debian: str | None = None  # Debian package a missing shared library comes from

    @property
    def reference(self) -> bool:
        return self.interface == "reference"

    def serves(self, response: str) -> bool:
        # The FastAPI app is ASGI; the references answer every scenario with canned bytes.
        return response != "json" or self.interface in ("asgi", "reference")


def app_spec(interface: str, response: str) -> str:
    """``module:attribute`` of the app serving ``response`` in ``http_apps/``."""
    if response == "json":
        return "app_fastapi:json"
    module = {"asgi": "app_asgi", "native": "app_native", "wsgi": "app_wsgi", "rsgi": "app_rsgi"}
    return f"{module[interface]}:{response}"


def _app(script: str) -> str:
    return str(APPS_DIR / script)


def _ringloop(interface: str) -> Callable[[str, int, Path], list[str]]:
    # The command line a user types: one worker, no access log, warnings only, and a 60 s
    # keep-alive timeout (the idle scenario holds its connections for seconds; every server
    # gets at least that where it has one).
    return lambda resp, port, work: [
        PY,
        "-m",
        "ringloop",
        "serve",
        app_spec(interface, resp),
        *("--app-dir", str(APPS_DIR), "--interface", interface),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--no-access-log", "--log-level", "warning", "--timeout-keep-alive", "60"),
    ]


def _granian(interface: str, mode: str) -> Callable[[str, int, Path], list[str]]:
    # granian's published method: 1 worker, 1 runtime thread, --runtime-mode st for ASGI
    # and mt otherwise, --http 1, --no-ws, uvloop on the async interfaces. Its access log
    # is off unless asked for. --backpressure: its default (backlog / workers = 1024) stops
    # it serving connections past the 1024th, and the idle scenario holds 10,000; with 64
    # connections elsewhere the limit is never reached either way.
    def command(resp: str, port: int, work: Path) -> list[str]:
        return [
            PY,
            "-m",
            "granian",
            "--interface",
            interface,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--runtime-threads",
            "1",
            "--runtime-mode",
            mode,
            *(["--loop", "uvloop"] if interface != "wsgi" else []),
            "--http",
            "1",
            "--no-ws",
            "--backpressure",
            "16384",
            "--log-level",
            "warning",
            app_spec(interface, resp),
        ]

    return command


def _uvicorn(loop: str, http: str) -> Callable[[str, int, Path], list[str]]:
    return lambda resp, port, work: [
        PY,
        "-m",
        "uvicorn",
        app_spec("asgi", resp),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        loop,
        "--http",
        http,
        "--no-access-log",
        "--log-level",
        "warning",
        "--timeout-keep-alive",
        str(KEEP_ALIVE),
    ]


def _socketify_cli(interface: str) -> Callable[[str, int, Path], list[str]]:
    return lambda resp, port, work: [
        PY,
        "-m",
        "socketify",
        app_spec(interface, resp),
        "--interface",
        interface,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--disable-listen-log",
        "true",
    ]


def _cymongoose(interface: str) -> Callable[[str, int, Path], list[str]]:
    def command(resp: str, port: int, work: Path) -> list[str]:
        what = resp if interface == "native" else app_spec(interface, resp)
        return [PY, _app("app_cymongoose.py"), interface, what, str(port)]

    return command


def _nginx(resp: str, port: int, work: Path) -> list[str]:
    conf = write_nginx_conf(work, port)
    return [nginx_path() or "nginx", "-p", str(work), "-c", str(conf), "-e", "stderr"]


def _floor(resp: str, port: int, work: Path) -> list[str]:
    # The floor picks its own port and says it on its ready line; -1: taskset pins it.
    body = ["65536"] if resp == "big" else []
    return [str(work / "http_floor"), "-1", *body]


SUBJECT_LIST = [
    Subject(
        "ringloop-asgi", "ringloop", "asgi", "`ringloop serve --interface asgi`", _ringloop("asgi")
    ),
    Subject(
        "ringloop-native",
        "ringloop",
        "native",
        "`ringloop serve --interface native`",
        _ringloop("native"),
    ),
    Subject(
        "ringloop-wsgi", "ringloop", "wsgi", "`ringloop serve --interface wsgi`", _ringloop("wsgi")
    ),
    Subject(
        "granian-asgi",
        "granian",
        "asgi",
        "granian ASGI, `--runtime-mode st --loop uvloop`",
        _granian("asgi", "st"),
        ("granian", "uvloop"),
    ),
    Subject(
        "granian-rsgi",
        "granian",
        "native",
        "granian RSGI (its own interface), `--runtime-mode mt --loop uvloop`",
        _granian("rsgi", "mt"),
        ("granian", "uvloop"),
    ),
    Subject(
        "granian-wsgi",
        "granian",
        "wsgi",
        "granian WSGI, `--runtime-mode mt`",
        _granian("wsgi", "mt"),
        ("granian",),
    ),
    Subject(
        "uvicorn",
        "uvicorn",
        "asgi",
        "uvicorn, `--loop uvloop --http httptools`",
        _uvicorn("uvloop", "httptools"),
        ("uvicorn", "uvloop", "httptools"),
    ),
    Subject(
        "uvicorn-zttp",
        "uvicorn",
        "asgi",
        "uvicorn, `--loop uvloop --http zttp`",
        _uvicorn("uvloop", "zttp"),
        ("uvicorn", "uvloop", "zttp"),
    ),
    Subject(
        "uvicorn-ringloop",
        "uvicorn",
        "asgi",
        "uvicorn, `--loop ringloop:new_event_loop --http httptools`",
        _uvicorn("ringloop:new_event_loop", "httptools"),
        ("uvicorn", "httptools"),
    ),
    Subject(
        "cymongoose",
        "cymongoose",
        "native",
        "cymongoose `Manager` event handler (its own API)",
        _cymongoose("native"),
        ("cymongoose",),
    ),
    Subject(
        "cymongoose-asgi",
        "cymongoose",
        "asgi",
        "`cymongoose.asgi.serve`",
        _cymongoose("asgi"),
        ("cymongoose",),
    ),
    Subject(
        "cymongoose-wsgi",
        "cymongoose",
        "wsgi",
        "`cymongoose.wsgi.serve` (its default 4 threads)",
        _cymongoose("wsgi"),
        ("cymongoose",),
    ),
    Subject(
        "socketify",
        "socketify",
        "native",
        "socketify `App` (its own API)",
        lambda resp, port, work: [PY, _app("app_socketify.py"), resp, str(port), PATHS[resp]],
        ("socketify",),
        "libuv1",
    ),
    Subject(
        "socketify-asgi",
        "socketify",
        "asgi",
        "`python -m socketify --interface asgi`",
        _socketify_cli("asgi"),
        ("socketify",),
        "libuv1",
    ),
    Subject(
        "socketify-wsgi",
        "socketify",
        "wsgi",
        "`python -m socketify --interface wsgi`",
        _socketify_cli("wsgi"),
        ("socketify",),
        "libuv1",
    ),
    Subject(
        "aiohttp",
        "aiohttp",
        "native",
        "`aiohttp.web` handlers on uvloop (its own API)",
        lambda resp, port, work: [PY, _app("app_aiohttp.py"), resp, str(port), PATHS[resp]],
        ("aiohttp", "uvloop"),
    ),
    Subject(
        NGINX, NGINX, "reference", "nginx, canned responses (`return 200`, a static file)", _nginx
    ),
    Subject(FLOOR, FLOOR, "reference", "`http_floor.c`: canned responder in C on epoll", _floor),
]
SUBJECTS: dict[str, Subject] = {s.name: s for s in SUBJECT_LIST}


# --------------------------------------------------------------------------- head timeouts


@dataclass(frozen=True)
class HeadTimeout:
    """How a server is told to close a connection whose request head is still incomplete."""

    flag: str  # the command-line flag (nginx: its configuration directive)
    value: Callable[[float], str]  # seconds -> the flag's value
    note: str | None = None  # when the flag is not really a head timeout: what it does


# By server (``Subject.server``); a server missing here has no such setting and runs the
# slowloris scenario with its defaults.
HEAD_TIMEOUTS: dict[str, HeadTimeout] = {
    "ringloop": HeadTimeout("--timeout-request-head", lambda s: f"{s:g}"),
    # Milliseconds, 1..60000; its default is 30 s.
    "granian": HeadTimeout("--http1-header-read-timeout", lambda s: str(round(s * 1000))),
    # uvicorn has none (uvicorn issue #157 lists a --timeout-request-start as not done): its
    # keep-alive timer, the nearest setting, is armed only once a response is complete and
    # cancelled by every byte received (httptools_impl.py, data_received), so a connection
    # that never finishes its first head is never timed out. Set anyway, so the run shows it.
    "uvicorn": HeadTimeout(
        "--timeout-keep-alive",
        lambda s: f"{s:g}",
        "uvicorn has no head timeout; its keep-alive timer is armed only after a response "
        "and reset by every byte received",
    ),
    NGINX: HeadTimeout("client_header_timeout", lambda s: f"{s:g}s"),
}


def head_timeout(subject: Subject) -> HeadTimeout | None:
    return HEAD_TIMEOUTS.get(subject.server)


def head_timeout_text(subject: Subject, seconds: float) -> str | None:
    """The setting a slowloris run gives ``subject`` (``--timeout-request-head 5``), or None."""
    ht = head_timeout(subject)
    return None if ht is None else f"{ht.flag} {ht.value(seconds)}"


def _with_flag(cmd: list[str], flag: str, value: str) -> list[str]:
    """``cmd`` with ``flag`` set to ``value``: replaced where the command has it, else added."""
    if flag in cmd:
        i = cmd.index(flag)
        return [*cmd[: i + 1], value, *cmd[i + 2 :]]
    return [*cmd, flag, value]


# The path each response is requested at (nginx routes on it; the Python apps ignore it).
PATHS = {"hello": "/", "json": "/json", "big": "/64k", "upload": "/upload"}

# --------------------------------------------------------------------------- nginx

NGINX_CONF = """\
# Written by the HTTP suite for one run: one worker, no access log, canned answers.
{user}daemon off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid nginx.pid;
error_log stderr warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    default_type text/plain;
    keepalive_timeout {keep_alive}s;
    # nginx's default, 60 s, except in the slowloris scenario (its head timeout there).
    client_header_timeout {head_timeout};
    # nginx closes a keep-alive connection after 1000 requests by default; wrk would then
    # reconnect, which no other server here makes it do.
    keepalive_requests 1000000000;
    sendfile on;
    open_file_cache max=16;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        location = / {{ return 200 "Hello, world!"; }}
        location = /json {{
            default_type application/json;
            return 200 '{{"message":"Hello, world!"}}';
        }}
        # A 64 KiB string does not fit nginx's configuration parser: a file, as nginx serves.
        location = /64k {{ root www; default_type application/octet-stream; }}
        # The body is read and discarded before the answer, on a keep-alive connection.
        location = /upload {{ client_max_body_size 2m; return 200 "Hello, world!"; }}
    }}
}}
"""


def write_nginx_conf(work: Path, port: int, head_timeout: float | None = None) -> Path:
    """The configuration (and the 64 KiB file) for one nginx run, under ``work``.

    ``head_timeout``: seconds for ``client_header_timeout`` (default: nginx's own, 60 s).
    """
    (work / "www").mkdir(exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    (work / "www" / "64k").write_bytes(b"x" * 65536)
    # As root, nginx's workers would switch to "nobody", who cannot read a private temp dir.
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = work / "nginx.conf"
    header = HEAD_TIMEOUTS[NGINX].value(60.0 if head_timeout is None else head_timeout)
    conf.write_text(
        NGINX_CONF.format(user=user, keep_alive=KEEP_ALIVE, head_timeout=header, port=port)
    )
    return conf


def nginx_path() -> str | None:
    for candidate in ("/usr/sbin/nginx", "/usr/local/sbin/nginx"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


# --------------------------------------------------------------------------- availability


def check(subject: Subject, floor: str | None, floor_error: str | None) -> str | None:
    """Why ``subject`` cannot run on this machine at all, or None.

    Python peers must import in the interpreter that runs them (in a child process: a peer
    that crashes on import must not take the runner with it); a shared library Debian ships
    (socketify's libuv) is installed once when that import says it is missing. A peer whose
    start fails for any other reason is found out when it is run, and recorded as a crash.
    """
    if subject.name == FLOOR:
        return floor_error if floor is None else None
    if subject.name == NGINX:
        _path, why = tools.ensure_debian("nginx", "nginx", present=nginx_path)
        return why
    for package in subject.packages:
        why = _import_error(package)
        if why and subject.debian and ".so" in why:
            tools.ensure_debian(subject.debian, subject.debian, present=lambda: None)
            why = _import_error(package)
        if why:
            return f"{package} does not import: {why}"
    return None


def _import_error(module: str) -> str | None:
    try:
        proc = subprocess.run(
            [PY, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if proc.returncode == 0 else harness.last_line(proc.stderr, "(no output)")


def versions(subject: Subject) -> dict[str, str | None]:
    """The versions that matter for ``subject``: its packages, its server's, ringloop's build."""
    out: dict[str, str | None] = {}
    names = list(subject.packages)
    if subject.server == "ringloop" or subject.name == "uvicorn-ringloop":
        names.append("ringloop")
    if subject.interface == "asgi":
        names += ["fastapi", "pydantic"]  # the JSON scenario's framework
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    if subject.name == NGINX and (path := nginx_path()):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            text = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10).stderr
            out["nginx"] = text.strip().rpartition("/")[2] or None
    if subject.name == FLOOR:
        out["c-floor"] = "gcc -O2"
    return out


def version_text(subject: Subject, found: dict[str, str | None]) -> str:
    """One version for the tables: the server's own (ringloop's for its rows)."""
    key = "ringloop" if subject.server == "ringloop" else subject.server
    return found.get(key) or "?"


def ringloop_build() -> str | None:
    """When ringloop's package was last modified (its newest .py or .so), without importing it.

    Recorded per run: the native module is rebuilt into the tree while others work on it,
    and rounds that measured different builds must be noticed.
    """
    spec = importlib.util.find_spec("ringloop")
    if spec is None or spec.origin is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        files = Path(spec.origin).parent.rglob("*")
        newest = max(p.stat().st_mtime for p in files if p.suffix in (".py", ".so"))
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(newest))
    return None


# --------------------------------------------------------------------------- the process


def free_port() -> int:
    """A TCP port nobody listens on now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(apps_dir: Path) -> dict[str, str]:
    """The environment a peer server runs in: the apps of ``apps_dir`` importable, its output
    unbuffered (so the crash record's stderr is whole) and no bytecode written into
    ``benchmarks/``."""
    return {
        **os.environ,
        "PYTHONPATH": str(apps_dir),
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


class PeerServer(harness.ServerProcess):
    """A server that knows nothing of our line protocol: ready when its port answers.

    ``port`` None means the command does speak the protocol (the C floor): its ready line
    is awaited as usual. Stopping sends SIGTERM (every server here shuts down on it; the
    floor also stops on stdin EOF), and kills whatever of its process tree is still there
    after the timeout: granian's and nginx's workers must not outlive a run.
    """

    def __init__(self, cmd: list[str], port: int | None, env: dict[str, str], ready_path: str):
        super().__init__(cmd, env)
        self.port = port
        self.ready_path = ready_path

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        if self.port is None:
            ready = super().wait_ready(timeout)
            self.port = ready["port"]
            return ready
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self._drain_stdout()
                raise harness.ServerFailed(self.failure_text())
            if answers(self.port, self.ready_path):
                return {"type": "ready", "pid": self.pid, "port": self.port}
            time.sleep(0.05)
        self.stop(timeout=5)
        raise harness.ServerFailed(f"not answering on port {self.port} after {timeout:.0f}s")

    def _drain_stdout(self) -> None:
        with contextlib.suppress(queue.Empty):
            while self._next(timeout=1) is not None:
                pass

    def stop(self, timeout: float = 10) -> dict[str, Any]:
        tree = harness.descendants(self.pid)
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        if self.alive():
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGTERM)  # our own child, by its handle
        hung = False
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            self.kill()
        for pid in tree:  # the workers it started, by the pids we saw: nothing broader
            with contextlib.suppress(OSError):
                if harness.proc_cpu_ticks(pid) is not None:
                    os.kill(pid, signal.SIGKILL)
        self._drain_stdout()
        return {"returncode": self.proc.returncode, "hung_on_stop": hung}


def answers(port: int, path: str) -> bool:
    """Whether a GET on ``path`` gets any HTTP response (the server is accepting and serving)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            return sock.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def start(
    subject: Subject,
    response: str,
    cpu: int | None,
    work: Path,
    head_timeout_s: float | None = None,
) -> PeerServer:
    """``subject`` serving ``response``, pinned to ``cpu``, not yet waited for.

    ``head_timeout_s``: give the server that head timeout (``HEAD_TIMEOUTS``), where it
    has one; the others run with their defaults.
    """
    port = None if subject.name == FLOOR else free_port()
    cmd = subject.command(response, port or 0, work)
    ht = head_timeout(subject) if head_timeout_s is not None else None
    if ht is not None and head_timeout_s is not None:
        if subject.name == NGINX:  # a directive in the configuration the command names
            write_nginx_conf(work, port or 0, head_timeout_s)
        else:
            cmd = _with_flag(cmd, ht.flag, ht.value(head_timeout_s))
    cmd = harness.pinned(cmd, cpu)
    env = server_env(APPS_DIR)
    # The readiness GET asks for the scenario's own path: for the upload app that is a
    # GET without a body, which every app here answers (with 0).
    return PeerServer(cmd, port, env, PATHS[response])
