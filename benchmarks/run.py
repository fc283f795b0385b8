"""The one benchmark runner: ``python benchmarks/run.py [suite ...] [--quick] [-- suite args]``.

A suite is a module in ``benchmarks/`` with ``main(argv: list[str]) -> int``; ``SUITES``
below is the whole registry. With no suite named, every known suite runs in registry order.
A registered suite whose module does not exist yet is skipped with a message, not an error,
so the registry can name suites that are still being written. ``--quick`` is passed on to
each suite, as is everything after ``--``.

Suites run one after another in this process (each spawns its own per-loop workers), and a
suite that raises or returns non-zero does not stop the others; the exit status is the
first non-zero one.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

# name -> (module in benchmarks/, what it measures). Order is run order.
SUITES: dict[str, tuple[str, str]] = {
    "primitives": ("primitives", "µs/op of nine asyncio primitives, every loop side by side"),
    "watch_overhead": ("watch_overhead", "cost of the blocking detector on each loop"),
    "transports": ("transports", "TCP echo and HTTP servers: rate, server CPU µs per op"),
    # The module is not called http.py: on sys.path[0] that would shadow the standard
    # library's http package for every script in this directory.
    "http": ("http_suite", "HTTP servers side by side: CPU µs/request, req/s, p99, RSS"),
    "https": (
        "https_suite",
        "HTTPS servers side by side: keep-alive and full handshakes, CPU µs/request",
    ),
    "h2": (
        "h2_suite",
        "HTTP/2 servers side by side (h2c and TLS, h2load): CPU µs/request, req/s, p99",
    ),
    "ws": ("ws_suite", "WebSocket servers side by side: echo and broadcast, CPU µs/message"),
    "blocked_fairness": (
        "blocked_fairness",
        "how evenly each loop serves uploads behind a blocking handler",
    ),
}


def _exists(module: str) -> bool:
    # Only our own directory counts: a same-named module in site-packages is not a suite.
    return (BENCH_DIR / f"{module}.py").is_file()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="run.py",
        description="Run benchmark suites.",
        epilog="suites: " + "; ".join(f"{name} ({desc})" for name, (_m, desc) in SUITES.items()),
    )
    parser.add_argument("suites", nargs="*", metavar="suite", help="default: all known suites")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a demo")
    parser.add_argument("--list", action="store_true", help="list suites and whether they exist")
    args = parser.parse_args(argv)

    if args.list:
        for name, (module, desc) in SUITES.items():
            state = "ready" if _exists(module) else "not written yet"
            print(f"{name:<16} {state:<16} {desc}")
        return 0
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")

    suite_argv = (["--quick"] if args.quick else []) + extra
    status = 0
    summary = []
    for name in args.suites or list(SUITES):
        module_name, _desc = SUITES[name]
        if not _exists(module_name):
            print(f"== {name}: skipped, benchmarks/{module_name}.py does not exist yet\n")
            summary.append((name, "skipped (not written yet)"))
            continue
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            rc = int(importlib.import_module(module_name).main(suite_argv) or 0)
        except SystemExit as exc:  # argparse inside a suite exits on bad arguments
            rc = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            traceback.print_exc()
            rc = 1
        took = time.monotonic() - t0
        summary.append((name, f"{'ok' if rc == 0 else f'failed (exit {rc})'} in {took:.0f}s"))
        status = status or rc
        print(flush=True)
    print("== summary")
    for name, what in summary:
        print(f"  {name:<16} {what}")
    return status


if __name__ == "__main__":
    sys.exit(main())
