"""The harness of the server behaviour suite (imported as `srv_harness`; not a test module).

* `Kind`: what serves a test — ringloop's server on one loop backend, or a reference (uvicorn
  with httptools or h11 for ASGI, gunicorn's threaded worker for WSGI, hypercorn for
  WebSocket over HTTP/2). `argv()` turns one set
  of uvicorn-named settings into each server's command line; settings a server does not have
  are left out (the tests that need them say so with `reference_lax`/`ringloop_only`).
* `ServerProc`: one real server process on 127.0.0.1 with a free port, its output in a log
  file, its resident memory and its open TCP connections read from /proc (the same numbers
  for every server, no hook inside it), stopped with SIGTERM (or SIGKILL at teardown).
* `Raw`: a raw-socket client for protocol edge cases, with `read_response()` — a small,
  strict HTTP/1.1 response reader (RFC 9112 §6.3 framing: no body for HEAD, 1xx, 204, 304;
  Content-Length; chunked with trailers; else until close) that never guesses.
* `wait_until()`: poll a condition with a deadline; nothing in this suite sleeps for luck.
* `SRV_TLS=1` runs the suite over TLS: every server a test starts without TLS settings of
  its own gets a certificate for 127.0.0.1 (trustme's CA, which `SSL_CERT_FILE` makes the
  test process's clients trust), `Raw` speaks TLS to it and `url()` is https. The behaviour
  checked is the same; `make test-server-tls` runs the suites that hold over TLS this way.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from harness_basics import free_port, unavailable, wait_until

HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
# A missing tool fails instead of skipping when CI runs the suite or the developer asks.
LONG = os.environ.get("RINGLOOP_LONG") == "1"

MiB = 1024 * 1024

# -- the suite over TLS (see the module docs) -----------------------------------------------------

TLS_MODE = os.environ.get("SRV_TLS") == "1"
_tls_files: dict[str, str] = {}


def tls_files() -> dict[str, str]:
    """A CA and a server certificate for 127.0.0.1, made once per test process; the CA is
    what `SSL_CERT_FILE` points this process's TLS clients at (httpx, urllib, `Raw`)."""
    if not _tls_files:
        import tempfile

        import trustme

        d = Path(tempfile.mkdtemp(prefix="srv-tls-"))
        ca = trustme.CA()
        cert = ca.issue_cert(HOST, "localhost")
        ca.cert_pem.write_to_path(str(d / "ca.pem"))
        cert.private_key_pem.write_to_path(str(d / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
        _tls_files.update(ca=str(d / "ca.pem"), key=str(d / "key.pem"), cert=str(d / "cert.pem"))
        os.environ["SSL_CERT_FILE"] = _tls_files["ca"]
    return _tls_files


def with_tls(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with the suite's certificate in TLS mode (unless the test brought its own)."""
    if not TLS_MODE or "ssl_certfile" in settings:
        return settings
    files = tls_files()
    return {**settings, "ssl_certfile": files["cert"], "ssl_keyfile": files["key"]}


def client_tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls_files()["ca"])


# -- what serves ----------------------------------------------------------------------------------

RINGLOOP_KINDS = ("ringloop-io_uring", "ringloop-epoll")
# ASGI references: uvicorn with each of its HTTP implementations (httptools is its default
# when installed; h11 is the strict pure-Python one).
UVICORN_KINDS = ("uvicorn-httptools", "uvicorn-h11")
GUNICORN = "gunicorn-gthread"
# The reference for HTTP/2 WebSocket (RFC 8441): the only Python server that has it.
HYPERCORN = "hypercorn"
UVICORN_AND_GUNICORN = (*UVICORN_KINDS, GUNICORN)


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str

    @property
    def is_ringloop(self) -> bool:
        return self.name.startswith("ringloop-")

    @property
    def backend(self) -> str | None:
        return self.name.removeprefix("ringloop-") if self.is_ringloop else None

    def __str__(self) -> str:
        return self.name


def check_kind(kind: Kind) -> None:
    """Skip a ringloop io_uring kind when the kernel refuses io_uring."""
    if kind.backend == "io_uring":
        import ringloop

        ok, reason = ringloop.io_uring_available()
        if not ok:
            pytest.skip(f"kernel refuses io_uring: {reason}")


def apply_kind_markers(request: pytest.FixtureRequest, kind: Kind) -> None:
    """The test's `ringloop_only`, `reference_lax` and `ringloop_bug` marks, for `kind`
    (see conftest). A mark with `ids=(...)` applies only to the parametrizations whose id
    contains one of them."""
    callspec = getattr(request.node, "callspec", None)
    test_id = callspec.id if callspec is not None else ""

    def applies(mark) -> bool:
        ids = mark.kwargs.get("ids")
        return ids is None or any(i in test_id for i in ids)

    for mark in request.node.iter_markers("ringloop_only"):
        if not kind.is_ringloop and applies(mark):
            pytest.skip(f"ringloop only: {mark.kwargs.get('reason') or mark.args[0]}")
    # SRV_CHECK_LAX=1 runs the reference where it is marked lax: each such case must then
    # fail, which checks that every `reference_lax` claim is still true.
    if os.environ.get("SRV_CHECK_LAX") != "1":
        for mark in request.node.iter_markers("reference_lax"):
            kinds = mark.kwargs.get("kinds", UVICORN_AND_GUNICORN)
            if kind.name in kinds and applies(mark):
                reason = mark.kwargs.get("reason") or mark.args[0]
                pytest.skip(f"reference lax ({kind}): {reason}")
    for mark in request.node.iter_markers("ringloop_bug"):
        kinds = mark.kwargs.get("kinds", RINGLOOP_KINDS)
        if kind.name in kinds and applies(mark):
            reason = mark.kwargs.get("reason") or mark.args[0]
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


# The settings every kind understands, by uvicorn's names (ringloop's CLI uses the same).
_UVICORN_FLAGS = {
    "timeout_keep_alive",
    "limit_concurrency",
    "limit_max_requests",
    "root_path",
    "timeout_graceful_shutdown",
    "proxy_headers",
    "forwarded_allow_ips",
    "server_header",
    "date_header",
    "access_log",
    "header",
    "ssl_keyfile",
    "ssl_certfile",
    "ws_max_size",
    "ws_ping_interval",
    "ws_ping_timeout",
}
# ringloop-only limits (uvicorn has no such setting; gunicorn names some differently).
_GUNICORN_FLAGS = {
    "limit_request_line": "--limit-request-line",
    "limit_request_headers": "--limit-request-fields",
    "limit_request_header_size": "--limit-request-field_size",
    "timeout_keep_alive": "--keep-alive",
    "ssl_certfile": "--certfile",
    "ssl_keyfile": "--keyfile",
}


def _flag(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:
        return ["--no-" + name.replace("_", "-")]
    return [flag, str(value)]


def argv(kind: Kind, app: str, interface: str, port: int, settings: dict[str, Any]) -> list[str]:
    """The command line that serves `app` ("module:attr" in this folder) with `settings`."""
    if kind.is_ringloop:
        cmd = [PYTHON, "-m", "ringloop", "serve", app, "--app-dir", str(HERE)]
        cmd += ["--host", HOST, "--port", str(port), "--loop-backend", kind.backend]
        cmd += ["--interface", interface, "--log-level", settings.pop("log_level", "info")]
        for name, value in settings.items():
            cmd += _flag(name, value)
        return cmd
    if kind.name.startswith("uvicorn-"):
        if interface not in ("asgi", "wsgi"):
            raise ValueError(f"uvicorn serves asgi or wsgi, not {interface}")
        cmd = [PYTHON, "-m", "uvicorn", app, "--app-dir", str(HERE)]
        cmd += ["--host", HOST, "--port", str(port), "--http", kind.name.removeprefix("uvicorn-")]
        cmd += ["--interface", "asgi3" if interface == "asgi" else "wsgi"]
        cmd += ["--log-level", settings.pop("log_level", "info")]
        for name, value in settings.items():
            if name in _UVICORN_FLAGS:
                cmd += _flag(name, value)
        return cmd
    if kind.name == GUNICORN:
        if interface != "wsgi":
            raise ValueError("gunicorn serves wsgi")
        cmd = [PYTHON, "-m", "gunicorn", app, "--chdir", str(HERE), "-b", f"{HOST}:{port}"]
        cmd += ["-k", "gthread", "--threads", "8", "-w", "1", "--log-level", "info"]
        for name, value in settings.items():
            if name in _GUNICORN_FLAGS:
                cmd += [_GUNICORN_FLAGS[name], str(value)]
        return cmd
    if kind.name == HYPERCORN:
        if interface != "asgi":
            raise ValueError("hypercorn serves asgi")
        # h2c with prior knowledge and HTTP/1.1 on the one port; its own settings only.
        cmd = [PYTHON, "-m", "hypercorn", app, "--bind", f"{HOST}:{port}"]
        return cmd + ["--log-level", settings.pop("log_level", "info")]
    raise ValueError(kind.name)


def _die_with_parent() -> None:
    # Between fork and exec: a SIGKILLed pytest takes the server along.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class ServerProc:
    """One server process (see the module docs)."""

    def __init__(
        self,
        kind: Kind,
        app: str,
        *,
        interface: str = "asgi",
        settings: dict[str, Any] | None = None,
        log_dir: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.app = app
        self.interface = interface
        self.settings = with_tls(dict(settings or {}))
        self.tls = "ssl_certfile" in self.settings
        self.port = free_port()
        self.argv = argv(kind, app, interface, self.port, dict(self.settings))
        log_dir.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kind}-{app}")
        self.log_path = log_dir / f"{safe}-{self.port}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.pop("RINGLOOP_BACKEND", None)
        full_env["SRV_TEST_SCRATCH"] = str(log_dir)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=HERE,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready()

    # -- lifecycle -------------------------------------------------------------------------------

    def _wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"{self.argv} exited with {self.proc.returncode} before serving:\n"
                    f"{self.log()[-4000:]}"
                )
            with socket.create_connection((HOST, self.port), timeout=1):
                pass
            return self.server_pid() is not None

        wait_until(ready, timeout, f"{self.kind} to listen on {self.port}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def server_pid(self) -> int | None:
        """The process that serves the connections (gunicorn's worker; else the process)."""
        if self.kind.name != GUNICORN:
            return self.proc.pid
        kids = _children(self.proc.pid)
        return min(kids) if kids else None

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful shutdown for every server here); its exit status."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.kind} did not exit within {timeout}s of SIGTERM")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    # -- what it says --------------------------------------------------------------------------

    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def log_mark(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, mark: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode("utf-8", "replace")

    # -- what /proc says -----------------------------------------------------------------------

    def rss(self) -> int:
        """Resident memory of the serving process, in bytes."""
        return rss_of(self.server_pid())

    def tcp_connections(self) -> int:
        """TCP connections the serving process holds open (not its listener)."""
        return tcp_connections_of(self.server_pid(), self.port)

    def wait_connections(self, want: int = 0, timeout: float = 15.0) -> None:
        wait_until(
            lambda: self.tcp_connections() == want or None,
            timeout,
            f"{self.kind} to hold {want} connections (holds {self.tcp_connections()})",
        )

    # -- requests -----------------------------------------------------------------------------

    def raw(self, timeout: float = 10.0) -> Raw:
        return Raw(self.port, timeout, tls=self.tls)

    def url(self, path: str = "/") -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}{path}"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry))
    return found


def rss_of(pid: int | None) -> int:
    if pid is None:
        return 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def tcp_connections_of(pid: int | None, listen_port: int) -> int:
    """Count the TCP sockets `pid` has open that are not listening (any state: a socket the
    server forgot to close shows as CLOSE_WAIT, still counted)."""
    if pid is None:
        return 0
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            target = os.readlink(fd_dir / fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] != "0A":  # 0A: LISTEN
                    count += 1
    return count


# -- a raw HTTP/1.1 client -------------------------------------------------------------------------


@dataclasses.dataclass
class Response:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]  # (lower-cased name, value), in order
    body: bytes = b""
    chunked: bool = False
    trailers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # The body ended because the server closed the connection (no length, not chunked).
    until_close: bool = False

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def keep_alive(self) -> bool:
        conn = ",".join(self.all("connection")).lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


