"""Transports suite: TCP and UDP echo and HTTP throughput per loop, with the server's CPU per operation.

Every loop in ``loops.LOOPS`` serves the same load, one server process at a time:

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

This module holds the workload: the servers under test (run as ``transports.py --server``),
the scenarios, how each scenario loads a server and what makes a run a crash, and ``main``.
Starting and stopping the servers, pinning, /proc accounting, wrk and the C tools are
``harness.py``'s; the tables, README section and charts are ``transports_report.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The path line above makes these importable when this file is run as a script.
import harness  # noqa: E402
import reporting  # noqa: E402
import tools  # noqa: E402
import transports_report  # noqa: E402
from loops import LOOPS, make_loop, package_mtime  # noqa: E402
from rounds import run_rounds, summarise_rounds  # noqa: E402

THIS = Path(__file__).resolve()
ECHO_CLIENT_SRC = harness.BENCH_DIR / "echo_client.c"
HTTP_FLOOR_SRC = harness.BENCH_DIR / "http_floor.c"
# The HTTP responder in C on plain epoll (http_floor.c): not a loop, the kernel's share of
# every loop's figure, measured in the same run.
FLOOR = "c-floor"
PIPELINE_LUA = harness.BENCH_DIR / "pipeline.lua"

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
            harness.emit(self.out, {"type": "loop_error", "message": text})

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
        harness.emit(self.out, {"type": "conn", "nodelay": nodelay})


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
    harness.stop_on_stdin_eof(loop, stop)
    harness.emit(state.out, {**ready, "port": port})
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
    harness.stop_on_stdin_eof(loop, stop)
    harness.emit(state.out, {**ready, "port": port})
    await stop
    transport.close()


def server_worker(argv: list[str]) -> int:
    """Serve one API on one loop until stdin closes; JSON lines on the protocol stream."""
    parser = argparse.ArgumentParser(prog="transports.py --server")
    parser.add_argument("--server", required=True, choices=sorted(LOOPS))
    parser.add_argument(
        "--api", required=True, choices=["protocol", "streams", "buffered", "udp", "http"]
    )
    parser.add_argument("--cpu", type=int, default=None)
    args = parser.parse_args(argv)
    out = harness.claim_stdout()
    pinned = harness.pin_to_cpu(args.cpu)
    try:
        loop, info = make_loop(args.server)
    except Exception as exc:  # import failure, io_uring refused, backend mismatch...
        harness.emit_error(out, "load", exc, getattr(exc, "info", {}))
        return 2
    state = ServerState(out)
    loop.set_exception_handler(state.exception_handler)
    asyncio.set_event_loop(loop)
    ready = {
        "type": "ready",
        "pid": os.getpid(),
        "cpu": pinned,
        "package_mtime": package_mtime(loop),
        **info,
    }
    try:
        loop.run_until_complete(_serve(args.api, state, ready))
    except Exception as exc:  # create_server refused, or the loop blew up while serving
        harness.emit_error(out, "serve", exc)
        return 3
    harness.emit(out, {"type": "done", "loop_errors": state.loop_errors})
    return 0


# --------------------------------------------------------------------------- one run


@dataclass
class Settings:
    duration: float  # seconds of measurement per run
    warmup: float  # seconds of load before the window opens (echo)
    server_cpu: int | None
    client_cpu: int | None


@dataclass
class Tools:
    """The load generators, or why each is unavailable."""

    echo_client: str | None
    echo_skip: str | None
    wrk: str | None
    http_skip: str | None
    floor: str | None = None  # http_floor built, or None (then the floor row is left out)


def start_server(
    loop_name: str, api: str, cpu: int | None, floor: str | None
) -> harness.ServerProcess:
    """A ``harness.ServerProcess`` serving ``api`` on ``loop_name`` (or the C floor)."""
    if loop_name == FLOOR:  # same protocol on stdin/stdout, no Python
        assert floor is not None
        return harness.ServerProcess([floor, *([str(cpu)] if cpu is not None else [])])
    cmd = [sys.executable, str(THIS), "--server", loop_name, "--api", api]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    return harness.ServerProcess(
        cmd, {**os.environ, **LOOPS[loop_name].env, "PYTHONUNBUFFERED": "1"}
    )


def run_echo(
    server: harness.ServerProcess, port: int, client: str, sc: Scenario, st: Settings
) -> dict:
    """One echo run; the client itself snapshots the server's CPU at the window's edges."""
    cmd = harness.pinned(
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
        why = harness.last_line(proc.stderr, "(no output)")
        return {"failure": f"echo client exit {proc.returncode}: {why}"}
    if "error" in res:
        return {"failure": f"echo client: {res['error']}"}
    failure = _echo_failure(res)
    if failure:
        return {"failure": failure, "client": res}
    cpu_s = res["server_ticks"] / res["clk_tck"]
    # Busy over the client's own window: the client read the server's CPU at its edges.
    return harness.rates(
        res["messages"], res["seconds"], cpu_s, res["client_cpu_s"], res["seconds"]
    )


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


def run_http(
    server: harness.ServerProcess, port: int, wrk: str, sc: Scenario, st: Settings
) -> dict:
    """One wrk run; the server's CPU is read just before wrk starts and just after it exits.

    That window also holds wrk's 64 connects and its exit, a few hundred µs of server work
    against a second or more of requests.
    """
    problem = http_probe(port)
    if problem:
        return {"failure": problem}
    cmd = tools.wrk_command(
        wrk,
        f"http://127.0.0.1:{port}/",
        connections=CONNECTIONS,
        duration=st.duration,
        script=PIPELINE_LUA if sc.depth > 1 else None,
        script_args=(str(sc.depth),) if sc.depth > 1 else (),
    )
    cmd = harness.pinned(cmd, st.client_cpu)
    # wrk is the only child reaped while it runs, so the window's children CPU is wrk's own.
    window = harness.CpuWindow(server.pid)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=st.duration + 60)
    except subprocess.TimeoutExpired:
        return {"failure": f"wrk timed out after {st.duration + 60:.0f}s"}
    window.close()
    report = tools.parse_wrk(proc.stdout)
    errors = {k: v for k, v in report["socket_errors"].items() if v}
    if proc.returncode != 0 or "requests" not in report:
        why = harness.last_line(proc.stderr or proc.stdout, "(no output)")
        return {"failure": f"wrk exit {proc.returncode}: {why}"}
    if window.server_seconds is None or not server.alive():
        return {"failure": "server process died during the run", "wrk": proc.stdout}
    if errors or report["non_2xx"] or report["requests"] == 0:
        why = ", ".join(f"{k} {v}" for k, v in errors.items()) or "no requests answered"
        if report["non_2xx"]:
            why += f", non-2xx {report['non_2xx']}"
        return {"failure": f"wrk socket errors: {why}", "wrk": proc.stdout}
    figures = harness.rates(
        report["requests"],
        report["seconds"],
        window.server_seconds,
        window.children_seconds,
        window.wall,
    )
    return {**figures, "wrk": proc.stdout}


def measure(loop_name: str, sc: Scenario, st: Settings, tools: Tools) -> dict[str, Any]:
    """Start a server for ``sc`` on ``loop_name``, load it once, stop it; never raises."""
    server = start_server(loop_name, sc.api, st.server_cpu, tools.floor)
    try:
        try:
            ready = server.wait_ready(timeout=30)
        except harness.ServerFailed as exc:
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
        end = _stopped(server)
        # It may also have died between the load's end and our look: then it never said done.
        died = died or (not end["done"] and not end["hung_on_stop"])
        if died or "failure" in res:
            return _crash(res, server, end, ready, died)
        return {"status": "ok", "meta": ready, **res, **end}
    finally:
        server.close()


def _stopped(server: harness.ServerProcess) -> dict[str, Any]:
    """Stop the server; its exit plus what our servers report besides "ready" (ServerState)."""
    end = server.stop()
    seen = server.seen
    return {
        **end,
        "loop_errors": (server.first("done") or {}).get("loop_errors"),
        "loop_error_samples": [ln["message"] for ln in seen if ln["type"] == "loop_error"],
        "nodelay": next((ln["nodelay"] for ln in seen if ln["type"] == "conn"), None),
    }


def _crash(
    res: dict[str, Any], server: harness.ServerProcess, end: dict[str, Any], ready: dict, died: bool
) -> dict[str, Any]:
    """A crash record: the client's view first, then the server's last words."""
    parts = [res.get("failure", "server died")]
    if died:
        parts.append(f"server: {server.failure_text()}")
    elif end["loop_error_samples"]:
        parts.append(f"server loop error: {end['loop_error_samples'][0]}")
    elif server.stderr_tail():
        parts.append(f"server stderr: {harness.last_line(server.stderr_tail(), '(no output)')}")
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
    """Every (scenario, loop) ``rounds`` times, in ``rounds.run_rounds``'s rotated order.

    The C floor serves the HTTP scenarios only; a scenario whose load generator is missing
    is recorded as skipped for every loop.
    """
    return run_rounds(
        loops,
        scenarios,
        rounds,
        lambda name, sc: measure(name, sc, st, tools),
        skip=lambda sc: tools.echo_skip if sc.kind == "echo" else tools.http_skip,
        applies=lambda name, sc: name != FLOOR or sc.kind == "http",
    )


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
    out_dir, update_readme = reporting.output_choice(args)

    machine = harness.machine_info()
    with tempfile.TemporaryDirectory(prefix="ringloop-bench-") as tmp:
        tools = _tools(scenarios, Path(tmp))
        print(
            f"transports: {len(args.loops)} loops (+ {FLOOR} for HTTP) × {len(scenarios)} "
            f"scenarios × {rounds} round(s) × {st.duration:g} s; server on CPU "
            f"{st.server_cpu}, load on CPU {st.client_cpu}",
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
        "loops": summarise_rounds(
            state, scenarios, lambda name: "reference" if name == FLOOR else LOOPS[name].kind
        ),
    }
    reporting.publish(
        result,
        out_dir,
        "transports.json",
        lambda r: transports_report.console(r, SCENARIOS),
        charts=lambda r, d: transports_report.charts(r, SCENARIOS, d),
        section="transports" if update_readme else None,
        readme_body=lambda r: transports_report.readme_section(r, SCENARIOS),
    )
    ok = any("rate" in c for e in result["loops"].values() for c in e["scenarios"].values())
    return 0 if ok else 1


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="transports.py", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 scenarios × 1 s (under 30 s)")
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS))
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
    reporting.add_output_args(parser)
    return parser.parse_args(argv)


def _tools(scenarios: list[Scenario], workdir: Path) -> Tools:
    """Build or find only the load generators the chosen scenarios need."""
    client, echo_skip = (None, None)
    if any(sc.kind == "echo" for sc in scenarios):
        client, echo_skip = tools.build_c_tool(ECHO_CLIENT_SRC, workdir)
    wrk, http_skip = (None, None)
    if any(sc.kind == "http" for sc in scenarios):
        wrk, http_skip = tools.ensure_wrk()
    floor = None
    if wrk is not None:
        floor, floor_skip = tools.build_c_tool(HTTP_FLOOR_SRC, workdir)
        if floor_skip:
            print(f"  {FLOOR} row left out: {floor_skip}", flush=True)
    for what, why in (("echo", echo_skip), ("HTTP", http_skip)):
        if why:
            print(f"  {what} scenarios skipped: {why}", flush=True)
    return Tools(client, echo_skip, wrk, http_skip, floor)


if __name__ == "__main__":
    sys.exit(main())
