"""HTTP server suite: ringloop's server beside granian, uvicorn, socketify, cymongoose, aiohttp,
nginx and a C floor, in one run, as ratios.

Every subject (``http_peers.SUBJECTS``: a server speaking one interface) is started as its
own process, one worker, access log off, pinned to CPU 0; the load runs on CPU 1. The
scenarios:

  plaintext   ``Hello, world!`` (each subject through its interface: raw ASGI, ringloop's
              native handler, WSGI, RSGI, a framework's own API), ``wrk -t1 -c64``
  pipelined   the same, 16 requests per write (``pipeline.lua``); wrk's latency
              percentiles are meaningless there and reported as n/a
  json        FastAPI, ``{"message": "Hello, world!"}`` through a Pydantic model (ASGI
              subjects only; the references answer canned JSON)
  64k         a 64 KiB response body
  upload      a 1 MiB request body read whole by the app (``upload.lua``)
  idle        10,000 keep-alive connections that have each served one request, held idle
              by ``http_client.c``: the server's RSS after minus before, per connection
  slowloris   plaintext twice in one server process: quiet, then beside 1,000 connections
              from ``slowloris.c`` that each send a request line and one header byte a
              second, never ending the head; the server runs with a 5 s head timeout where
              it has one (``http_peers.HEAD_TIMEOUTS``). p99 under slowloris over quiet, and
              how many of those connections the server cut, when. Not in ``--quick``; one
              row per server by default (``SLOWLORIS_SUBJECTS``)

Per wrk run: requests/s, the server's CPU µs per request (utime + stime of its whole
process tree from ``/proc``, so a master and its workers all count), wrk's p50/p99 latency
and the tree's RSS after the load. Before any load the runner checks the subject's answers
(status, body) on one connection and warms it up; a subject that fails to start, answers
wrongly, dies or makes wrk count errors is recorded as a crash with its error and the run
goes on. A subject that cannot be installed here is recorded as unavailable.

    python benchmarks/http_suite.py [--quick] [--subjects ...] [--scenarios ...] [--rounds N]
    python benchmarks/run.py http [--quick]
    python benchmarks/http_suite.py --callgrind [...]   (instructions per request: http_callgrind.py)

Full run: every scenario, 3 rounds × 3 s (the slowloris runs: the head timeout + 3 s), median;
``results/http.json``, ``results/http_cpu.png``, ``results/http_rate.png`` and the README
section between the ``http`` markers. ``--quick``: plaintext and pipelined for every subject,
1 round × 1 s, into ``results/quick/``.

This module is the workload and ``main``; the answer check is ``http_answers.py``'s, the
servers ``http_peers.py``'s, the tables, targets and charts ``http_report.py``'s, processes
and /proc ``harness.py``'s, the flags, rounds and publication ``suite_runner.py``'s.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The path line above makes these importable when this file is run as a script.
import harness  # noqa: E402
import http_peers  # noqa: E402
import http_report  # noqa: E402
import reporting  # noqa: E402
import suite_runner  # noqa: E402
from http_answers import UPLOAD_BYTES, probe  # noqa: E402
from http_peers import FLOOR, PATHS, SUBJECTS  # noqa: E402

# Not `import tools`: the Tools found for a run are `tools` throughout this module.
from tools import build_c_tool, ensure_wrk, parse_wrk, wrk_command  # noqa: E402

CONNECTIONS = 64
PIPELINE_DEPTH = 16
IDLE_CONNECTIONS = 10_000
PIPELINE_LUA = harness.BENCH_DIR / "pipeline.lua"
UPLOAD_LUA = harness.BENCH_DIR / "upload.lua"
CLIENT_SRC = harness.BENCH_DIR / "http_client.c"
FLOOR_SRC = harness.BENCH_DIR / "http_floor.c"
SLOWLORIS_SRC = harness.BENCH_DIR / "slowloris.c"
SLOWLORIS_CONNECTIONS = 1_000
HEAD_TIMEOUT = 5.0
# The wrk runs of the slowloris scenario last at least this much past the head timeout, so
# the cut (and whatever it costs the load) falls inside the loaded run.
SLOWLORIS_MARGIN = 3.0
# A head timeout is the server's, not the interface's: one row per server (its ASGI one
# where it has one; cymongoose's own API, as its ASGI adapter failed the keep-alive probe
# here) and the references, unless --subjects names others.
SLOWLORIS_SUBJECTS = (
    "ringloop-asgi",
    "granian-asgi",
    "uvicorn",
    "cymongoose",
    "socketify-asgi",
    "aiohttp",
    http_peers.NGINX,
    FLOOR,
)
# Medians kept per scenario: rate and CPU, latency where wrk's is usable, memory.
FIELDS = (
    "rate",
    "cpu_us",
    "server_busy",
    "client_busy",
    "p50_us",
    "p99_us",
    "rss_bytes",
    "rss_before",
    "rss_after",
    "rss_per_conn",
    # slowloris: the run beside the slowloris connections ("sl_"), and what they saw
    "sl_rate",
    "sl_cpu_us",
    "sl_server_busy",
    "sl_client_busy",
    "sl_p50_us",
    "sl_p99_us",
    "max_us",
    "sl_max_us",
    "sl_rss_bytes",
    "p99_ratio",
    "opened",
    "failed",
    "cut",
    "still_open",
    "close_median_s",
    "close_max_s",
)


@dataclass(frozen=True)
class Scenario:
    """One load; ``response`` is the app's answer it needs (``http_apps`` names)."""

    key: str
    label: str
    response: str
    kind: str = "wrk"  # "wrk", "idle" or "slowloris"
    depth: int = 1
    script: Path | None = None
    script_args: tuple[str, ...] = field(default=())


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in (
        Scenario("plaintext", "plaintext", "hello"),
        Scenario(
            "pipelined",
            f"pipelined ×{PIPELINE_DEPTH}",
            "hello",
            depth=PIPELINE_DEPTH,
            script=PIPELINE_LUA,
            script_args=(str(PIPELINE_DEPTH),),
        ),
        Scenario("json", "FastAPI JSON", "json"),
        Scenario("64k", "64 KiB response", "big"),
        Scenario(
            "upload", "1 MiB upload", "upload", script=UPLOAD_LUA, script_args=(str(UPLOAD_BYTES),)
        ),
        Scenario("idle", "idle connections", "hello", kind="idle"),
        Scenario("slowloris", "plaintext under slowloris", "hello", kind="slowloris"),
    )
}
QUICK_SCENARIOS = ["plaintext", "pipelined"]


