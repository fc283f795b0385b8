"""Transports suite: TCP and UDP echo and HTTP throughput per loop, with the server's CPU per operation.

Every loop in ``_common.LOOPS`` serves the same load, one server process at a time:

  echo        an echo server written three ways — ``protocol`` (asyncio.Protocol,
              ``data_received`` -> ``transport.write``), ``streams`` (``start_server``,
              ``reader.read(65536)`` -> ``writer.write`` + ``await drain()``) and ``buffered``
              (asyncio.BufferedProtocol, ``get_buffer``/``buffer_updated`` -> write a copy of the
              bytes) — loaded by ``echo_client.c``: 64 connections, each sending a 1, 10 or
              100 KiB message, reading exactly that many bytes back (checked), and repeating.
              ``udp`` is the same over UDP (``create_datagram_endpoint``, each 1 KiB message one
              datagram, 64 connected client sockets).
  http        a protocol-level HTTP responder: every request (ended by ``\\r\\n\\r\\n``; several
              pipelined ones may arrive in one ``data_received``) gets one canned keep-alive
              ``HTTP/1.1 200 OK`` with Content-Length. Loaded by ``wrk -t1 -c64``, once with one
              request per write and once pipelined 16 deep (``pipeline.lua``).

The server process pins itself to CPU 0 and the load generator runs under ``taskset`` on
CPU 1, so the two never compete for a core. Figures per scenario: operations per second
(messages or requests) and the server's CPU µs per operation, i.e. the delta of utime+stime
of the whole server process (every thread, io_uring workers included) from
``/proc/PID/stat`` over the measured window, divided by the operations in that window. The
CPU figure is the one to compare: on a shared machine the rate follows whatever else runs,
the CPU per operation much less (a server kept less busy batches less, so it still rises
somewhat; every run records how busy the server and the load generator were).

A loop whose server fails to start, dies, drops or stalls connections, or echoes wrong bytes
is recorded as a crash with the error text, and the run goes on with the next one. Every
child process has a timeout.

    python benchmarks/transports.py [--quick] [--loops ...] [--rounds N] [--duration S]
    python benchmarks/run.py transports [--quick]

Full run: every scenario, 3 rounds of 3 s (median), results in ``results/transports.json``,
``results/transports_echo.png``, ``results/transports_http.png`` and the README table between
the ``transports`` markers. ``--quick`` (under 30 s): only the 10 KiB protocol echo and
the two HTTP runs, 1 round of 1 s, written under ``results/quick/``; the README is left alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (the path line above makes it importable when run as a script)

THIS = Path(__file__).resolve()
ECHO_CLIENT_SRC = _common.BENCH_DIR / "echo_client.c"
HTTP_FLOOR_SRC = _common.BENCH_DIR / "http_floor.c"
# The HTTP responder in C on plain epoll (http_floor.c): not a loop, the kernel's share of
# every loop's figure, measured in the same run.
FLOOR = "c-floor"
PIPELINE_LUA = _common.BENCH_DIR / "pipeline.lua"

CONNECTIONS = 64
SERVER_CPU = 0
CLIENT_CPU = 1
PIPELINE_DEPTH = 16

BODY = b"Hello, World!"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n" + BODY
)
REQUEST_END = b"\r\n\r\n"


@dataclass(frozen=True)
class Scenario:
    """One load applied to one server API; ``key`` names it in the JSON and the tables."""

    key: str
    kind: str  # "echo" or "http"
    api: str  # the server the worker runs: "protocol", "streams", "buffered", "udp" or "http"
    label: str
    size: int = 0  # echo message size in bytes
    depth: int = 1  # HTTP requests per write


def _echo_scenarios() -> list[Scenario]:
    out = []
    for api in ("protocol", "streams", "buffered"):
        for kib in (1, 10, 100):
            out.append(Scenario(f"echo-{api}-{kib}k", "echo", api, f"{api} {kib} KiB", kib * 1024))
    out.append(Scenario("echo-udp-1k", "echo", "udp", "UDP 1 KiB", 1024))
    return out


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in (
        *_echo_scenarios(),
        Scenario("http", "http", "http", "HTTP", depth=1),
        Scenario("http-pipe16", "http", "http", f"HTTP pipelined ×{PIPELINE_DEPTH}", depth=16),
    )
}
QUICK_SCENARIOS = ["echo-protocol-10k", "http", "http-pipe16"]

# --------------------------------------------------------------------------- server worker


class ServerState:
    """What the server reports besides "ready": loop errors and the first connection's setup."""

    def __init__(self, out: TextIO):
        self.out = out
        self.loop_errors = 0
        self.conn_reported = False

    def exception_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # A loop that swallows an error under load would otherwise look merely slow: pass
        # the first few to the runner, count the rest.
        self.loop_errors += 1
        if self.loop_errors <= 3:
            exc = context.get("exception")
            text = str(context.get("message", ""))
            if exc is not None:
                text += f": {type(exc).__name__}: {exc}"
            _common.emit(self.out, {"type": "loop_error", "message": text})

    def connection_made(self, transport: Any) -> None:
        # Whether the loop sets TCP_NODELAY on accepted sockets (asyncio and uvloop do) is
        # reported once: without it, multi-segment echoes meet Nagle + delayed-ACK stalls.
        if self.conn_reported:
            return
        self.conn_reported = True
        nodelay = None
        with contextlib.suppress(Exception):
            sock = transport.get_extra_info("socket")
            nodelay = bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        _common.emit(self.out, {"type": "conn", "nodelay": nodelay})


class _Served:
    """What every server protocol here shares: the run's state, told of each connection."""

    def __init__(self, state: ServerState):
        self.state = state

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.state.connection_made(transport)


