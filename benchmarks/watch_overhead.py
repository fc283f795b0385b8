"""Per-task overhead of blocking detectors: aiocop, pyleak and ringloop.watch, per loop.

aiocop's published scenarios, each a batch of tasks gathered at once:

    pure async        10,000 tasks  await asyncio.sleep(0)
    os.getcwd          5,000 tasks  os.getcwd()
    os.stat            5,000 tasks  os.stat(this file)
    file open/read     2,000 tasks  open + read of this file
    2 ms async + stat    500 tasks  await asyncio.sleep(0.002); os.stat(this file)

Every (detector, loop) configuration runs in its own subprocess (a detector's patches never
leak into another's numbers), including a baseline process that imports no detector. Each
scenario is timed several times and the median kept; overhead per task is
(median with detector - median of the baseline on the same loop) / tasks, in µs. The machine
is shared, so compare the numbers of one run side by side; absolute times mean little.

    python benchmarks/watch_overhead.py [--quick] [--runs N]

Writes benchmarks/results/watch.json and watch_overhead.png (``--out`` elsewhere) and prints a
markdown table; a full run also rewrites the README table between the ``watch`` markers.
``main(argv)`` is the entry point for the shared benchmark runner. The children speak the
harness's line protocol (``harness.run_worker``); the JSON, chart and README section are
written with ``reporting.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# The path line above makes these importable when this file is run as a script.
import harness  # noqa: E402
import reporting  # noqa: E402

SCENARIOS = [
    ("pure async", 10_000),
    ("os.getcwd", 5_000),
    ("os.stat", 5_000),
    ("file open/read", 2_000),
    ("2 ms async + os.stat", 500),
]
DETECTORS = ["baseline", "aiocop", "pyleak", "ringloop.watch"]
LOOPS = ["asyncio", "uvloop", "ringloop"]
THRESHOLD = 0.1  # seconds: production-like, nothing in the scenarios reaches it


# -- child process --------------------------------------------------------------------------
def _import_watch():
    import ringloop.watch as watch

    return watch


def _loop_factory(name: str):
    # Not loops.make_loop: this suite measures ringloop as an application gets it,
    # ringloop.new_event_loop() with the backend it picks and no thread binding, under the
    # name "ringloop", and asyncio from new_event_loop(); the registry's entries force a
    # backend and are thread-bound, which is what the loop-versus-loop suites compare.
    import asyncio

    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import ringloop

    return ringloop.new_event_loop


def scenario_bodies() -> dict[str, Callable[[], Awaitable[None]]]:
    """One task's body per scenario (watch_callgrind.py runs the same ones)."""
    import asyncio

    path = os.path.abspath(__file__)

    async def pure():
        await asyncio.sleep(0)

    async def getcwd():
        os.getcwd()

    async def stat():
        os.stat(path)

    async def fileread():
        with open(path, "rb") as f:
            f.read()

    async def async_stat():
        await asyncio.sleep(0.002)
        os.stat(path)

    bodies = [pure, getcwd, stat, fileread, async_stat]
    return dict(zip([s for s, _ in SCENARIOS], bodies, strict=True))


async def setup_detector(detector: str, threshold: float, blocks: list, out: dict) -> None:
    """Turn `detector` on for the running loop; its blocks go to `blocks`. pyleak has no
    set-up: it wraps each batch (`batch`)."""
    if detector == "aiocop":
        import aiocop

        aiocop.patch_audit_functions()
        aiocop.start_blocking_io_detection()
        aiocop.detect_slow_tasks(threshold_ms=int(threshold * 1000), on_slow_task=blocks.append)
        aiocop.activate()
    elif detector == "ringloop.watch":
        import asyncio

        watch = _import_watch()
        watch.start(threshold=threshold, on_block=blocks.append)
        from ringloop.watch import monitor

        mon = monitor._monitors.get(asyncio.get_running_loop())
        out["watch_backend"] = mon.backend.name if mon else None


async def batch(detector: str, body: Callable[[], Awaitable[None]], n: int, threshold: float):
    """`n` tasks of `body` gathered at once: what one measurement times."""
    import asyncio

    if detector == "pyleak":
        from pyleak import no_event_loop_blocking

        async with no_event_loop_blocking(action="log", threshold=threshold):
            await asyncio.gather(*(body() for _ in range(n)))
    else:
        await asyncio.gather(*(body() for _ in range(n)))


def _child(detector: str, loop_name: str, runs: int, scale: float) -> dict:
    import asyncio

    bodies = scenario_bodies()
    blocks: list = []
    out: dict = {"scenarios": {}}

    async def timed(body, n):
        t0 = time.perf_counter()
        await batch(detector, body, n, THRESHOLD)
        return time.perf_counter() - t0

    async def main():
        await setup_detector(detector, THRESHOLD, blocks, out)
        for name, n in SCENARIOS:
            n = max(1, int(n * scale))
            await timed(bodies[name], min(n, 200))  # warm-up
            times = [await timed(bodies[name], n) for _ in range(runs)]
            out["scenarios"][name] = {"tasks": n, "median_s": statistics.median(times)}

    with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as r:
        r.run(main())
    out["blocks"] = len(blocks)
    return out


