"""What `ringloop serve` flags cost per request at native speed: server CPU µs per request
with and without them, side by side.

callgrind (``http_callgrind.py --ringloop-flags``) counts instructions exactly but runs the
server ~50× slower, and the watch's time-based work scales with that: every slice longer than
1 ms goes to a Python hook that keeps the long-slice histogram (a 10 µs request slice takes
~0.5-1 ms under valgrind), and the watchdog threads wake on a clock. This measures at native
speed instead: each configuration serves the ASGI plaintext app (``http_apps/app_asgi.py``)
pinned to one CPU, ``wrk`` loads it from the other for ``--seconds``, and the server's CPU
time (utime + stime of all its threads, /proc) over the requests wrk counted is the figure.
Configurations alternate round by round (off, flags A, flags B, off, ...), so a neighbour's
burst of load hits them alike; the median of the rounds is reported, with the spread.

    python benchmarks/serve_flags_cost.py [--rounds 7] [--seconds 5] [--connections 64]
        [--config off=] [--config watch='--watch-threshold 0.05'] ...

Output: ``results/serve_flags_cost.json`` and a table.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import http_peers  # noqa: E402
import reporting  # noqa: E402
import tools  # noqa: E402

DEFAULT_CONFIGS = [
    "off=",
    "watch=--watch-threshold 0.05",
    "watch+metrics=--watch-threshold 0.05 --metrics-port 0",
]
TICK = os.sysconf("SC_CLK_TCK")


def one_round(flags: list[str], args: argparse.Namespace, wrk: str, work: Path) -> dict[str, Any]:
    """One configuration loaded once: requests/s and server CPU µs per request."""
    subject = http_peers.SUBJECTS["ringloop-asgi"]
    server = http_peers.start(subject, "hello", args.server_cpu, work)
    try:
        server.wait_ready(timeout=60)
        url = f"http://127.0.0.1:{server.port}/"
        client = harness.pinned(
            tools.wrk_command(wrk, url, connections=args.connections, duration=1),
            args.client_cpu,
        )
        subprocess.run(client, capture_output=True, timeout=60)  # warm-up
        cmd = harness.pinned(
            tools.wrk_command(wrk, url, connections=args.connections, duration=args.seconds),
            args.client_cpu,
        )
        t0, c0 = time.monotonic(), harness.tree_cpu_ticks(server.pid)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 60)
        t1, c1 = time.monotonic(), harness.tree_cpu_ticks(server.pid)
        report = tools.parse_wrk(done.stdout)
        requests = report.get("requests", 0)
        if not requests or c0 is None or c1 is None:
            return {"error": f"wrk: {done.stdout[-300:]} {done.stderr[-300:]}"}
        cpu_s = (c1 - c0) / TICK
        return {
            "requests": requests,
            "rate": requests / report["seconds"],
            "cpu_us": cpu_s / requests * 1e6,
            "server_busy": cpu_s / (t1 - t0),
            "errors": report["socket_errors"],
            "non_2xx": report["non_2xx"],
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve_flags_cost.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--server-cpu", type=int, default=1)
    parser.add_argument("--client-cpu", type=int, default=0)
    parser.add_argument(
        "--config",
        action="append",
        metavar="NAME=FLAGS",
        help="a configuration: a name and the `ringloop serve` flags it adds (repeat)",
    )
    parser.add_argument("--out", type=Path, default=reporting.RESULTS_DIR)
    args = parser.parse_args(argv)
    configs = [c.partition("=") for c in (args.config or DEFAULT_CONFIGS)]
    configs = [(name, shlex.split(flags)) for name, _, flags in configs]
    wrk, why = tools.ensure_wrk()
    if wrk is None:
        print(f"serve_flags_cost: {why}", file=sys.stderr)
        return 1
    original = http_peers.SUBJECTS["ringloop-asgi"]
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in configs}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ringloop-flags-") as tmp:
        for r in range(args.rounds):
            for name, flags in configs:
                # The subject's command with this configuration's flags after it.
                http_peers.SUBJECTS["ringloop-asgi"] = http_peers.Subject(
                    original.name,
                    original.server,
                    original.interface,
                    original.how,
                    lambda resp, port, work, f=flags: [*original.command(resp, port, work), *f],
                    original.packages,
                )
                try:
                    res = one_round(flags, args, wrk, Path(tmp))
                finally:
                    http_peers.SUBJECTS["ringloop-asgi"] = original
                rounds[name].append(res)
                shown = f"{res['cpu_us']:.2f} µs/req" if "cpu_us" in res else res["error"]
                print(f"  round {r + 1} {name}: {shown}", flush=True)
    summary = {}
    for name, flags in configs:
        ok = [x["cpu_us"] for x in rounds[name] if "cpu_us" in x]
        rates = [x["rate"] for x in rounds[name] if "rate" in x]
        summary[name] = {
            "flags": shlex.join(flags),
            "cpu_us_median": statistics.median(ok) if ok else None,
            "cpu_us_min": min(ok) if ok else None,
            "cpu_us_max": max(ok) if ok else None,
            "rate_median": statistics.median(rates) if rates else None,
            "rounds": rounds[name],
        }
    result = {
        "suite": "serve_flags_cost",
        "machine": harness.machine_info(),
        "settings": {
            "rounds": args.rounds,
            "seconds": round(time.monotonic() - t0, 1),
            "load_seconds": args.seconds,
            "connections": args.connections,
            "server_cpu": args.server_cpu,
            "client_cpu": args.client_cpu,
        },
        "configs": summary,
    }
    reporting.publish(result, args.out, "serve_flags_cost.json", lambda r: ["", table(r)])
    return 0 if all(s["cpu_us_median"] for s in summary.values()) else 1


def table(result: dict[str, Any]) -> str:
    configs = result["configs"]
    base = next(iter(configs.values()))["cpu_us_median"]
    rows = []
    for name, s in configs.items():
        med = s["cpu_us_median"]
        if med is None:
            rows.append([name, s["flags"], "—", "—", "—", "—"])
            continue
        rows.append(
            [
                name,
                f"`{s['flags']}`" if s["flags"] else "",
                f"{med:.2f}",
                f"{s['cpu_us_min']:.2f}–{s['cpu_us_max']:.2f}",
                f"{med - base:+.2f}",
                f"{s['rate_median']:,.0f}",
            ]
        )
    return reporting.markdown_table(
        ["config", "flags", "server CPU µs/req (median)", "min–max", "Δ vs first", "req/s"], rows
    )


if __name__ == "__main__":
    sys.exit(main())