class EchoProtocol(_Served, asyncio.Protocol):
    """Echo with the plain protocol API: every chunk read is written straight back."""

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class EchoBufferedProtocol(_Served, asyncio.BufferedProtocol):
    """Echo with the buffered API: the loop reads into our buffer, we write a copy back."""

    def __init__(self, state: ServerState):
        super().__init__(state)
        self.buf = memoryview(bytearray(65536))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        # A copy: the transport may keep what it could not send yet, and the buffer is
        # handed out again for the next read.
        self.transport.write(bytes(self.buf[:nbytes]))


class UdpEchoProtocol(_Served, asyncio.DatagramProtocol):
    """Echo each datagram back to its sender."""

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.transport.sendto(data, addr)


class HttpProtocol(_Served, asyncio.Protocol):
    """The smallest honest HTTP/1.1 keep-alive responder: count requests, answer each."""

    def __init__(self, state: ServerState):
        super().__init__(state)
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        count = buf.count(REQUEST_END)
        if count:
            # One write for every request completed by this chunk: pipelined requests are
            # answered together, as a real server would.
            self.transport.write(RESPONSE * count)
            buf = buf[buf.rfind(REQUEST_END) + len(REQUEST_END) :]
        self.pending = buf


def _streams_handler(state: ServerState) -> Callable[..., Any]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connection_made(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # the client leaving at the end of the run
        finally:
            writer.close()

    return handle


def _listening_socket() -> socket.socket:
    # Bound here and passed as sock=: every loop accepts that, and the port is known without
    # relying on each loop's Server.sockets. proto must be IPPROTO_TCP, as getaddrinfo gives
    # create_server: asyncio sets TCP_NODELAY on accepted sockets only when it sees that.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _stop_on_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Future[None]) -> None:
    """The runner closes our stdin to stop us; a thread waits for that.

    A thread rather than add_reader or a signal handler: those are exactly the parts of a
    loop that may be missing, and the thread costs nothing while it blocks in read().
    """

    def wait() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))

    threading.Thread(target=wait, daemon=True).start()


async def _serve(api: str, state: ServerState, ready: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    if api == "udp":
        return await _serve_udp(state, ready)
    sock = _listening_socket()
    # Read before create_server: rloop takes the fd over and closes our socket object.
    port = sock.getsockname()[1]
    if api == "streams":
        server = await asyncio.start_server(_streams_handler(state), sock=sock)
    else:
        proto = {"protocol": EchoProtocol, "buffered": EchoBufferedProtocol, "http": HttpProtocol}
        server = await loop.create_server(lambda: proto[api](state), sock=sock)
    stop: asyncio.Future[None] = loop.create_future()
    _stop_on_stdin_eof(loop, stop)
    _common.emit(state.out, {**ready, "port": port})
    await stop
    server.close()


async def _serve_udp(state: ServerState, ready: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    port = sock.getsockname()[1]
    transport, _ = await loop.create_datagram_endpoint(lambda: UdpEchoProtocol(state), sock=sock)
    stop: asyncio.Future[None] = loop.create_future()
    _stop_on_stdin_eof(loop, stop)
    _common.emit(state.out, {**ready, "port": port})
    await stop
    transport.close()


def server_worker(argv: list[str]) -> int:
    """Serve one API on one loop until stdin closes; JSON lines on the protocol stream."""
    parser = argparse.ArgumentParser(prog="transports.py --server")
    parser.add_argument("--server", required=True, choices=sorted(_common.LOOPS))
    parser.add_argument(
        "--api", required=True, choices=["protocol", "streams", "buffered", "udp", "http"]
    )
    parser.add_argument("--cpu", type=int, default=None)
    args = parser.parse_args(argv)
    out = _common.claim_stdout()
    pinned = _common.pin_to_cpu(args.cpu)
    try:
        loop, info = _common.make_loop(args.server)
    except Exception as exc:  # import failure, io_uring refused, backend mismatch...
        _error(out, "load", exc, getattr(exc, "info", {}))
        return 2
    state = ServerState(out)
    loop.set_exception_handler(state.exception_handler)
    asyncio.set_event_loop(loop)
    ready = {
        "type": "ready",
        "pid": os.getpid(),
        "cpu": pinned,
        "package_mtime": _package_mtime(loop),
        **info,
    }
    try:
        loop.run_until_complete(_serve(args.api, state, ready))
    except Exception as exc:  # create_server refused, or the loop blew up while serving
        _error(out, "serve", exc)
        return 3
    _common.emit(out, {"type": "done", "loop_errors": state.loop_errors})
    return 0


def _package_mtime(loop: asyncio.AbstractEventLoop) -> str | None:
    """When the loop's package was last modified: its newest file, native module included.

    ringloop is rebuilt into the tree while others work on it; comparing this across the
    runs of one loop tells whether every round measured the same build.
    """
    package = sys.modules.get(type(loop).__module__.split(".")[0])
    init = getattr(package, "__file__", None)
    if init is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        # Sources and native modules only: __pycache__ is rewritten by mere imports.
        files = Path(init).parent.rglob("*")
        newest = max(p.stat().st_mtime for p in files if p.suffix in (".py", ".so"))
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(newest))
    return None


def _error(
    out: TextIO, stage: str, exc: BaseException, extra: dict[str, Any] | None = None
) -> None:
    _common.emit(
        out,
        {
            "type": "error",
            "stage": stage,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=6),
            **(extra or {}),
        },
    )


# --------------------------------------------------------------------------- server process


class ServerFailed(Exception):
    """The server never became ready; ``meta`` is whatever it said about its loop."""

    def __init__(self, message: str, meta: dict[str, Any] | None = None):
        super().__init__(message)
        self.meta = meta or {}


