"""Instructions per HTTP request, counted by callgrind: where timing noise hides differences.

On a shared two-core machine a 10% difference in CPU per request is inside the noise; the
number of instructions a server executes per request is not noisy at all. For each subject
(``http_peers.SUBJECTS``) this runs the server twice under ``valgrind --tool=callgrind
--trace-children=yes`` (every process of a multi-process server is counted):

  1. started, answered one readiness request, stopped: startup, shutdown and that request;
  2. the same plus exactly ``--requests`` plaintext requests over ``--connections``
     keep-alive connections from ``http_client.c count`` (one request in flight per
     connection, the next sent when the previous response is complete).

Instructions per request = (total of run 2 − total of run 1) / requests: startup subtracted.
Connection setup is in the figure, spread over the requests (64 connections for 20,000
requests by default). The kernel's instructions are not counted (callgrind sees user space
only), so the C floor's figure is the floor of user-space work, not of CPU time. ringloop
runs with ``RINGLOOP_BACKEND=io_uring`` forced: io_uring works under valgrind (callgrind
does not check memory definedness), and a silent fallback to epoll would measure
something else. WSGI runs on epoll (see ``backend_under_valgrind``).

    python benchmarks/http_callgrind.py [--subjects ringloop-asgi granian-asgi c-floor]
        [--requests 20000] [--connections 64] [--scenario plaintext|json]
    python benchmarks/http_suite.py --callgrind ...     (the same)
    python benchmarks/http_callgrind.py --subjects ringloop-asgi \
        --ringloop-flags "--watch-threshold 0.05" --name http_callgrind_watch.json

``--ringloop-flags`` adds `ringloop serve` flags to the ringloop subjects (the rows are
named with them), to count what a feature costs per request against a run without.

Slow (a Python server runs ~50× slower under valgrind: a minute or two per subject), so it
is not part of ``make bench``. Output: ``results/http_callgrind.json`` and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import http_peers  # noqa: E402
import reporting  # noqa: E402
import tools  # noqa: E402
from http_peers import PATHS, SUBJECTS  # noqa: E402

DEFAULT_SUBJECTS = ["ringloop-asgi", "granian-asgi", "uvicorn", "c-floor"]
RESPONSES = {"plaintext": "hello", "json": "json"}


def callgrind_command(cmd: list[str], out_dir: Path, options: Sequence[str] = ()) -> list[str]:
    """``cmd`` under callgrind, every child process traced, one output file per process;
    ``options``: more callgrind options (``--separate-threads=yes``, ``--dump-before=...``)."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p",
        # Valgrind's own messages in files of their own: the server's stderr stays its own.
        f"--log-file={out_dir}/valgrind.%p.log",
        "--dump-instr=no",
        "--dump-line=no",
        *options,
        *cmd,
    ]


def total_instructions(out_dir: Path) -> int:
    """Instructions executed by every process of one run (the "totals:" of each file)."""
    return sum(file_instructions(path) for path in out_dir.glob("callgrind.out.*"))