class Incomplete(Exception):
    """The connection ended (or timed out) before a whole response arrived."""

    def __init__(self, message: str, received: bytes) -> None:
        super().__init__(f"{message}; received {received[:300]!r}")
        self.received = received


class Raw:
    """A raw-socket HTTP/1.1 client: send any bytes, read responses strictly."""

    def __init__(self, port: int, timeout: float = 10.0, *, tls: bool = False) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            self.sock = client_tls_context().wrap_socket(self.sock, server_hostname=HOST)
        self.timeout = timeout
        self.buf = b""
        self.eof = False
        self.received_total = b""

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0): an abrupt client."""
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, timeout: float | None = None) -> bool:
        """Read more into the buffer; False at end of stream."""
        if self.eof:
            return False
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            # Over TLS: a close without close_notify (an abort), or with it: an end.
            data = b""
        except TimeoutError:
            raise Incomplete("timed out waiting for the server", self.buf) from None
        if not data:
            self.eof = True
            return False
        self.buf += data
        self.received_total += data
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise Incomplete("connection closed inside a line", self.buf)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise Incomplete(f"connection closed {n - len(self.buf)} bytes short", self.buf)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self) -> Response:
        """The next response head (a 1xx one included)."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise Incomplete("connection closed before a response head", self.buf)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        m = re.fullmatch(rb"(HTTP/\d\.\d) (\d{3}) ?(.*)", lines[0])
        if not m:
            raise AssertionError(f"not a status line: {lines[0]!r}")
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            assert sep and name and name == name.strip(), f"bad response field {line!r}"
            headers.append((name.decode("latin-1").lower(), value.strip().decode("latin-1")))
        return Response(m[1].decode(), int(m[2]), m[3].decode("latin-1"), headers)

    def read_response(self, *, head: bool = False, interim: bool = False) -> Response:
        """The next response, whole. `head`: it answers a HEAD request (no body whatever the
        fields say). `interim`: return a 1xx response instead of skipping it."""
        while True:
            r = self.read_head()
            if 100 <= r.status < 200:
                assert r.status != 101, "no upgrades in these tests"
                if interim:
                    return r
                continue
            break
        if head or r.status in (204, 304):
            return r
        te = ",".join(r.all("transfer-encoding")).lower()
        cl = r.all("content-length")
        if te:
            assert not cl, f"response has both transfer-encoding and content-length: {r.headers}"
            assert te.split(",")[-1].strip() == "chunked", te
            r.chunked = True
            r.body, r.trailers = self._chunked()
        elif cl:
            assert len(set(cl)) == 1, f"conflicting content-length {cl}"
            r.body = self._exact(int(cl[0]))
        else:
            while self._fill():
                pass
            r.body, self.buf = self.buf, b""
            r.until_close = True
        return r

    def _chunked(self) -> tuple[bytes, list[tuple[str, str]]]:
        parts = []
        while True:
            line = self._line()
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                break
            parts.append(self._exact(size))
            assert self._exact(2) == b"\r\n", "chunk data not followed by CRLF"
        trailers = []
        while line := self._line():
            name, _, value = line.partition(b":")
            trailers.append((name.decode("latin-1").lower(), value.strip().decode("latin-1")))
        return b"".join(parts), trailers

    def closed(self, timeout: float = 5.0) -> bool:
        """True if the server closed the connection (nothing more to read) within `timeout`;
        unread bytes make it False."""
        if self.buf:
            return False
        try:
            return not self._fill(timeout)
        except Incomplete:
            return False

    def rest(self, timeout: float = 5.0) -> bytes:
        """Everything until the server closes (or `timeout` passes with nothing new)."""
        with contextlib.suppress(Incomplete):
            while self._fill(timeout):
                pass
        out, self.buf = self.buf, b""
        return out