class ServerProcess:
    """One server worker seen from the runner: start, wait until ready, watch, stop.

    stdout (JSON lines) is read by a thread and stderr goes to a temporary file, so a
    server that logs an error per connection can never block on a full pipe.
    """

    def __init__(self, loop_name: str, api: str, cpu: int | None, exe: str | None = None):
        if exe is not None:  # the C floor: same protocol on stdin/stdout, no Python
            cmd = [exe, *([str(cpu)] if cpu is not None else [])]
            env = dict(os.environ)
        else:
            cmd = [sys.executable, str(THIS), "--server", loop_name, "--api", api]
            if cpu is not None:
                cmd += ["--cpu", str(cpu)]
            env = {**os.environ, **_common.LOOPS[loop_name].env, "PYTHONUNBUFFERED": "1"}
        self.t0 = time.monotonic()
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            text=True,
            cwd=_common.REPO_DIR,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            raw = raw.strip()
            if raw.startswith("{"):  # anything else on fd 1 is not ours (see claim_stdout)
                with contextlib.suppress(ValueError):
                    obj = json.loads(raw)
                    if isinstance(obj, dict) and "type" in obj:
                        self.lines.put(obj)
        self.lines.put(None)

    def _next(self, timeout: float) -> dict[str, Any] | None:
        line = self.lines.get(timeout=timeout)
        if line is not None:
            self.seen.append(line)
        return line

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._next(max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise ServerFailed(f"not ready after {timeout:.0f}s") from None
            if line is None:  # stdout closed: the process is exiting
                self._reap()
                raise ServerFailed(self.failure_text(), self.meta())
            if line["type"] == "ready":
                return line
            if line["type"] == "error":
                self._reap()
                raise ServerFailed(line["error"], line)

    def _reap(self, timeout: float = 10) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def meta(self) -> dict[str, Any]:
        for line in self.seen:
            if "loop_class" in line:
                return line
        return {}

    def stop(self, timeout: float = 10) -> dict[str, Any]:
        """Close stdin, wait for "done"; kill after ``timeout``. Returns what it reported."""
        hung = False
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True  # recorded: a loop that cannot stop serving is worth knowing about
            self.kill()
        with contextlib.suppress(queue.Empty):
            while self._next(timeout=2) is not None:
                pass
        done = next((line for line in self.seen if line["type"] == "done"), None)
        return {
            "returncode": self.proc.returncode,
            "hung_on_stop": hung,
            "done": done is not None,
            "loop_errors": (done or {}).get("loop_errors"),
            "loop_error_samples": [ln["message"] for ln in self.seen if ln["type"] == "loop_error"],
            "nodelay": next((ln["nodelay"] for ln in self.seen if ln["type"] == "conn"), None),
        }

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait()

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return "\n".join(self.stderr.read().strip().splitlines()[-12:])

    def failure_text(self) -> str:
        """Why the server is gone, in the words of _common.describe_failure."""
        run = _common.WorkerRun(
            self.seen,
            self.proc.returncode,
            self.stderr_tail(),
            False,
            time.monotonic() - self.t0,
        )
        errors = [ln["error"] for ln in self.seen if ln["type"] == "error"]
        return errors[-1] if errors else _common.describe_failure(run)

    def close(self) -> None:
        self.kill()
        self.stderr.close()


def proc_cpu_ticks(pid: int) -> int | None:
    """utime + stime of every thread of ``pid``, in clock ticks; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (the command) may hold spaces or ')': the fixed fields start after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


CLK_TCK = os.sysconf("SC_CLK_TCK")

# --------------------------------------------------------------------------- load generators


def ensure_wrk() -> tuple[str | None, str | None]:
    """wrk's path, installing the Debian package if missing; else (None, why not)."""
    if path := shutil.which("wrk"):
        return path, None
    if os.geteuid() != 0:
        return None, "wrk is not installed and we are not root to apt-get it"
    print("  wrk not found: apt-get install -y wrk", flush=True)
    reason = _apt("install", "-y", "wrk")
    if reason and not shutil.which("wrk"):
        # A stale package index is the usual cause: refresh it once and try again.
        reason = _apt("update") or _apt("install", "-y", "wrk")
    if path := shutil.which("wrk"):
        return path, None
    return None, f"wrk is not installed and {reason or 'apt-get did not provide it'}"


def _apt(*args: str) -> str | None:
    """Run apt-get; None on success, else one line saying what failed."""
    cmd = ["apt-get", *args]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd)} failed: {exc}"
    if proc.returncode != 0:
        return f"{' '.join(cmd)} failed: {_last_line(proc.stderr or proc.stdout)}"
    return None


