"""WebSocket server suite: ringloop's server beside uvicorn (websockets, wsproto), granian,
socketify, cymongoose, aiohttp and the ``websockets`` library's own server, in one run.

Every subject (``ws_peers.SUBJECTS``) is started as its own process, pinned to CPU 0; the
load runs on CPU 1 from ``ws_client.c`` (built with cc at each run: a Python client would be
the bottleneck). The scenarios:

  echo-32, echo-1k, echo-64k   64 connections, each sending a binary message of 32 B,
                               1 KiB or 64 KiB and waiting for its echo before the next
  broadcast                    1,000 subscribers and one publisher sending 32 B messages
                               that the server relays to every subscriber; at most
                               ``WINDOW`` messages not yet received by every subscriber

Per run: messages/s (echoes, or deliveries to subscribers), the server's CPU µs per message
(utime + stime of its whole process tree from ``/proc``, read after the connections are
open and when the load ends), the p50/p99 round trip of an echo or the time from a
broadcast's send until its last subscriber has it, and how busy each side was. Before any
load the runner checks the subject's answers with a real client (``websockets``): the echo
of each size comes back unchanged, two subscribers both get a published message. A subject
that fails to start, answers wrongly, dies or makes the client count errors is recorded as
a crash with its error; one that cannot be installed here is recorded as unavailable.

    python benchmarks/ws_suite.py [--quick] [--subjects ...] [--scenarios ...] [--rounds N]
    python benchmarks/run.py ws [--quick]

Full run: every scenario, 3 rounds × 3 s, median; ``results/ws.json``, ``results/ws_cpu.png``,
``results/ws_rate.png`` and the README section between the ``ws`` markers. ``--quick``: 1
round × 1 s into ``results/quick/``. The servers are ``ws_peers.py``'s, the tables and
charts ``ws_report.py``'s, processes and /proc ``harness.py``'s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The path line above makes these importable when this file is run as a script.
import harness  # noqa: E402
import reporting  # noqa: E402
import suite_runner  # noqa: E402
import tools  # noqa: E402
import ws_peers  # noqa: E402
import ws_report  # noqa: E402
from ws_peers import SUBJECTS  # noqa: E402

CONNECTIONS = 64
SUBSCRIBERS = 1_000
BROADCAST_SIZE = 32
# Broadcasts in flight: enough that the server always has the next one queued while its
# subscribers' writes go out, few enough that no queue grows (16 × 1,000 deliveries).
WINDOW = 16
CLIENT_SRC = harness.BENCH_DIR / "ws_client.c"
FIELDS = ("rate", "cpu_us", "server_busy", "client_busy", "p50_us", "p99_us", "rss_bytes")


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    kind: str  # "echo" or "broadcast"
    size: int


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in (
        Scenario("echo-32", "echo 32 B", "echo", 32),
        Scenario("echo-1k", "echo 1 KiB", "echo", 1024),
        Scenario("echo-64k", "echo 64 KiB", "echo", 65536),
        Scenario("broadcast", f"broadcast to {SUBSCRIBERS:,}", "broadcast", BROADCAST_SIZE),
    )
}


@dataclass
class Settings:
    duration: float
    server_cpu: int | None
    client_cpu: int | None
    subscribers: int
    first_scenario: str


# --------------------------------------------------------------------------- checking answers


def probe(port: int, sc: Scenario) -> str | None:
    """What is wrong with the subject's answers to ``sc``, checked with a real client, or None.

    Echo: 20 messages of the scenario's size, binary, and one text message, each back
    unchanged. Broadcast: two subscribers both receive each of 5 published messages, in
    order. Catching a wrong answer here means the load generator never counts garbage.
    """
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{port}"
    try:
        if sc.kind == "echo":
            with connect(f"{url}/echo", compression=None, max_size=1 << 24) as ws:
                for i in range(20):
                    msg = bytes([i]) * sc.size
                    ws.send(msg)
                    if (got := ws.recv(timeout=10)) != msg:
                        return f"echo {i + 1} of {sc.size} B came back as {_short(got)}"
                ws.send("héllo")
                if (got := ws.recv(timeout=10)) != "héllo":
                    return f"a text echo came back as {_short(got)}"
            return None
        with (
            connect(f"{url}/sub", compression=None) as a,
            connect(f"{url}/sub", compression=None) as b,
            connect(f"{url}/pub", compression=None) as pub,
        ):
            # A subscriber may be registered a moment after its handshake: publish until
            # both hear one, then check the next ones exactly.
            for _ in range(50):
                pub.send(b"\0" * sc.size)
                try:
                    a.recv(timeout=0.2)
                    b.recv(timeout=0.2)
                    break
                except TimeoutError:
                    continue
            else:
                return "subscribers never received a published message"
            _drain(a), _drain(b)
            for i in range(5):
                msg = i.to_bytes(8, "big") * (sc.size // 8)
                pub.send(msg)
                for who, ws in (("first", a), ("second", b)):
                    if (got := ws.recv(timeout=10)) != msg:
                        return f"the {who} subscriber got {_short(got)} for broadcast {i + 1}"
        return None
    except Exception as exc:  # any failure of a real client is the subject's answer
        return f"websockets client: {type(exc).__name__}: {exc}"


def _drain(ws: Any) -> None:
    try:
        while True:
            ws.recv(timeout=0.2)
    except TimeoutError:
        pass


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else f"{text[:50]}… ({len(value)} long)"


# --------------------------------------------------------------------------- one run


def _client_command(port: int, sc: Scenario, st: Settings, client: str) -> list[str]:
    if sc.kind == "echo":
        args = ["echo", str(port), "/echo", str(CONNECTIONS), str(sc.size), f"{st.duration:g}"]
    else:
        args = ["broadcast", str(port), "/pub", "/sub", str(st.subscribers), str(sc.size)]
        args += [f"{st.duration:g}", str(WINDOW)]
    return harness.pinned([client, *args], st.client_cpu)


def run_load(server: ws_peers.PeerServer, sc: Scenario, st: Settings, client: str) -> dict:
    """One load: ``ws_client`` connects, the window opens, it loads, the window closes."""
    assert server.port is not None
    proc = subprocess.Popen(
        _client_command(server.port, sc, st, client),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = harness.line_queue(proc.stdout)
    window = None
    try:
        first = harness.json_line(lines, timeout=120)
        if not first or first.get("type") != "connected":
            why = (first or {}).get("error") or "no output"
            return {"failure": f"ws_client could not connect: {why}"}
        window = harness.CpuWindow(server.pid, tree=True)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        done = harness.json_line(lines, timeout=st.duration + 60)
        window.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
    if not done or done.get("type") != "done":
        return {"failure": f"ws_client ended without a result: {harness.last_line(stderr)}"}
    rss = harness.tree_rss_bytes(server.pid)
    if window.server_seconds is None or not server.alive():
        return {"failure": "server process died during the run", "client": done}
    if done["errors"]:
        return {"failure": f"{done['errors']} client errors; first: {done.get('first_error')}"}
    if done["messages"] == 0:
        return {"failure": f"no message answered in {done['seconds']:.1f} s", "client": done}
    figures = harness.rates(
        done["messages"], done["seconds"], window.server_seconds, done["client_cpu_s"], window.wall
    )
    return {
        **figures,
        "p50_us": done["p50_us"],
        "p99_us": done["p99_us"],
        "rss_bytes": rss,
        "client": done,
    }


def measure(name: str, sc: Scenario, st: Settings, client: str, work: Path) -> dict[str, Any]:
    """Start ``name``, check its answers, load it once, stop it; never raises."""
    subject = SUBJECTS[name]
    found = ws_peers.versions(subject)
    meta: dict[str, Any] = {
        "loop_class": subject.how,
        "version": found.get(subject.server) or "?",
        "backend": None,
    }
    if subject.server == "ringloop":
        meta["package_mtime"] = ws_peers.ringloop_build()
    server = ws_peers.start(subject, st.server_cpu, work)
    try:
        try:
            ready = server.wait_ready(timeout=60)
        except harness.ServerFailed as exc:
            return {
                "status": "crash",
                "stage": "load" if sc.key == st.first_scenario else "start",
                "error": str(exc),
                "stderr_tail": server.stderr_tail(),
                "meta": meta,
                "versions": found,
            }
        meta.update(pid=ready["pid"], port=server.port, command=server.proc.args)
        assert server.port is not None
        problem = probe(server.port, sc)
        res: dict[str, Any] = {"failure": problem} if problem else run_load(server, sc, st, client)
        if problem and sc.key == st.first_scenario:
            res["stage"] = "load"  # wrong echoes now will be wrong in every scenario
        died = not server.alive()
        end = server.stop()
        if died or "failure" in res:
            error = res["failure"] if "failure" in res else "server died"
            tail = harness.last_line(server.stderr_tail(), "")
            return {
                "status": "crash",
                "stage": res.get("stage", "run"),
                "error": error + (f"; server: {tail}" if tail and died else ""),
                "stderr_tail": server.stderr_tail(),
                "meta": meta,
                "versions": found,
            }
        return {"status": "ok", "meta": meta, **res, **end, "versions": found}
    finally:
        if server.alive():
            server.stop(timeout=5)
        server.close()


# --------------------------------------------------------------------------- the run

QUICK = {"rounds": 1, "duration": 1.0}
FULL = {"rounds": 3, "duration": 3.0}


def main(argv: list[str] | None = None) -> int:
    """Runner entry point (also what ``benchmarks/run.py ws`` calls)."""
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    preset = QUICK if args.quick else FULL
    keys = args.scenarios or list(SCENARIOS)
    out_dir, update_readme = reporting.output_choice(args)
    run = suite_runner.SuiteRun.from_args(
        "ws", ws_report, args, preset, [SCENARIOS[k] for k in keys]
    )
    st = Settings(
        duration=run.duration,
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        subscribers=args.subscribers,
        first_scenario=keys[0],
    )
    with tempfile.TemporaryDirectory(prefix="ringloop-ws-") as tmp:
        client, client_error = tools.build_c_tool(CLIENT_SRC, Path(tmp))
        if client is None:
            print(f"ws: cannot build the load generator: {client_error}", file=sys.stderr)
            return 1
        names, unavailable = suite_runner.available(
            args.subjects or list(SUBJECTS), lambda name: ws_peers.check(SUBJECTS[name])
        )
        state = run.run_rounds(names, lambda name, sc: measure(name, sc, st, client, Path(tmp)))
    subjects = run.subjects(
        state,
        SUBJECTS,
        lambda subject: subject.interface,
        FIELDS,
        unavailable,
    )
    settings = run.settings(
        {
            "connections": CONNECTIONS,
            "subscribers": st.subscribers,
            "broadcast_size": BROADCAST_SIZE,
            "window": WINDOW,
        },
        more={"how": {n: SUBJECTS[n].how for n in subjects}},
        cpu_source="/proc/PID/stat utime+stime of the server's whole process tree, "
        "from the client's connected line to its result",
    )
    return run.publish(settings, subjects, out_dir, update_readme)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = suite_runner.parser(
        "ws_suite.py",
        __doc__,
        SUBJECTS,
        SCENARIOS,
        quick_help="1 round × 1 s",
        duration_help="seconds per run (3; quick 1)",
        own=lambda p: p.add_argument(
            "--subscribers", type=int, default=SUBSCRIBERS, help=f"broadcast ({SUBSCRIBERS})"
        ),
    )
    args = parser.parse_args(argv)
    for what, value in (("--rounds", args.rounds), ("--subscribers", args.subscribers)):
        if value is not None and value < 1:
            parser.error(f"{what} must be at least 1, not {value}")
    if args.duration is not None and args.duration <= 0:
        parser.error(f"--duration must be positive, not {args.duration:g}")
    return args


if __name__ == "__main__":
    sys.exit(main())