# -- parent ---------------------------------------------------------------------------------
def _run_config(detector: str, loop_name: str, runs: int, scale: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", detector, loop_name]
    cmd += ["--runs", str(runs), "--scale", str(scale)]
    run = harness.run_worker(cmd, {}, timeout=600)
    if run.timed_out:
        return {"unavailable": harness.describe_failure(run)}
    result = next((ln for ln in run.lines if ln["type"] == "result"), None)
    if run.returncode != 0 or result is None:
        return {"unavailable": harness.last_line(run.stderr_tail, "?")}
    return {k: v for k, v in result.items() if k != "type"}


def _loop_available(name: str) -> str | None:
    code = "import sys; sys.path.insert(0, sys.argv[1]); "
    code += {
        "asyncio": "import asyncio",
        "uvloop": "import uvloop",
        "ringloop": "import ringloop; ringloop.Loop",
    }[name]
    proc = subprocess.run(
        [sys.executable, "-c", code, os.path.join(ROOT, "python")], capture_output=True, text=True
    )
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def _table(results: dict) -> str:
    lines = []
    for loop_name, per in results["loops"].items():
        if "unavailable" in per:
            lines.append(f"\n**{loop_name}**: unavailable ({per['unavailable']})\n")
            continue
        lines.append(f"\n**{loop_name}** — overhead per task, µs (baseline: µs per task)\n")
        lines.append("| scenario | baseline | " + " | ".join(DETECTORS[1:]) + " |")
        lines.append("|---" * len(DETECTORS) + "|---|")
        base = per["baseline"]
        for name, _ in SCENARIOS:
            b = base["scenarios"][name]
            row = [name, f"{b['median_s'] / b['tasks'] * 1e6:.2f}"]
            for det in DETECTORS[1:]:
                ov = per[det].get("overhead_us", {}).get(name)
                row.append("n/a" if ov is None else f"{ov:+.2f}")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _plot(results: dict, path: Path) -> None:
    plt = reporting.pyplot()
    loops = [ln for ln, per in results["loops"].items() if "unavailable" not in per]
    if not loops:
        return
    fig, axes = plt.subplots(1, len(loops), figsize=(6 * len(loops), 4.5), squeeze=False)
    names = [s for s, _ in SCENARIOS]
    width = 0.8 / (len(DETECTORS) - 1)
    for ax, loop_name in zip(axes[0], loops, strict=False):
        per = results["loops"][loop_name]
        for i, det in enumerate(DETECTORS[1:]):
            vals = [per[det].get("overhead_us", {}).get(n) or 0.0 for n in names]
            ax.bar([x + i * width for x in range(len(names))], vals, width, label=det)
        ax.set_title(f"{loop_name}")
        ax.set_xticks([x + width for x in range(len(names))])
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("overhead per task (µs)")
        ax.axhline(0, color="black", linewidth=0.5)
        ax.legend(fontsize=8)
    fig.suptitle("Blocking-detector overhead per task (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer runs (CI, < 2 minutes)")
    p.add_argument("--runs", type=int, default=None, help="timed runs per scenario")
    p.add_argument("--rounds", type=int, default=None, help="subprocesses per configuration")
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=2, metavar=("DETECTOR", "LOOP"), help=argparse.SUPPRESS)
    # quick_dir=None: a quick run writes where a full one does (it still leaves the README).
    reporting.add_output_args(p, quick_dir=None)
    args = p.parse_args(argv)
    runs = args.runs or (3 if args.quick else 7)
    if args.child:
        # Our stdout is the protocol: a detector or a loop that prints cannot garble it.
        out = harness.claim_stdout()
        harness.emit(
            out, {"type": "result", **_child(args.child[0], args.child[1], runs, args.scale)}
        )
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    results: dict = {"runs": runs, "rounds": rounds, "python": sys.version.split()[0], "loops": {}}
    t0 = time.time()
    for loop_name in LOOPS:
        missing = _loop_available(loop_name)
        if missing:
            results["loops"][loop_name] = {"unavailable": missing}
            continue
        per: dict = {}
        # Rounds interleave the detectors so slow drifts of a shared machine hit all alike;
        # the per-scenario median across rounds is kept.
        raw: dict = {d: [] for d in DETECTORS}
        for _ in range(rounds):
            for det in DETECTORS:
                raw[det].append(_run_config(det, loop_name, runs, args.scale))
        for det in DETECTORS:
            ok = [r for r in raw[det] if "unavailable" not in r]
            if not ok:
                per[det] = raw[det][0]
                continue
            per[det] = {"scenarios": {}, "blocks": sum(r["blocks"] for r in ok)}
            if "watch_backend" in ok[0]:
                per[det]["watch_backend"] = ok[0]["watch_backend"]
            for name, _ in SCENARIOS:
                meds = [r["scenarios"][name]["median_s"] for r in ok]
                per[det]["scenarios"][name] = {
                    "tasks": ok[0]["scenarios"][name]["tasks"],
                    "median_s": statistics.median(meds),
                }
        base = per.get("baseline", {}).get("scenarios")
        for det in DETECTORS[1:]:
            if base and "scenarios" in per[det]:
                per[det]["overhead_us"] = {
                    name: (per[det]["scenarios"][name]["median_s"] - base[name]["median_s"])
                    / base[name]["tasks"]
                    * 1e6
                    for name, _ in SCENARIOS
                }
        results["loops"][loop_name] = per
    results["elapsed_s"] = round(time.time() - t0, 1)
    out_dir, update_readme = reporting.output_choice(args)
    json_path = out_dir / "watch.json"
    reporting.write_json_atomically(json_path, results)
    _plot(results, out_dir / "watch_overhead.png")
    table = _table(results)
    print(table)
    shown = os.path.relpath(json_path, ROOT) if json_path.is_relative_to(ROOT) else json_path
    print(f"\n({results['elapsed_s']} s; results in {shown})")
    if update_readme:
        # Only full runs replace the published table (same rule as the primitives suite).
        note = (
            f"Python {results['python']}, {rounds} rounds x {runs} runs, median per scenario; "
            "overhead = (detector - baseline) / tasks. Run-to-run noise on the shared 2-core "
            "machine is about +-1 us per scenario.\n\n"
        )
        reporting.write_section("watch", note + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