def build_c_tool(src: Path, workdir: Path) -> tuple[str | None, str | None]:
    """Compile one of our C tools into ``workdir``; (path, None) or (None, why not)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, f"no C compiler (cc) to build {src.name}"
    exe = workdir / src.stem
    try:
        proc = subprocess.run(
            [cc, "-O2", "-o", str(exe), str(src)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"building {src.name}: {exc}"
    if proc.returncode != 0:
        return None, f"building {src.name}: {_last_line(proc.stderr)}"
    return str(exe), None


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _pinned(cmd: list[str], cpu: int | None) -> list[str]:
    # taskset rather than sched_setaffinity in a preexec_fn: the command line in the JSON
    # then shows exactly how the load generator ran.
    if cpu is None or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", str(cpu), *cmd]


@dataclass
class Settings:
    duration: float  # seconds of measurement per run
    warmup: float  # seconds of load before the window opens (echo)
    server_cpu: int | None
    client_cpu: int | None


def run_echo(server: ServerProcess, port: int, client: str, sc: Scenario, st: Settings) -> dict:
    """One echo run; the client itself snapshots the server's CPU at the window's edges."""
    cmd = _pinned(
        [
            client,
            str(port),
            str(CONNECTIONS),
            str(sc.size),
            str(int(st.warmup * 1000)),
            str(int(st.duration * 1000)),
            str(server.pid),
            *(["udp"] if sc.api == "udp" else []),
        ],
        st.client_cpu,
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=st.duration + 60)
    except subprocess.TimeoutExpired:
        return {"failure": f"echo client timed out after {st.duration + 60:.0f}s"}
    try:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"failure": f"echo client exit {proc.returncode}: {_last_line(proc.stderr)}"}
    if "error" in res:
        return {"failure": f"echo client: {res['error']}"}
    failure = _echo_failure(res)
    if failure:
        return {"failure": failure, "client": res}
    cpu_s = res["server_ticks"] / res["clk_tck"]
    return {
        "ops": res["messages"],
        "seconds": res["seconds"],
        "rate": res["messages"] / res["seconds"],
        "cpu_us": cpu_s / res["messages"] * 1e6,
        "server_busy": cpu_s / res["seconds"],
        "client_busy": res["client_cpu_s"] / res["seconds"],
    }


def _echo_failure(res: dict[str, Any]) -> str | None:
    """What the client saw that makes the run a crash rather than a slow result."""
    if not res["in_window"]:
        return f"every connection lost before the measured window ({res['first_error']})"
    if res["server_ticks"] < 0:
        return "server process vanished during the run"
    if res["closed"]:
        return f"{res['closed']}/{CONNECTIONS} connections lost ({res['first_error']})"
    if res["corrupt"]:
        return f"{res['corrupt']} reads returned bytes that were not the ones sent"
    if res["messages"] == 0:
        return "no message echoed in the measured window"
    if res["idle_conns"]:
        return f"{res['idle_conns']}/{CONNECTIONS} connections stalled (no echo in the window)"
    return None


def http_probe(port: int, rounds: int = 50) -> str | None:
    """Warm the server up and check its answer: 16 pipelined requests per round, one conn.

    Returns None when every response was the canned one, else what went wrong. Checking
    here means a server that answers garbage is caught before wrk counts its bytes.
    """
    req = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * PIPELINE_DEPTH
    want = RESPONSE * PIPELINE_DEPTH
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for _ in range(rounds):
                sock.sendall(req)
                got = b""
                while len(got) < len(want):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return "server closed the connection during the warm-up probe"
                    got += chunk
                if got != want:
                    return f"unexpected response: {got[:80]!r}"
    except OSError as exc:
        return f"warm-up probe: {type(exc).__name__}: {exc}"
    return None


WRK_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_wrk(text: str) -> dict[str, Any]:
    """Requests, seconds and error counts from wrk's report."""
    out: dict[str, Any] = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)\b", text)
    if m:
        out["requests"] = int(m.group(1))
        out["seconds"] = float(m.group(2)) * WRK_UNITS[m.group(3)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    out["socket_errors"] = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups()), strict=True))
        if m
        else {}
    )
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    out["non_2xx"] = int(m.group(1)) if m else 0
    return out


def run_http(server: ServerProcess, port: int, wrk: str, sc: Scenario, st: Settings) -> dict:
    """One wrk run; the server's CPU is read just before wrk starts and just after it exits.

    That window also holds wrk's 64 connects and its exit, a few hundred µs of server work
    against a second or more of requests.
    """
    problem = http_probe(port)
    if problem:
        return {"failure": problem}
    cmd = [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(st.duration))}s"]
    if sc.depth > 1:
        cmd += ["-s", str(PIPELINE_LUA)]
    cmd.append(f"http://127.0.0.1:{port}/")
    if sc.depth > 1:
        cmd += ["--", str(sc.depth)]
    cmd = _pinned(cmd, st.client_cpu)
    ticks0 = proc_cpu_ticks(server.pid)
    # wrk is the only child reaped while it runs, so this delta is wrk's own CPU time.
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=st.duration + 60)
    except subprocess.TimeoutExpired:
        return {"failure": f"wrk timed out after {st.duration + 60:.0f}s"}
    wall = time.monotonic() - t0
    ticks1 = proc_cpu_ticks(server.pid)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = parse_wrk(proc.stdout)
    errors = {k: v for k, v in report["socket_errors"].items() if v}
    if proc.returncode != 0 or "requests" not in report:
        return {"failure": f"wrk exit {proc.returncode}: {_last_line(proc.stderr or proc.stdout)}"}
    if ticks0 is None or ticks1 is None or not server.alive():
        return {"failure": "server process died during the run", "wrk": proc.stdout}
    if errors or report["non_2xx"] or report["requests"] == 0:
        why = ", ".join(f"{k} {v}" for k, v in errors.items()) or "no requests answered"
        if report["non_2xx"]:
            why += f", non-2xx {report['non_2xx']}"
        return {"failure": f"wrk socket errors: {why}", "wrk": proc.stdout}
    cpu_s = (ticks1 - ticks0) / CLK_TCK
    client_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {
        "ops": report["requests"],
        "seconds": report["seconds"],
        "rate": report["requests"] / report["seconds"],
        "cpu_us": cpu_s / report["requests"] * 1e6,
        "server_busy": cpu_s / wall,
        "client_busy": client_s / wall,
        "wrk": proc.stdout,
    }


# --------------------------------------------------------------------------- one measurement


@dataclass
class Tools:
    """The load generators, or why each is unavailable."""

    echo_client: str | None
    echo_skip: str | None
    wrk: str | None
    http_skip: str | None
    floor: str | None = None  # http_floor built, or None (then the floor row is left out)