def request(
    method: str = "GET",
    target: str = "/",
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
    version: str = "HTTP/1.1",
    host: str | None = "example.test",
) -> bytes:
    """A request's bytes (Content-Length added for a body unless a framing field is given)."""
    lines = [f"{method} {target} {version}"]
    if host is not None:
        lines.append(f"Host: {host}")
    names = {n.lower() for n, _ in headers}
    for n, v in headers:
        lines.append(f"{n}: {v}")
    if body is not None and not names & {"content-length", "transfer-encoding"}:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def chunked(parts: Iterable[bytes], trailers: str = "", ext: str = "") -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext.encode(), p) for p in parts if p)
    return out + b"0\r\n" + trailers.encode() + b"\r\n"


def exchange(server: ServerProc, data: bytes, *, head: bool = False) -> Response:
    """Send one request on a new connection and read its response."""
    with server.raw() as c:
        c.send(data)
        return c.read_response(head=head)


def ensure_wrk() -> str:
    """wrk's path; installed from Debian when missing (as benchmarks/tools.py does)."""
    path = shutil.which("wrk")
    if path:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        unavailable("wrk is not installed and apt-get cannot run here")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "wrk"]):
        subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    path = shutil.which("wrk")
    if not path:
        unavailable("apt-get could not install wrk")
    return path


