"""Context switches and CPU per request of `ringloop serve --interface wsgi`, per pool size.

The WSGI pool's threads wait for jobs with the GIL released; how often they are woken shows
in the server's context switches, which callgrind does not count. Each configuration serves
the WSGI plaintext app (``http_apps/app_wsgi.py:hello``, as the ringloop-wsgi subject of
``http_suite.py``) pinned to CPU 0, ``wrk -t1 -c<--connections>`` (64) loads it from CPU 1 (one second of
warm-up, then ``--seconds``), and around the measured run the server's voluntary and
involuntary context switches (summed over ``/proc/<pid>/task/*/status``) and its user and
kernel CPU time (``/proc/<pid>/stat``, every thread) are read. Builds and pool sizes are
interleaved round by round so that a neighbour's load hits them alike.

    python benchmarks/wsgi_wakeups.py [--rounds 3] [--seconds 3] [--threads 1,2,32]
        [--connections 64] [--build main=/work/main/.venv/bin/python] [--build branch=PYTHON:PYTHONPATH] ...

A build is ``label=python`` (that interpreter's ringloop) or ``label=python:pythonpath``
(the ringloop found on ``pythonpath``). Output: one line per run, then the median per build
and pool size.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

APPS = Path(__file__).resolve().parent / "http_apps"
FIELDS = ("rps", "vol", "invol", "user_us", "sys_us")


def switches(pid: int) -> tuple[int, int]:
    vol = invol = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended between the listing and the read
            continue
        vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
        invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", text, re.M).group(1))
    return vol, invol


def cpu(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def wrk(port: int, seconds: int, connections: int) -> str:
    cmd = [
        "taskset",
        "-c",
        "1",
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        f"http://127.0.0.1:{port}/",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def measure(
    python: str, pythonpath: str | None, threads: int, port: int, seconds: int, connections: int
) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = ["taskset", "-c", "0", python, "-m", "ringloop", "serve", "app_wsgi:hello"]
    cmd += ["--app-dir", str(APPS), "--interface", "wsgi", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    cmd += ["--timeout-keep-alive", "60", "--wsgi-threads", str(threads)]
    server = subprocess.Popen(cmd, env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server ({' '.join(cmd)}) did not start") from None
                time.sleep(0.05)
        wrk(port, 1, connections)
        v0, n0 = switches(server.pid)
        u0, s0 = cpu(server.pid)
        out = wrk(port, seconds, connections)
        v1, n1 = switches(server.pid)
        u1, s1 = cpu(server.pid)
    finally:
        server.terminate()
        server.wait()
    if re.search(r"Non-2xx|Socket errors", out):
        raise SystemExit(f"wrk saw errors:\n{out}")
    n = int(re.search(r"(\d+) requests in", out).group(1))
    return {
        "rps": n / seconds,
        "vol": (v1 - v0) / n,
        "invol": (n1 - n0) / n,
        "user_us": (u1 - u0) / n * 1e6,
        "sys_us": (s1 - s0) / n * 1e6,
    }


def build(spec: str) -> tuple[str, str, str | None]:
    label, sep, rest = spec.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"--build {spec!r}: expected label=python[:pythonpath]")
    python, _, path = rest.partition(":")
    return label, python, path or None


def line(label: str, threads: int, r: dict) -> str:
    return (
        f"{label:>10} threads={threads:<3} {r['rps']:8.0f} req/s  switches/req "
        f"{r['vol']:.3f} vol + {r['invol']:.3f} invol  CPU/req {r['user_us']:.1f} us user "
        f"+ {r['sys_us']:.1f} us kernel"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--threads", default="1,2,32", help="pool sizes, comma-separated")
    ap.add_argument("--build", type=build, action="append", help="label=python[:pythonpath]")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--port", type=int, default=18700)
    args = ap.parse_args()
    try:
        sizes = [int(t) for t in args.threads.split(",")]
    except ValueError:
        ap.error(f"--threads {args.threads!r}: expected comma-separated integers")
    builds = args.build or [("this", sys.executable, None)]
    runs: dict[tuple[str, int], list[dict]] = {}
    port = args.port
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}, load average {os.getloadavg()[0]:.2f}", flush=True)
        for threads in sizes:
            for label, python, path in builds:
                port += 1
                r = measure(python, path, threads, port, args.seconds, args.connections)
                runs.setdefault((label, threads), []).append(r)
                print(line(label, threads, r), flush=True)
    print("median of the rounds:")
    for (label, threads), rs in runs.items():
        print(line(label, threads, {f: statistics.median(r[f] for r in rs) for f in FIELDS}))


if __name__ == "__main__":
    main()