def measure(loop_name: str, sc: Scenario, st: Settings, tools: Tools) -> dict[str, Any]:
    """Start a server for ``sc`` on ``loop_name``, load it once, stop it; never raises."""
    exe = tools.floor if loop_name == FLOOR else None
    server = ServerProcess(loop_name, sc.api, st.server_cpu, exe)
    try:
        try:
            ready = server.wait_ready(timeout=30)
        except ServerFailed as exc:
            return {
                "status": "crash",
                "stage": exc.meta.get("stage", "start"),
                "error": str(exc),
                "traceback": exc.meta.get("traceback"),
                "stderr_tail": server.stderr_tail(),
                "meta": exc.meta,
            }
        if sc.kind == "echo":
            assert tools.echo_client is not None
            res = run_echo(server, ready["port"], tools.echo_client, sc, st)
        else:
            assert tools.wrk is not None
            res = run_http(server, ready["port"], tools.wrk, sc, st)
        died = not server.alive()
        end = server.stop()
        # It may also have died between the load's end and our look: then it never said done.
        died = died or (not end["done"] and not end["hung_on_stop"])
        if died or "failure" in res:
            return _crash(res, server, end, ready, died)
        return {"status": "ok", "meta": ready, **res, **end}
    finally:
        server.close()


def _crash(
    res: dict[str, Any], server: ServerProcess, end: dict[str, Any], ready: dict, died: bool
) -> dict[str, Any]:
    """A crash record: the client's view first, then the server's last words."""
    parts = [res.get("failure", "server died")]
    if died:
        parts.append(f"server: {server.failure_text()}")
    elif end["loop_error_samples"]:
        parts.append(f"server loop error: {end['loop_error_samples'][0]}")
    elif server.stderr_tail():
        parts.append(f"server stderr: {_last_line(server.stderr_tail())}")
    return {
        "status": "crash",
        "stage": "run",
        "error": "; ".join(parts),
        "meta": ready,
        "stderr_tail": server.stderr_tail(),
        **{k: v for k, v in res.items() if k != "failure"},
        **end,
    }


# --------------------------------------------------------------------------- the run


def collect(
    loops: list[str], scenarios: list[Scenario], rounds: int, st: Settings, tools: Tools
) -> dict[str, Any]:
    """Every (scenario, loop) ``rounds`` times; loops in a rotated order each round.

    Scenario by scenario, so the loops of one scenario are measured minutes apart at most,
    and rotated, so a noisy neighbour spoils one run of several loops rather than every run
    of one. A pair that crashed is not retried; a loop that fails to load is skipped after.
    """
    state: dict[str, Any] = {
        name: {"meta": None, "load_error": None, "builds": set(), "scenarios": {}} for name in loops
    }
    for r in range(rounds):
        order = loops[r % len(loops) :] + loops[: r % len(loops)]
        for sc in scenarios:
            skip = tools.echo_skip if sc.kind == "echo" else tools.http_skip
            for name in order:
                if name == FLOOR and sc.kind != "http":
                    continue
                cell = state[name]["scenarios"].setdefault(
                    sc.key, {"status": "skipped" if skip else "ok", "error": skip, "runs": []}
                )
                if state[name]["load_error"] and cell["status"] == "ok" and not cell["runs"]:
                    cell["status"], cell["error"] = "crash", state[name]["load_error"]
                if skip or cell["status"] != "ok":
                    continue
                _record(state[name], cell, measure(name, sc, st, tools))
                print(
                    f"  round {r + 1}/{rounds}  {sc.key:<19} {name:<18} {_brief(cell)}", flush=True
                )
    return state


def _record(loop_state: dict[str, Any], cell: dict[str, Any], res: dict[str, Any]) -> None:
    meta = res.pop("meta", None) or {}
    if "loop_class" in meta:
        loop_state["meta"] = loop_state["meta"] or meta
    if meta.get("package_mtime"):
        loop_state["builds"].add(meta["package_mtime"])
    if res["status"] == "ok":
        cell["runs"].append(res)
        return
    cell["status"], cell["error"] = "crash", res["error"]
    cell["crash"] = res
    if res.get("stage") == "load":  # cannot import or build the loop: nothing else will run
        loop_state["load_error"] = res["error"]


def _brief(cell: dict[str, Any]) -> str:
    if cell["status"] != "ok":
        return f"{cell['status']}: {cell['error']}"
    last = cell["runs"][-1]
    return (
        f"{_fmt_rate(last['rate'])}/s  {last['cpu_us']:.1f} µs/op  "
        f"(server busy {last['server_busy']:.0%}, client busy {last['client_busy']:.0%})"
    )


def summarise(state: dict[str, Any], scenarios: list[Scenario]) -> dict[str, Any]:
    """Per loop, per scenario: medians of the rounds plus every run, or the crash."""
    loops: dict[str, Any] = {}
    for name, ls in state.items():
        meta = ls["meta"] or {}
        entry = {
            "kind": "reference" if name == FLOOR else _common.LOOPS[name].kind,
            "loop_class": meta.get("loop_class"),
            "version": meta.get("version"),
            "backend": meta.get("backend"),
            "load_error": ls["load_error"],
            # More than one: the package changed during the run, rounds saw different builds.
            "package_mtimes": sorted(ls["builds"]),
            "scenarios": {},
        }
        for sc in scenarios:
            cell = ls["scenarios"].get(sc.key)
            if cell is None:
                continue
            out: dict[str, Any] = {"status": cell["status"], "error": cell["error"]}
            runs = cell["runs"]
            if runs and cell["status"] == "ok":
                out["rate"] = statistics.median(r["rate"] for r in runs)
                out["cpu_us"] = statistics.median(r["cpu_us"] for r in runs)
                out["server_busy"] = statistics.median(r["server_busy"] for r in runs)
                out["client_busy"] = statistics.median(r["client_busy"] for r in runs)
            out["runs"] = runs
            if "crash" in cell:
                out["crash"] = cell["crash"]
            entry["scenarios"][sc.key] = out
        loops[name] = entry
    return loops