@dataclass
class Settings:
    duration: float
    server_cpu: int | None
    client_cpu: int | None
    idle_connections: int
    first_scenario: str  # a start failure there means the subject cannot run at all
    slowloris_connections: int = SLOWLORIS_CONNECTIONS
    head_timeout: float = HEAD_TIMEOUT

    @property
    def slowloris_seconds(self) -> float:
        """Each wrk run of the slowloris scenario: long enough to hold the cut."""
        return max(self.duration, self.head_timeout + SLOWLORIS_MARGIN)


@dataclass
class Tools:
    work: Path  # built tools, nginx's files
    wrk: str | None
    wrk_error: str | None
    client: str | None
    client_error: str | None
    floor: str | None
    floor_error: str | None
    slowloris: str | None = None
    slowloris_error: str | None = None


# --------------------------------------------------------------------------- one run


def run_wrk(
    server: http_peers.PeerServer,
    sc: Scenario,
    st: Settings,
    wrk: str,
    duration: float | None = None,
) -> dict:
    """One wrk run; server CPU (whole tree) read just before wrk starts and after it exits.

    ``duration``: seconds of load (default: the settings').
    """
    assert server.port is not None
    duration = st.duration if duration is None else duration
    cmd = wrk_command(
        wrk,
        f"http://127.0.0.1:{server.port}{PATHS[sc.response]}",
        connections=CONNECTIONS,
        duration=duration,
        script=sc.script,
        script_args=sc.script_args,
    )
    cmd = harness.pinned(cmd, st.client_cpu)
    # wrk is the only child reaped while it runs, so the window's children CPU is wrk's own.
    window = harness.CpuWindow(server.pid, tree=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    except subprocess.TimeoutExpired:
        return {"failure": f"wrk timed out after {duration + 60:.0f}s"}
    window.close()
    rss = harness.tree_rss_bytes(server.pid)
    report = parse_wrk(proc.stdout)
    errors = {k: v for k, v in report["socket_errors"].items() if v}
    if proc.returncode != 0 or "requests" not in report:
        why = harness.last_line(proc.stderr or proc.stdout, "(no output)")
        return {"failure": f"wrk exit {proc.returncode}: {why}"}
    if window.server_seconds is None or not server.alive():
        return {"failure": "server process died during the run", "wrk": proc.stdout}
    if report["requests"] == 0 and not errors:
        return {"failure": f"no request answered in {report['seconds']:.1f} s", "wrk": proc.stdout}
    if errors or report["non_2xx"]:
        why = ", ".join(f"{k} {v}" for k, v in errors.items())
        if report["non_2xx"]:
            why += f"{', ' if why else ''}non-2xx {report['non_2xx']}"
        return {"failure": f"wrk errors: {why}", "wrk": proc.stdout}
    figures = harness.rates(
        report["requests"],
        report["seconds"],
        window.server_seconds,
        window.children_seconds,
        window.wall,
    )
    # wrk's percentiles of a pipelined run are not measurements (see tools.parse_wrk).
    latency = report["latency_us"] if sc.depth == 1 else {}
    return {
        **figures,
        "p50_us": latency.get("50"),
        "p99_us": latency.get("99"),
        "max_us": report["latency_max_us"] if sc.depth == 1 else None,
        "rss_bytes": rss,
        "wrk": proc.stdout,
    }


def run_idle(server: http_peers.PeerServer, sc: Scenario, st: Settings, client: str) -> dict:
    """RSS per idle keep-alive connection: the tree's RSS before the connections, with them.

    The client opens them all (each serves one request, so the server holds a connection
    that has been used, as a keep-alive client leaves it), says so, and holds them; the
    server gets a second to settle before its RSS is read; then the client checks that the
    server closed none of them. Kernel socket memory is not in RSS: this is the server's
    own memory per connection.
    """
    assert server.port is not None
    time.sleep(0.5)  # whatever the warm-up left to free
    before = harness.tree_rss_bytes(server.pid)
    cmd = harness.pinned(
        [client, "idle", str(server.port), str(st.idle_connections), PATHS[sc.response]],
        st.client_cpu,
    )
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    lines = harness.line_queue(proc.stdout)
    try:
        opened = harness.json_line(lines, timeout=120)
        if opened is None:
            return {"failure": "idle client: no report after 120 s"}
        time.sleep(1.0)
        after = harness.tree_rss_bytes(server.pid)
        proc.stdin.close()
        done = harness.json_line(lines, timeout=60) or {}
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by its handle
        proc.wait()
    want = st.idle_connections
    if opened["open"] < want:
        return {
            "failure": f"only {opened['open']}/{want} connections opened and answered "
            f"({opened['failed']} failed; {opened['first_error'] or 'no error'})"
        }
    still = done.get("still_open")
    if still != opened["open"]:
        return {
            "failure": f"the server closed {opened['open'] - (still or 0)}/{want} idle "
            "connections within the measurement"
        }
    if before is None or after is None or not server.alive():
        return {"failure": "server process died during the run"}
    return {
        "connections": opened["open"],
        "open_seconds": opened["seconds"],
        "rss_before": before,
        "rss_after": after,
        "rss_per_conn": (after - before) / opened["open"],
    }


WRK_FIGURES = (
    "rate",
    "cpu_us",
    "server_busy",
    "client_busy",
    "p50_us",
    "p99_us",
    "max_us",
    "ops",
    "seconds",
)


def run_slowloris(
    server: http_peers.PeerServer, sc: Scenario, st: Settings, tools: Tools
) -> dict[str, Any]:
    """Plaintext quiet, then beside ``st.slowloris_connections`` slowloris connections.

    One server process: the quiet wrk run first (it is also the longer warm-up), then
    ``slowloris.c`` opens its connections (at most 64 connects in flight) and starts to
    trickle; once all are open the same wrk run again, while they trickle and the server
    cuts them (or not) at its head timeout. Both runs last ``st.slowloris_seconds``, so the
    cut falls inside the loaded one. The client trickles a second past wrk's end and then
    says what it saw: how many the server closed, after how long, still open.
    """
    assert server.port is not None and tools.wrk is not None and tools.slowloris is not None
    seconds = st.slowloris_seconds
    quiet = run_wrk(server, sc, st, tools.wrk, seconds)
    if "failure" in quiet:
        return {**quiet, "failure": f"quiet run: {quiet['failure']}"}
    figures: dict[str, Any] = {k: quiet[k] for k in WRK_FIGURES}
    figures.update(rss_bytes=quiet["rss_bytes"], wrk=quiet["wrk"])
    cmd = harness.pinned(
        [
            tools.slowloris,
            str(server.port),
            str(st.slowloris_connections),
            f"{seconds + 1:g}",
            PATHS[sc.response],
        ],
        st.client_cpu,
    )
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    lines = harness.line_queue(proc.stdout)
    try:
        opened = harness.json_line(lines, timeout=120)
        if opened is None:
            return {**figures, "failure": "slowloris client: no report after 120 s"}
        rss = harness.tree_rss_bytes(server.pid)
        loaded = run_wrk(server, sc, st, tools.wrk, seconds)
        done = harness.json_line(lines, timeout=seconds + 60)
    finally:
        if proc.poll() is None:
            proc.stdin.close()  # stops it early, if it is still trickling
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child, by its handle
        proc.wait()
    if done is None:
        return {**figures, "failure": "slowloris client: no final report"}
    seen = {
        "opened": done["opened"],
        "failed": done["failed"],
        "cut": done["closed"],
        "still_open": done["still_open"],
        "close_median_s": (done["close_s"] or {}).get("median"),
        "close_max_s": (done["close_s"] or {}).get("max"),
        "slowloris": done,
    }
    if "failure" in loaded:
        why = f"under slowloris: {loaded['failure']}"
        return {**figures, **seen, "sl_wrk": loaded.get("wrk"), "failure": why}
    if done["opened"] == 0:
        return {**figures, **seen, "failure": f"no slowloris connection opened: {done}"}
    figures.update({f"sl_{k}": loaded[k] for k in WRK_FIGURES})
    figures.update(sl_rss_bytes=rss, sl_wrk=loaded["wrk"], **seen)
    if quiet["p99_us"] and loaded["p99_us"] is not None:
        figures["p99_ratio"] = loaded["p99_us"] / quiet["p99_us"]
    return figures


def measure(name: str, sc: Scenario, st: Settings, tools: Tools) -> dict[str, Any]:
    """Start ``name`` for ``sc``, check it, load it once, stop it; never raises."""
    subject = SUBJECTS[name]
    found = http_peers.versions(subject)
    meta: dict[str, Any] = {
        "loop_class": subject.how,
        "version": http_peers.version_text(subject, found),
        "backend": None,
    }
    if "ringloop" in found:
        meta["package_mtime"] = http_peers.ringloop_build()
    # Outside the meta (which rounds.py keeps once per subject): every run and crash record
    # says which versions it measured.
    return {**_measure(subject, sc, st, tools, meta), "versions": found}


def _measure(
    subject: http_peers.Subject, sc: Scenario, st: Settings, tools: Tools, meta: dict[str, Any]
) -> dict[str, Any]:
    head_timeout = st.head_timeout if sc.kind == "slowloris" else None
    server = http_peers.start(subject, sc.response, st.server_cpu, tools.work, head_timeout)
    try:
        try:
            ready = server.wait_ready(timeout=60)
        except harness.ServerFailed as exc:
            return {
                # Failing with the simplest app means it cannot run at all: rounds.py then
                # records the later scenarios as crashed too, without starting it again.
                "status": "crash",
                "stage": "load" if sc.key == st.first_scenario else "start",
                "error": _with_words(str(exc), server),
                "stderr_tail": server.stderr_tail(),
                "command": server.proc.args,
                "meta": meta,
            }
        meta.update(pid=ready["pid"], port=server.port, command=server.proc.args)
        assert server.port is not None  # set by wait_ready for every kind of server
        problem = probe(server.port, sc, subject.reference)
        if problem:
            res: dict[str, Any] = {"failure": problem}
            # Wrong answers to the simplest request (say, no second response on a keep-alive
            # connection) will be wrong in every scenario: not worth a probe timeout each.
            if sc.key == st.first_scenario:
                res["stage"] = "load"
        elif sc.kind == "idle":
            assert tools.client is not None
            res = run_idle(server, sc, st, tools.client)
        elif sc.kind == "slowloris":
            res = run_slowloris(server, sc, st, tools)
        else:
            assert tools.wrk is not None
            res = run_wrk(server, sc, st, tools.wrk)
        died = not server.alive()
        end = server.stop()
        if died or "failure" in res:
            return _crash(res, server, end, meta, died)
        return {"status": "ok", "meta": meta, **res, **end}
    finally:
        if server.alive():
            server.stop(timeout=5)
        server.close()


def _crash(
    res: dict[str, Any],
    server: http_peers.PeerServer,
    end: dict[str, Any],
    meta: dict[str, Any],
    died: bool,
) -> dict[str, Any]:
    """A crash record: what the load saw first, then the server's last words."""
    parts = [res.get("failure", "server died")]
    tail = server.stderr_tail()
    if died:
        parts.append(f"server: {server.failure_text()}")
    return {
        "status": "crash",
        "stage": res.get("stage", "run"),
        "error": _with_words("; ".join(parts), server),
        "meta": meta,
        "stderr_tail": tail,
        **{k: v for k, v in res.items() if k not in ("failure", "stage")},
        **end,
    }


def last_words(server: http_peers.PeerServer) -> str | None:
    """The telling line of the server's stderr: a fatal error, else the last exception line.

    A Python crash prints its "Fatal Python error" line first and a stack after it, so the
    tail alone does not say what happened.
    """
    server.stderr.seek(0)
    lines = [ln.strip() for ln in server.stderr.read().splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("Fatal Python error"):
            return line
    exceptions = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", ln)]
    if exceptions:
        return exceptions[-1]
    return lines[-1] if lines else None


def _with_words(error: str, server: http_peers.PeerServer) -> str:
    """``error``, and the server's telling stderr line when the text does not hold it yet."""
    words = last_words(server)
    return f"{error}; server stderr: {words}" if words and words not in error else error


# --------------------------------------------------------------------------- the run


def applies(
    name: str, sc: Scenario, slowloris_subjects: tuple[str, ...] = SLOWLORIS_SUBJECTS
) -> bool:
    if sc.kind == "slowloris" and name not in slowloris_subjects:
        return False
    return SUBJECTS[name].serves(sc.response)


def skip_reason(sc: Scenario, tools: Tools) -> str | None:
    if sc.kind == "idle":
        return tools.client_error
    if sc.kind == "slowloris":
        return tools.slowloris_error or tools.wrk_error
    return tools.wrk_error


QUICK = {"rounds": 1, "duration": 1.0, "idle": 2_000}
FULL = {"rounds": 3, "duration": 3.0, "idle": IDLE_CONNECTIONS}


def main(argv: list[str] | None = None) -> int:
    """Runner entry point (also what ``benchmarks/run.py http`` calls)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--callgrind" in argv:
        import http_callgrind

        return http_callgrind.main([a for a in argv if a != "--callgrind"])
    args = _parse_args(argv)
    preset = QUICK if args.quick else FULL
    keys = args.scenarios or (QUICK_SCENARIOS if args.quick else list(SCENARIOS))
    scenarios = [SCENARIOS[k] for k in keys]
    st = Settings(
        duration=args.duration or preset["duration"],
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        idle_connections=args.idle_connections or preset["idle"],
        first_scenario=keys[0],
        slowloris_connections=args.slowloris_connections,
        head_timeout=args.head_timeout,
    )
    # Subjects named on the command line all run the slowloris scenario; by default, one
    # row per server.
    slowloris_subjects = tuple(args.subjects) if args.subjects else SLOWLORIS_SUBJECTS
    args.subjects = args.subjects or list(SUBJECTS)
    out_dir, update_readme = reporting.output_choice(args)
    run = suite_runner.SuiteRun.from_args("http", http_report, args, preset, scenarios)
    with tempfile.TemporaryDirectory(prefix="ringloop-http-") as tmp:
        tools = _tools(scenarios, Path(tmp))
        names, unavailable = suite_runner.available(
            args.subjects,
            lambda name: http_peers.check(SUBJECTS[name], tools.floor, tools.floor_error),
        )
        state = run.run_rounds(
            names,
            lambda name, sc: measure(name, sc, st, tools),
            skip=lambda sc: skip_reason(sc, tools),
            applies=lambda name, sc: applies(name, sc, slowloris_subjects),
        )
    subjects = run.subjects(
        state,
        SUBJECTS,
        lambda subject: subject.interface,
        FIELDS,
        unavailable,
        lambda name, sc: applies(name, sc, slowloris_subjects),
    )
    # A subject none of the scenarios applies to (slowloris runs one row per server) has
    # nothing to show.
    subjects = {n: entry for n, entry in subjects.items() if entry["scenarios"]}
    settings = run.settings(
        {
            "connections": CONNECTIONS,
            "pipeline_depth": PIPELINE_DEPTH,
            "upload_bytes": UPLOAD_BYTES,
            "idle_connections": st.idle_connections,
            "keep_alive_timeout": http_peers.KEEP_ALIVE,
            **(
                _slowloris_settings(st, args.subjects, slowloris_subjects)
                if "slowloris" in keys
                else {}
            ),
        },
        more={
            "tools": {
                "wrk": tools.wrk_error or "ok",
                "http_client": tools.client_error or "ok",
                "c-floor": tools.floor_error or "ok",
                "slowloris": tools.slowloris_error or "ok",
            },
        },
    )
    return run.publish(settings, subjects, out_dir, update_readme)


def _slowloris_settings(
    st: Settings, names: list[str], slowloris_subjects: tuple[str, ...]
) -> dict[str, Any]:
    """What the slowloris scenario ran with, and the head timeout each subject was given."""
    ran = [n for n in names if applies(n, SCENARIOS["slowloris"], slowloris_subjects)]
    return {
        "slowloris_connections": st.slowloris_connections,
        "head_timeout": st.head_timeout,
        "slowloris_seconds": st.slowloris_seconds,
        "head_timeout_settings": {
            n: http_peers.head_timeout_text(SUBJECTS[n], st.head_timeout) for n in ran
        },
        "head_timeout_notes": {
            n: ht.note for n in ran if (ht := http_peers.head_timeout(SUBJECTS[n])) and ht.note
        },
    }


def _parse_args(argv: list[str]) -> argparse.Namespace:
    return suite_runner.parser(
        "http_suite.py",
        __doc__,
        SUBJECTS,
        SCENARIOS,
        quick_help="2 scenarios × 1 s, 1 round",
        duration_help="seconds per wrk run (3; quick 1)",
        own=_own_args,
    ).parse_args(argv)


def _own_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idle-connections", type=int, default=None, help="idle scenario (10000; quick 2000)"
    )
    parser.add_argument(
        "--slowloris-connections",
        type=int,
        default=SLOWLORIS_CONNECTIONS,
        help=f"slowloris scenario ({SLOWLORIS_CONNECTIONS})",
    )
    parser.add_argument(
        "--head-timeout",
        type=float,
        default=HEAD_TIMEOUT,
        help=f"seconds, given to every server that has one in the slowloris scenario "
        f"({HEAD_TIMEOUT:g}); its wrk runs last at least {SLOWLORIS_MARGIN:g} s longer",
    )


def _tools(scenarios: list[Scenario], work: Path) -> Tools:
    """wrk, the idle client and the C floor: found, installed or built, or why not."""
    wrk, wrk_error = (None, None)
    if any(sc.kind in ("wrk", "slowloris") for sc in scenarios):
        wrk, wrk_error = ensure_wrk()
    client, client_error = (None, None)
    if any(sc.kind == "idle" for sc in scenarios):
        client, client_error = build_c_tool(CLIENT_SRC, work)
    floor, floor_error = build_c_tool(FLOOR_SRC, work)
    slowloris, slowloris_error = (None, None)
    if any(sc.kind == "slowloris" for sc in scenarios):
        slowloris, slowloris_error = build_c_tool(SLOWLORIS_SRC, work)
    for what, why in (
        ("wrk", wrk_error),
        ("idle client", client_error),
        (FLOOR, floor_error),
        ("slowloris client", slowloris_error),
    ):
        if why:
            print(f"  {what}: {why}", flush=True)
    return Tools(
        work, wrk, wrk_error, client, client_error, floor, floor_error, slowloris, slowloris_error
    )


if __name__ == "__main__":
    sys.exit(main())
