"""A rolling restart under keep-alive load: how many requests fail, ringloop beside uvicorn and
granian, in one run (issue 24).

Each server runs `app_asgi:hello` with two workers. wrk (one thread, 64 connections looping
keep-alive requests, never pausing) runs for ``--duration`` seconds; once every worker has
spent some CPU on the load, the parent gets SIGHUP (each server's "replace the workers"), and
the run waits for the event that matters — every original worker has exited — before wrk
ends. A failed request is what wrk reports as a socket error (connect, read, write) or a
non-2xx answer; wrk's timeout is set to 20 s (`--wrk-timeout`) so a slow answer on a loaded
machine is not counted as a lost one (timeouts are shown apart). A server that did not
replace its workers within the run is reported as such, not as a success.

    python benchmarks/rolling_restart.py [--servers ringloop-epoll ringloop-io_uring uvicorn
        granian] [--duration 12] [--connections 64]

Output: a table and ``results/rolling_restart.json``; each server's log in
``$TMPDIR/ringloop_rolling_restart/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
APPS = HERE / "http_apps"
PY = sys.executable
APP = "app_asgi:hello"


def commands(port: int) -> dict[str, list[str]]:
    common = ("--host", "127.0.0.1", "--port", str(port))
    ringloop = [PY, "-m", "ringloop", "serve", APP, *common, "--workers", "2", "--no-access-log"]
    return {
        "ringloop-epoll": [*ringloop, "--loop-backend", "epoll"],
        "ringloop-io_uring": [*ringloop, "--loop-backend", "io_uring"],
        "uvicorn": [PY, "-m", "uvicorn", APP, *common, "--workers", "2", "--no-access-log"],
        "granian": [
            *(PY, "-m", "granian", "--interface", "asgi", *common, "--workers", "2"),
            *("--http", "1", "--no-ws", "--log-level", "warning", APP),
        ],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> set[int]:
    """`pid`'s worker processes: its children, less multiprocessing's resource tracker."""
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    workers = set()
    for child in found:
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.add(child)
        except OSError:
            pass
    return workers


def cpu_ticks(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_for(what: str, condition, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    raise TimeoutError(what)


def serving_workers(pid: int, port: int) -> set[int]:
    """The parent's worker processes, once the port answers."""

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_for("the server to answer", answers, 30)

    def two() -> set[int] | None:
        found = children(pid)
        return found if len(found) >= 2 else None

    return wait_for("two workers", two, 30)


def run_one(
    name: str, argv: list[str], duration: int, connections: int, work: Path, timeout: int
) -> dict:
    port = int(argv[argv.index("--port") + 1])
    log = (work / f"{name}.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(APPS)}
    proc = subprocess.Popen(argv, cwd=APPS, env=env, stdout=log, stderr=subprocess.STDOUT)
    result: dict = {"server": name}
    try:
        old = serving_workers(proc.pid, port)
        wrk = subprocess.Popen(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{duration}s",
                "--timeout",
                f"{timeout}s",
                f"http://127.0.0.1:{port}/",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        start = cpu_ticks(old)
        wait_for("the load to reach the workers", lambda: cpu_ticks(old) - start >= 20, 15)
        sent = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        try:
            wait_for("the old workers to exit", lambda: not any(alive(p) for p in old), duration)
            result["replaced_in_s"] = round(time.monotonic() - sent, 2)
            result["replaced_under_load"] = wrk.poll() is None
        except TimeoutError:
            result["replaced_in_s"] = None
            result["replaced_under_load"] = False
        out, _ = wrk.communicate(timeout=duration + 30)
        m = re.search(r"(\d+) requests in", out)
        result["requests"] = int(m.group(1)) if m else None
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        errs = tuple(map(int, m.groups())) if m else (0, 0, 0, 0)
        result.update(zip(("connect", "read", "write", "timeout"), errs, strict=True))
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        result["non_2xx"] = int(m.group(1)) if m else 0
        result["failed"] = result["connect"] + result["read"] + result["write"] + result["non_2xx"]
        result["new_workers"] = len(children(proc.pid) - old)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            for pid in children(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
        log.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", nargs="+", default=list(commands(0)))
    ap.add_argument("--duration", type=int, default=12)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--wrk-timeout", type=int, default=20, help="seconds (wrk's default: 2)")
    ap.add_argument("--out", default=str(HERE / "results" / "rolling_restart.json"))
    args = ap.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # The servers' logs, for a run that needs explaining (not results: not committed).
    work = Path(tempfile.gettempdir(), "ringloop_rolling_restart")
    work.mkdir(exist_ok=True)
    rows = []
    for name in args.servers:
        argv = commands(free_port())[name]
        row = run_one(name, argv, args.duration, args.connections, work, args.wrk_timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"load": os.getloadavg(), "rows": rows}, indent=2))
    print()
    print(
        "| server | requests | failed (connect+read+write+non-2xx) "
        f"| timeouts (>{args.wrk_timeout} s) | replaced in |"
    )
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        took = f"{r['replaced_in_s']} s" if r.get("replaced_under_load") else "not under load"
        print(f"| {r['server']} | {r['requests']} | {r['failed']} | {r['timeout']} | {took} |")


if __name__ == "__main__":
    main()