# --------------------------------------------------------------------------- tables


def _fmt_rate(rate: float) -> str:
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def _fmt_us(us: float) -> str:
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def _cell(loops: dict[str, Any], name: str, key: str) -> dict[str, Any] | None:
    return loops.get(name, {}).get("scenarios", {}).get(key)


def _ratio_vs_rloop(loops: dict[str, Any], name: str, key: str) -> str:
    mine, ref = _cell(loops, name, key), _cell(loops, "rloop", key)
    if not mine or not ref or "cpu_us" not in mine or "cpu_us" not in ref:
        return "—"
    return f"{mine['cpu_us'] / ref['cpu_us']:.2f}×"


def _status_text(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "—"
    return "crash" if cell["status"] == "crash" else cell["status"]


def _has(result: dict[str, Any], kind: str) -> bool:
    return any(SCENARIOS[k].kind == kind for k in result["settings"]["scenarios"])


def http_table(result: dict[str, Any]) -> str:
    """Rows = loops; per HTTP scenario: req/s, server CPU µs/req, that CPU over rloop's."""
    loops = result["loops"]
    keys = [k for k in result["settings"]["scenarios"] if SCENARIOS[k].kind == "http"]
    header = ["loop"]
    for key in keys:
        label = SCENARIOS[key].label
        header += [f"{label} req/s", f"{label} CPU µs/req", f"{label} CPU vs rloop"]
    rows = []
    for name in loops:
        row = [name]
        for key in keys:
            cell = _cell(loops, name, key)
            if cell and "rate" in cell:
                row += [
                    _fmt_rate(cell["rate"]),
                    _fmt_us(cell["cpu_us"]),
                    _ratio_vs_rloop(loops, name, key),
                ]
            else:
                row += [_status_text(cell), "—", "—"]
        rows.append(row)
    return _common.markdown_table(header, rows)


def echo_table(result: dict[str, Any]) -> str:
    """Rows = loops; one column per echo scenario: msg/s · server CPU µs/msg (× rloop's)."""
    loops = result["loops"]
    keys = [k for k in result["settings"]["scenarios"] if SCENARIOS[k].kind == "echo"]
    header = ["loop", *(SCENARIOS[k].label for k in keys)]
    rows = []
    for name in loops:
        if not any(_cell(loops, name, key) for key in keys):
            continue  # the C floor serves HTTP only
        row = [name]
        for key in keys:
            cell = _cell(loops, name, key)
            if cell and "rate" in cell:
                ratio = _ratio_vs_rloop(loops, name, key)
                tail = f" ({ratio})" if name != "rloop" and ratio != "—" else ""
                row.append(f"{_fmt_rate(cell['rate'])} · {_fmt_us(cell['cpu_us'])} µs{tail}")
            else:
                row.append(_status_text(cell))
        rows.append(row)
    return _common.markdown_table(header, rows)


def target_line(result: dict[str, Any]) -> str | None:
    """The project target: ringloop-io_uring's CPU µs/request ≤ 0.8× rloop's (plain HTTP)."""
    loops = result["loops"]
    mine, ref = _cell(loops, "ringloop-io_uring", "http"), _cell(loops, "rloop", "http")
    if not mine or not ref:
        return None
    if "cpu_us" not in mine or "cpu_us" not in ref:
        return "Target (ringloop-io_uring CPU µs/request ≤ 0.8× rloop's, plain HTTP): not measurable in this run."
    ratio = mine["cpu_us"] / ref["cpu_us"]
    verdict = "met" if ratio <= 0.8 else "not met"
    line = (
        f"Target (ringloop-io_uring CPU µs/request ≤ 0.8× rloop's, plain HTTP): "
        f"{_fmt_us(mine['cpu_us'])} / {_fmt_us(ref['cpu_us'])} µs = {ratio:.2f}× — {verdict}."
    )
    floor = _cell(loops, FLOOR, "http")
    if floor and "cpu_us" in floor:
        line += (
            f" The same responder in C on epoll ({FLOOR}: no Python, no loop library) used "
            f"{_fmt_us(floor['cpu_us'])} µs = {floor['cpu_us'] / ref['cpu_us']:.2f}× rloop's: "
            "the kernel's TCP work per request, which no server on this machine goes below."
        )
    return line


def notes(result: dict[str, Any]) -> list[str]:
    """Crashes, skips, loop errors and runs the load generator could not saturate."""
    out = []
    skips = {
        c["error"]
        for e in result["loops"].values()
        for c in e["scenarios"].values()
        if c["status"] == "skipped"
    }
    out += [f"- skipped: {why}" for why in sorted(skips)]
    busy = [
        c["server_busy"]
        for e in result["loops"].values()
        for c in e["scenarios"].values()
        if "server_busy" in c
    ]
    if busy and statistics.median(busy) < 0.7:
        out.append(
            f"- servers were busy only {statistics.median(busy):.0%} of the time (median; a "
            "saturated server is near 100%): other work competed for the CPUs or the load "
            "generator fell behind, so the rates say little; compare the CPU µs per operation"
        )
    for name, e in result["loops"].items():
        if len(e["package_mtimes"]) > 1:
            out.append(
                f"- **{name}**: its package was modified during the run (newest file at "
                f"{', '.join(e['package_mtimes'])}): the rounds did not all measure the same build"
            )
    for name, e in result["loops"].items():
        for key, c in e["scenarios"].items():
            if c["status"] == "crash":
                out.append(f"- **{name}** `{key}`: crash — {c['error']}")
                continue
            if c["status"] != "ok" or "rate" not in c:
                continue
            errs = sum(r.get("loop_errors") or 0 for r in c["runs"])
            if errs:
                out.append(
                    f"- **{name}** `{key}`: {errs} errors passed to the loop's exception handler"
                )
            if c["server_busy"] < 0.85 and c["client_busy"] > 0.9:
                out.append(
                    f"- **{name}** `{key}`: load generator saturated (server busy "
                    f"{c['server_busy']:.0%}): the rate is the client's, the CPU µs/op still holds"
                )
    return out


def readme_section(result: dict[str, Any]) -> str:
    """The README block: how it was measured, the HTTP table, the target, the echo table."""
    m, s = result["machine"], result["settings"]
    described = ", ".join(
        f"{name} {e['version'] or '?'}" + (f" [{e['backend']}]" if e["backend"] else "")
        for name, e in result["loops"].items()
        if e["version"] or e["backend"]
    )
    parts = [
        f"Measured {m['timestamp']} at commit `{m['git_commit']}`: {m['cpu_model']}, "
        f"{m['cpu_count']} CPUs, Linux {m['kernel']}, Python {m['python']}; "
        f"{s['rounds']} round(s) × {s['duration']:g} s per run, median; server pinned to CPU "
        f"{s['server_cpu']}, load generator to CPU {s['client_cpu']}; {CONNECTIONS} connections"
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        f"Loops: {described}.",
    ]
    images = []
    if _has(result, "http"):
        parts += [
            "",
            "**HTTP** (wrk `-t1 -c64`, canned keep-alive response). CPU µs/req is the server "
            "process's CPU per request (lower is better); *vs rloop* is that figure over "
            "rloop's in the same run (< 1 means less CPU than rloop).",
            "",
            http_table(result),
        ]
        if (target := target_line(result)) is not None:
            parts += ["", target]
        images.append("![HTTP](results/transports_http.png)")
    if _has(result, "echo"):
        parts += [
            "",
            f"**Echo** ({CONNECTIONS} connections, message size per column). Each cell: "
            "messages/s · server CPU µs per message (that CPU over rloop's).",
            "",
            echo_table(result),
        ]
        images.append("![echo](results/transports_echo.png)")
    if extra := notes(result):
        parts += ["", "Notes:", "", *extra]
    parts += ["", " ".join(images)]
    return "\n".join(parts)


# --------------------------------------------------------------------------- charts


def charts(result: dict[str, Any], outdir: Path) -> list[Path]:
    """transports_http.png and transports_echo.png: throughput above, server CPU/op below.

    One panel per HTTP scenario and one per echo API (message sizes side by side, log
    scale), because the rates differ tenfold between panels and would flatten each other.
    """
    import matplotlib

    matplotlib.use("Agg")  # headless: the runner never opens a window
    import matplotlib.pyplot as plt

    written = []
    keys = result["settings"]["scenarios"]
    tail = f"{result['machine']['cpu_model']}, Python {result['machine']['python']}"
    for kind, unit, filename in (
        ("http", "request", "transports_http.png"),
        ("echo", "message", "transports_echo.png"),
    ):
        panels = _panels(kind, keys)
        if not panels:
            continue
        # Only the loops measured in this kind of scenario (the C floor serves HTTP only).
        kind_keys = [k for _, group in panels for k in group]
        loops = {
            name: e
            for name, e in result["loops"].items()
            if any(_cell(result["loops"], name, k) for k in kind_keys)
        }
        fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels) + 1, 8), squeeze=False)
        for col, (title, group) in enumerate(panels):
            for row, (field, what) in enumerate(
                (
                    ("rate", f"{unit}s/s (higher is better)"),
                    ("cpu_us", f"server CPU µs/{unit} (lower is better)"),
                )
            ):
                ax = axes[row][col]
                _bars(ax, loops, group, field, log=kind == "echo")
                ax.set_title(title if row == 0 else "", fontsize="medium")
                if col == 0:
                    ax.set_ylabel(what)
        # Below the panels, not in one: a legend inside a panel hides somebody's bar.
        fig.legend(
            handles=_legend_handles(loops),
            loc="lower center",
            ncol=len(loops),
            fontsize="small",
        )
        fig.suptitle(
            f"{kind}: {CONNECTIONS} connections, server and load on separate CPUs ({tail})"
        )
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        path = outdir / filename
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def _panels(kind: str, keys: list[str]) -> list[tuple[str, list[str]]]:
    """(title, scenario keys) per chart panel: echo grouped by API, HTTP one per scenario."""
    mine = [k for k in keys if SCENARIOS[k].kind == kind]
    if kind == "http":
        return [(SCENARIOS[k].label, [k]) for k in mine]
    apis = list(dict.fromkeys(SCENARIOS[k].api for k in mine))
    return [(f"echo, {api}", [k for k in mine if SCENARIOS[k].api == api]) for api in apis]