def file_instructions(path: Path) -> int:
    """The instructions one callgrind output file counts (its "totals:"; 0 if it has none)."""
    text = path.read_text(errors="replace")
    m = re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
    if m is None:
        m = re.search(r"^summary:\s+(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else 0


def stop_under_valgrind(server: http_peers.PeerServer, timeout: float = 300) -> int:
    """SIGTERM, then one readiness GET a second until it exits; returns how many it took.

    Valgrind writes the counts when the process exits, so it must exit, not be killed.
    Under valgrind, ringloop's idle io_uring loop acts on SIGTERM only 30 s to minutes
    later (valgrind does not interrupt its io_uring_enter wait; on epoll, or outside
    valgrind, it stops at once): a request wakes it. Each such request is counted in
    the run's total; the JSON records how many there were (a few, against thousands).
    """
    pokes = 0
    with contextlib.suppress(OSError):
        server.proc.send_signal(signal.SIGTERM)  # our own child, by its handle
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            server.proc.wait(timeout=1)
            break
        except subprocess.TimeoutExpired:
            pokes += 1
            http_peers.answers(server.port or 0, "/")
    server.stop(timeout=5)  # the rest of the tree, stdout; a no-op once it has exited
    return pokes


def backend_under_valgrind(interface: str) -> str:
    """io_uring, but epoll for WSGI: valgrind runs one thread at a time and does not let
    another run while one waits in io_uring_enter, so the WSGI worker threads never get
    to answer (every request times out); epoll_wait is a syscall valgrind yields around."""
    return "epoll" if interface == "wsgi" else "io_uring"


def one_run(
    name: str,
    response: str,
    requests: int,
    connections: int,
    work: Path,
    client: str,
    cpu: int,
    extra: list[str] = (),
) -> dict[str, Any]:
    """One server under callgrind, ``requests`` requests (0: startup only); never raises.
    ``extra``: flags added to a ringloop subject's command line."""
    subject = SUBJECTS[name]
    out_dir = Path(tempfile.mkdtemp(prefix="cg-", dir=work))
    port = None if subject.name == http_peers.FLOOR else http_peers.free_port()
    inner = subject.command(response, port or 0, work)
    if subject.server == "ringloop":
        inner = [*inner, *extra]
    cmd = harness.pinned(callgrind_command(inner, out_dir), cpu)
    env = {
        **os.environ,
        "PYTHONPATH": str(http_peers.APPS_DIR),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RINGLOOP_BACKEND": backend_under_valgrind(subject.interface),
    }
    server = http_peers.PeerServer(cmd, port, env, PATHS[response])
    t0 = time.monotonic()
    try:
        try:
            server.wait_ready(timeout=300)
        except harness.ServerFailed as exc:
            return {"error": f"did not start: {exc}", "stderr_tail": server.stderr_tail()}
        client_report: dict[str, Any] = {}
        if requests:
            proc = subprocess.run(
                harness.pinned(
                    [
                        client,
                        "count",
                        str(server.port),
                        str(connections),
                        str(requests),
                        PATHS[response],
                    ],
                    1 - cpu if cpu in (0, 1) else None,
                ),
                capture_output=True,
                text=True,
                timeout=1800,
            )
            client_report = json.loads(proc.stdout.strip().splitlines()[-1] or "{}")
            if proc.returncode != 0:
                return {"error": f"client: {client_report}", "stderr_tail": server.stderr_tail()}
        pokes = stop_under_valgrind(server)
        if server.alive():
            return {"error": "did not stop on SIGTERM (counts lost)"}
        return {
            "instructions": total_instructions(out_dir),
            "processes": len(list(out_dir.glob("callgrind.out.*"))),
            "client": client_report,
            "wake_up_requests": pokes,
            "seconds": round(time.monotonic() - t0, 1),
        }
    finally:
        server.close()
        shutil.rmtree(out_dir, ignore_errors=True)


def measure(
    name: str,
    response: str,
    requests: int,
    connections: int,
    work: Path,
    client: str,
    cpu: int,
    extra: list[str] = (),
) -> dict[str, Any]:
    """Both runs of one subject and the instructions per request."""
    print(f"  {name}: startup run...", flush=True)
    base = one_run(name, response, 0, connections, work, client, cpu, extra)
    if "error" in base:
        return {"status": "crash", "error": base["error"], "baseline": base}
    print(f"  {name}: {requests} requests...", flush=True)
    loaded = one_run(name, response, requests, connections, work, client, cpu, extra)
    if "error" in loaded:
        return {"status": "crash", "error": loaded["error"], "baseline": base, "loaded": loaded}
    per = (loaded["instructions"] - base["instructions"]) / requests
    print(f"  {name}: {per:,.0f} instructions/request", flush=True)
    return {"status": "ok", "per_request": per, "baseline": base, "loaded": loaded}


def table(result: dict[str, Any]) -> str:
    rows = []
    floor = result["subjects"].get(http_peers.FLOOR, {}).get("per_request")
    for name, r in result["subjects"].items():
        if r["status"] != "ok":
            rows.append([name, r["status"], "—", r["error"]])
            continue
        ratio = f"{r['per_request'] / floor:.1f}×" if floor else "—"
        rows.append([name, f"{r['per_request']:,.0f}", ratio, ""])
    return reporting.markdown_table(["server", "instructions/request", "× c-floor", "error"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="http_callgrind.py", description=__doc__.split("\n")[0])
    parser.add_argument("--subjects", nargs="+", default=DEFAULT_SUBJECTS, choices=list(SUBJECTS))
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--scenario", choices=list(RESPONSES), default="plaintext")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="accepted for run.py; no effect")
    parser.add_argument("--out", type=Path, default=reporting.RESULTS_DIR)
    parser.add_argument(
        "--ringloop-flags",
        default="",
        help="`ringloop serve` flags added to the ringloop subjects (e.g. '--watch-threshold 0.05')",
    )
    parser.add_argument("--name", default="http_callgrind.json", help="the JSON file's name")
    args = parser.parse_args(argv)
    extra = shlex.split(args.ringloop_flags)
    if shutil.which("valgrind") is None:
        _path, why = tools.ensure_debian("valgrind", "valgrind")
        if why:
            print(f"callgrind: {why}", file=sys.stderr)
            return 1
    response = RESPONSES[args.scenario]
    t0 = time.monotonic()
    subjects: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ringloop-callgrind-") as tmp:
        work = Path(tmp)
        client, why = tools.build_c_tool(harness.BENCH_DIR / "http_client.c", work)
        floor, floor_why = tools.build_c_tool(harness.BENCH_DIR / "http_floor.c", work)
        if client is None:
            print(f"callgrind: {why}", file=sys.stderr)
            return 1
        for name in args.subjects:
            subject = SUBJECTS[name]
            if not subject.serves(response):
                continue
            unavailable = http_peers.check(subject, floor, floor_why)
            if unavailable:
                subjects[name] = {"status": "unavailable", "error": unavailable}
                continue
            is_ringloop = subject.server == "ringloop"
            res = measure(
                name,
                response,
                args.requests,
                args.connections,
                work,
                client,
                args.server_cpu,
                extra if is_ringloop else [],
            )
            row = f"{name} {args.ringloop_flags}".strip() if is_ringloop else name
            subjects[row] = {**res, "versions": http_peers.versions(subject)}
    result = {
        "suite": "http_callgrind",
        "machine": harness.machine_info(),
        "settings": {
            "requests": args.requests,
            "connections": args.connections,
            "scenario": args.scenario,
            "ringloop_flags": args.ringloop_flags,
            "seconds": round(time.monotonic() - t0, 1),
        },
        "subjects": subjects,
    }
    reporting.publish(result, args.out, args.name, lambda r: ["", table(r)])
    return 0 if any(r["status"] == "ok" for r in subjects.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