def raise_nofile(want: int) -> int:
    """Raise this process's open-file limit towards `want`; the limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(want, hard) if hard != resource.RLIM_INFINITY else want
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def get(server: ServerProc, target: str, timeout: float = 10.0) -> Response:
    """One GET on a connection of its own."""
    with server.raw(timeout) as c:
        c.send(request("GET", target, headers=[("Connection", "close")]))
        return c.read_response()


def new_key() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


def result(server: ServerProc, key: str, timeout: float = 10.0) -> Any:
    """What the application recorded under `key` (see srv_asgi_app's RESULTS), once it has."""

    def recorded() -> Any:
        r = get(server, f"/results?key={key}")
        return r.json() if r.status == 200 else None

    return wait_until(recorded, timeout, f"the application to record {key!r}")


def stats(server: ServerProc) -> dict[str, Any]:
    """The application's view of the server (`/stats`): tasks, ringloop's connection count."""
    r = get(server, "/stats")
    assert r.status == 200, r
    return r.json()


# -- shared by the wire-level tests (test_server_protocol, test_server_rejects) -------------------

# Reference kinds, for `reference_lax(..., kinds=...)`.
H11 = ("uvicorn-h11",)
HTTPTOOLS = ("uvicorn-httptools",)
BOTH = H11 + HTTPTOOLS

GOOD = request("GET", "/path?i=good")
GOOD_BODY = b"GET /path i=good"


def expect_path(resp, method: str, path: str, query: str = "") -> None:
    assert resp.status == 200, resp
    assert resp.body == f"{method} {path} {query}".encode()