def _legend_handles(loops: dict[str, Any]) -> list[Any]:
    from matplotlib.patches import Patch

    return [Patch(color=_common.COLOURS.get(name, "#333333"), label=name) for name in loops]


def _bars(ax: Any, loops: dict[str, Any], keys: list[str], field: str, log: bool) -> None:
    """Grouped bars, one group per scenario; a crashed loop gets a label where its bar goes."""
    names = list(loops)
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        for j, key in enumerate(keys):
            x = j - 0.4 + width * (i + 0.5)
            cell = _cell(loops, name, key) or {}
            if field in cell:
                ax.bar(x, cell[field], width, color=_common.COLOURS.get(name))
            elif cell.get("status") in ("crash", "skipped"):
                # x in data, y in axes coordinates: the label sits on the floor in log scale too
                ax.text(
                    x,
                    0.02,
                    cell["status"],
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize="x-small",
                    color="#aa0000",
                    transform=ax.get_xaxis_transform(),
                )
    if log:
        ax.set_yscale("log")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([_size_label(k) for k in keys])
    ax.grid(axis="y", which="both", alpha=0.3)


def _size_label(key: str) -> str:
    sc = SCENARIOS[key]
    return f"{sc.size // 1024} KiB" if sc.kind == "echo" else ""


# --------------------------------------------------------------------------- main

QUICK = {"rounds": 1, "duration": 1.0, "warmup": 0.3}
FULL = {"rounds": 3, "duration": 3.0, "warmup": 0.5}


def main(argv: list[str] | None = None) -> int:
    """Runner entry point (also what ``benchmarks/run.py transports`` calls)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--server" in argv:
        return server_worker(argv)
    args = _parse_args(argv)
    preset = QUICK if args.quick else FULL
    rounds = args.rounds or preset["rounds"]
    st = Settings(
        duration=args.duration or preset["duration"],
        warmup=preset["warmup"],
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
    )
    keys = args.scenarios or (QUICK_SCENARIOS if args.quick else list(SCENARIOS))
    scenarios = [SCENARIOS[k] for k in keys]
    # A demo (--quick) must not overwrite the committed full-run figures the README shows.
    out_dir = args.out or (_common.RESULTS_DIR / "quick" if args.quick else _common.RESULTS_DIR)
    update_readme = (not args.quick) if args.readme is None else args.readme

    machine = _common.machine_info()
    with tempfile.TemporaryDirectory(prefix="ringloop-bench-") as tmp:
        tools = _tools(scenarios, Path(tmp))
        print(
            f"transports: {len(args.loops)} loops (+ {FLOOR} for HTTP) × {len(scenarios)} scenarios × {rounds} "
            f"round(s) × {st.duration:g} s; server on CPU {st.server_cpu}, load on CPU "
            f"{st.client_cpu}",
            flush=True,
        )
        t0 = time.monotonic()
        loops = args.loops + ([FLOOR] if tools.floor else [])
        state = collect(loops, scenarios, rounds, st, tools)
    machine["loadavg_end"] = list(os.getloadavg())
    result = {
        "suite": "transports",
        "machine": machine,
        "settings": {
            "quick": args.quick,
            "rounds": rounds,
            "duration": st.duration,
            "echo_warmup": st.warmup,
            "connections": CONNECTIONS,
            "pipeline_depth": PIPELINE_DEPTH,
            "server_cpu": st.server_cpu,
            "client_cpu": st.client_cpu,
            "scenarios": keys,
            "tools": {"echo_client": tools.echo_skip or "ok", "wrk": tools.http_skip or "ok"},
            "statistic": "median of rounds; one server process per run",
            "cpu_source": "/proc/PID/stat utime+stime of the server process, all threads",
            "seconds": round(time.monotonic() - t0, 1),
        },
        "loops": summarise(state, scenarios),
    }
    return _write_outputs(result, out_dir, update_readme)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="transports.py", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 scenarios × 1 s (under 30 s)")
    parser.add_argument(
        "--loops", nargs="+", default=list(_common.LOOPS), choices=list(_common.LOOPS)
    )
    parser.add_argument("--scenarios", nargs="+", default=None, choices=list(SCENARIOS))
    parser.add_argument(
        "--rounds", type=int, default=None, help="runs per pair (default 3, quick 1)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per run (default 3; wrk rounds to whole seconds)",
    )
    parser.add_argument("--server-cpu", type=int, default=SERVER_CPU, help="pin the server here")
    parser.add_argument("--client-cpu", type=int, default=CLIENT_CPU, help="pin the load here")
    _common.add_output_args(parser)
    return parser.parse_args(argv)


def _tools(scenarios: list[Scenario], workdir: Path) -> Tools:
    """Build or find only the load generators the chosen scenarios need."""
    client, echo_skip = (None, None)
    if any(sc.kind == "echo" for sc in scenarios):
        client, echo_skip = build_c_tool(ECHO_CLIENT_SRC, workdir)
    wrk, http_skip = (None, None)
    if any(sc.kind == "http" for sc in scenarios):
        wrk, http_skip = ensure_wrk()
    floor = None
    if wrk is not None:
        floor, floor_skip = build_c_tool(HTTP_FLOOR_SRC, workdir)
        if floor_skip:
            print(f"  {FLOOR} row left out: {floor_skip}", flush=True)
    for what, why in (("echo", echo_skip), ("HTTP", http_skip)):
        if why:
            print(f"  {what} scenarios skipped: {why}", flush=True)
    return Tools(client, echo_skip, wrk, http_skip, floor)


def _write_outputs(result: dict[str, Any], out_dir: Path, update_readme: bool) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "transports.json"
    written = [json_path]
    try:
        written += charts(result, out_dir)
    except Exception as exc:  # a chart must not cost us the numbers
        print(f"charts skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    _common.write_json_atomically(json_path, result)

    if _has(result, "http"):
        print()
        print(http_table(result))
        if (target := target_line(result)) is not None:
            print(target)
    if _has(result, "echo"):
        print()
        print(echo_table(result))
    for note in notes(result):
        print(note)
    if update_readme:
        if _common.update_readme_section("transports", readme_section(result)):
            written.append(_common.README)
        else:
            print("README.md has no transports markers; table not written there", file=sys.stderr)
    print(f"\n{result['settings']['seconds']}s; wrote " + ", ".join(str(p) for p in written))
    ok = any("rate" in c for e in result["loops"].values() for c in e["scenarios"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
