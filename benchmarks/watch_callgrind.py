"""Instructions per task of blocking detectors, counted by callgrind (watch_overhead.py's scenarios).

watch_overhead.py times aiocop's scenarios in wall-clock µs; on a shared 2-core machine its
run-to-run noise (±1 µs per scenario) is larger than the watch's targets (≤ 0.5 µs per task on
ringloop, ≤ 2 µs on stock asyncio). Instruction counts do not depend on the machine's load.
For each loop × detector this runs one child under ``valgrind --tool=callgrind
--separate-threads=yes --dump-before=getppid``: the child calls ``os.getppid()`` around each
measured batch, so callgrind writes the loop thread's (thread 1's) counts of exactly that
batch to a file of its own (a *part*), and start-up, imports and the detector's set-up fall in
parts that are never read. Per scenario it gathers ``--sizes`` N1 and N2 tasks (after a
200-task warm-up, with ``gc.collect()`` before each batch), and

    instructions per task = (I(N2) − I(N1)) / (N2 − N1)      (what one more task costs)
    overhead per task     = detector − baseline on the same loop.

The loop thread only: the watchdog thread's work scales with wall time, which valgrind
stretches ~50×, and is not per-task work. µs are derived from a native (not valgrind) run
of the baseline child: the loop thread's CPU time (``time.thread_time_ns``, which the
machine's load disturbs far less than wall time) per task by the same N2 − N1 difference,
best of ``--cpu-reps``, over the baseline's instructions per task in the same scenario gives
the baseline's ns per instruction on this machine; the overhead in µs is the overhead in
instructions at that rate.

Time-based settings are scaled by the slowdown so that the same slices cross them as at
native speed. The threshold is 600 s, so that no slice becomes a block: a batch's first
slice, which creates every task, takes seconds under valgrind (more than 10 s for 2,500
tasks on this machine under load: a 10 s threshold still let some through), and a block's
report — reading ``/proc``, computing the breakdown, formatting stacks — would land in a
per-task figure. The child counts blocks per batch; the JSON has them. The watch's histogram floor (1 ms: slices longer than it take the reporting path,
``on_slow``, for the metrics) is raised to 50 ms in the child for the same reason: under
valgrind a 20 µs task step lasts a millisecond. uvloop's heartbeat beats every 100 ms of wall
time (its longest interval), 50× more often per task than natively; an idle second at the end
of the child measures a beat's instructions, and the beats counted in each batch are taken
out of its figure (both numbers are in the JSON).

    .venv/bin/python benchmarks/watch_callgrind.py [--loops asyncio uvloop ringloop]
        [--detectors baseline ringloop.watch] [--scenarios ...] [--sizes 1000 5000]
        [--reps 1] [--top 15] [--jobs 2] [--readme]

Output: ``results/watch_callgrind.json`` and a markdown table (the one ``--readme`` writes
between the ``watch-instructions`` markers of benchmarks/README.md). ``--top N`` prints, per
loop and scenario, the N functions whose own instructions per task grew most with
ringloop.watch over the baseline (callgrind_annotate, exclusive costs).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import gc
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import http_callgrind  # noqa: E402
import https_callgrind  # noqa: E402
import reporting  # noqa: E402
import watch_overhead as wo  # noqa: E402

THRESHOLD = 600.0  # seconds: no slice is a block, even at valgrind's slowdown on a loaded machine
HIST_FLOOR_UNDER_VALGRIND_NS = 50_000_000  # the watch's 1 ms histogram floor, x50
IDLE_S = 2.0  # the idle phase that prices one heartbeat
DETECTORS = ["baseline", "ringloop.watch"]
ALL_DETECTORS = wo.DETECTORS
SCENARIO_NAMES = [s for s, _ in wo.SCENARIOS]
TARGET_US = {"ringloop": 0.5, "asyncio": 2.0}
PART_FILE = re.compile(r"callgrind\.out\.\d+\.(\d+)-01$")


# -- child process --------------------------------------------------------------------------
def _watch_monitor() -> Any:
    """The running loop's watch monitor, its `end_readings` counted: every slice that takes
    the reporting path (``on_slow``: longer than the histogram floor, or a block) calls it
    once, on every backend."""
    import asyncio

    from ringloop.watch import monitor

    mon = monitor._monitors.get(asyncio.get_running_loop())
    if mon is None:
        return None
    real = mon.end_readings
    mon.slow_paths = 0

    def end_readings(*a: Any, **kw: Any) -> Any:
        mon.slow_paths += 1
        return real(*a, **kw)

    mon.end_readings = end_readings
    return mon


def _counters(mon: Any, blocks: list) -> dict[str, int]:
    """What the watch did so far: slices that took the reporting path, slices timed (the
    heartbeat: beats), blocks."""
    if mon is None:
        return {"blocks": len(blocks)}
    return {"slow_paths": mon.slow_paths, "count": mon.state.count, "blocks": len(blocks)}


def _child(
    detector: str, loop_name: str, sizes: list[int], reps: int, scenarios: list[str], idle: bool
) -> dict:
    import asyncio

    if detector == "ringloop.watch" and os.environ.get("RINGLOOP_BENCH_HIST_FLOOR_NS"):
        from ringloop.watch import monitor

        monitor.HIST_FLOOR_NS = int(os.environ["RINGLOOP_BENCH_HIST_FLOOR_NS"])
    bodies = wo.scenario_bodies()
    blocks: list = []
    out: dict[str, Any] = {"parts": [], "batches": {}}

    def mark(label: str) -> None:
        # callgrind dumps thread 1's counts since the previous dump when getppid is entered
        # (--dump-before=getppid): the part just ended is `label`.
        out["parts"].append(label)
        os.getppid()

    async def main() -> None:
        await wo.setup_detector(detector, THRESHOLD, blocks, out)
        loop = asyncio.get_running_loop()
        out["loop_backend"] = getattr(loop, "backend", None)
        st = _watch_monitor() if detector == "ringloop.watch" else None
        for name in scenarios:
            body = bodies[name]
            await wo.batch(detector, body, 200, THRESHOLD)  # warm-up
            for rep in range(reps):
                for n in sizes:
                    gc.collect()
                    before = _counters(st, blocks)
                    mark("gap")
                    t0 = time.thread_time_ns()
                    await wo.batch(detector, body, n, THRESHOLD)
                    cpu = time.thread_time_ns() - t0
                    label = f"{name}|{n}|{rep}"
                    mark(label)
                    after = _counters(st, blocks)
                    delta = {k: after[k] - before[k] for k in after}
                    out["batches"][label] = {"cpu_ns": cpu, **delta}
        if idle:
            before = _counters(st, blocks)
            mark("gap")
            await asyncio.sleep(IDLE_S)
            mark("idle")
            after = _counters(st, blocks)
            out["batches"]["idle"] = {k: after[k] - before[k] for k in after}
        mark("end")

    with asyncio.Runner(loop_factory=wo._loop_factory(loop_name)) as r:
        r.run(main())
    out["blocks"] = len(blocks)
    return out


# -- parent ---------------------------------------------------------------------------------
def _child_cmd(args: argparse.Namespace, det: str, loop: str, reps: int, idle: bool) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", det, loop]
    cmd += ["--sizes", *map(str, args.sizes), "--reps", str(reps)]
    cmd += ["--scenarios", *args.scenarios]
    return cmd + (["--idle"] if idle else [])


def _env(loop: str) -> dict[str, str]:
    env = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    if loop == "ringloop":
        # As http_callgrind: io_uring works under valgrind, and a silent fallback to epoll
        # would measure something else (the child records loop.backend).
        env["RINGLOOP_BACKEND"] = "io_uring"
    return env


def _result(run: harness.WorkerRun) -> dict[str, Any]:
    if run.timed_out:
        return {"error": harness.describe_failure(run)}
    result = next((ln for ln in run.lines if ln["type"] == "result"), None)
    if run.returncode != 0 or result is None:
        return {"error": harness.describe_failure(run)}
    return {k: v for k, v in result.items() if k != "type"}


def callgrind_run(args: argparse.Namespace, det: str, loop: str, work: Path) -> dict[str, Any]:
    """One child under callgrind: thread 1's instructions per part, by label."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"cg-{loop}-{det}-", dir=work))
    opts = ["--separate-threads=yes", "--dump-before=getppid"]
    idle = det == "ringloop.watch" and loop == "uvloop"
    cmd = http_callgrind.callgrind_command(
        _child_cmd(args, det, loop, args.reps, idle), out_dir, opts
    )
    env = {**_env(loop), "RINGLOOP_BENCH_HIST_FLOOR_NS": str(HIST_FLOOR_UNDER_VALGRIND_NS)}
    t0 = time.monotonic()
    res = _result(harness.run_worker(cmd, env, timeout=args.timeout))
    res["seconds"] = round(time.monotonic() - t0, 1)
    if "error" in res:
        return res
    files = {int(m.group(1)): p for p in out_dir.iterdir() if (m := PART_FILE.search(p.name))}
    if len(files) != len(res["parts"]):
        return {"error": f"{len(files)} callgrind parts for {len(res['parts'])} marks"}
    res["instructions"] = {}
    costs: dict[str, dict[str, int]] = {}
    for i, label in enumerate(res.pop("parts"), start=1):
        if label in ("gap", "end"):
            continue
        res["instructions"][label] = http_callgrind.file_instructions(files[i])
        if args.top and label.endswith("|0"):
            costs[label] = own_costs(files[i])
    if args.keep:
        shutil.copytree(out_dir, args.keep / out_dir.name, dirs_exist_ok=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    res["costs"] = costs
    return res


def own_costs(path: Path) -> dict[str, int]:
    """Each function's own instructions in one part. A dump in mid-run lists the functions
    on the stack at that moment (main, the outer eval loop...) with (nearly) the whole part
    as their cost: those above half the part are folded into one entry, the part less every
    other function's."""
    total = http_callgrind.file_instructions(path)
    costs = {k: v for k, v in https_callgrind.file_costs(path).items() if 2 * v < total}
    costs["(on the stack at the dump: the outer eval loop)"] = total - sum(costs.values())
    return costs


def cpu_run(args: argparse.Namespace, loop: str) -> dict[str, Any]:
    """The baseline child at native speed: the loop thread's CPU ns per batch."""
    cmd = _child_cmd(args, "baseline", loop, args.cpu_reps, False)
    return _result(harness.run_worker(cmd, _env(loop), timeout=args.timeout))


def per_task(args: argparse.Namespace, run: dict[str, Any], name: str, beat: float) -> dict:
    """Instructions per task of one scenario in one run: the median over reps of
    (I(N2) - I(N1)) / (N2 - N1), beats taken out at `beat` instructions each."""
    n1, n2 = args.sizes
    raw, fixed, extra = [], [], {"slow_paths": 0, "count": 0, "blocks": 0}
    for rep in range(args.reps):
        a, b = f"{name}|{n1}|{rep}", f"{name}|{n2}|{rep}"
        d = run["instructions"][b] - run["instructions"][a]
        ba, bb = run["batches"][a], run["batches"][b]
        beats = bb.get("count", 0) - ba.get("count", 0) if beat else 0
        raw.append(d / (n2 - n1))
        fixed.append((d - beats * beat) / (n2 - n1))
        for k in extra:
            extra[k] += bb.get(k, 0) + ba.get(k, 0)
    return {"raw": statistics.median(raw), "per_task": statistics.median(fixed), **extra}


def beat_cost(run: dict[str, Any]) -> float:
    """Thread 1's instructions per heartbeat in the idle phase (0 where there is none)."""
    idle = run.get("batches", {}).get("idle")
    if not idle or not idle.get("count"):
        return 0.0
    return run["instructions"]["idle"] / idle["count"]


def cpu_ns_per_task(args: argparse.Namespace, run: dict[str, Any], name: str) -> float | None:
    n1, n2 = args.sizes
    b = run.get("batches", {})
    best = [min(b[f"{name}|{n}|{r}"]["cpu_ns"] for r in range(args.cpu_reps)) for n in (n1, n2)]
    return (best[1] - best[0]) / (n2 - n1) if best[1] > best[0] else None


def top_growth(args: argparse.Namespace, det_run: dict, base_run: dict, name: str) -> list[str]:
    """The functions whose own instructions per task grew most from the baseline."""
    n1, n2 = args.sizes

    def per(run: dict) -> dict[str, float]:
        a, b = run["costs"].get(f"{name}|{n1}|0", {}), run["costs"].get(f"{name}|{n2}|0", {})
        return {k: (v - a.get(k, 0)) / (n2 - n1) for k, v in b.items()}

    det, base = per(det_run), per(base_run)
    diff = {k: det.get(k, 0.0) - base.get(k, 0.0) for k in det.keys() | base.keys()}
    total = sum(diff.values())
    rows = sorted(diff.items(), key=lambda kv: -kv[1])[: args.top]
    return [f"{v:>9,.0f} ({100 * v / total if total else 0:5.1f}%)  {k}" for k, v in rows]


def table(result: dict[str, Any]) -> str:
    """The README table: per loop and scenario, instructions per task and the overheads."""
    dets = [d for d in result["settings"]["detectors"] if d != "baseline"]
    out = []
    for loop, per in result["loops"].items():
        if "error" in per:
            out.append(f"\n**{loop}**: unavailable ({per['error']})\n")
            continue
        rate = per.get("ns_per_instruction", {})
        out.append(f"\n**{loop}** — instructions per task, loop thread; overhead over the baseline")
        head = ["scenario", "baseline instr/task", "ns/instr"]
        for d in dets:
            head += [f"{d} instr/task", f"{d} overhead instr", f"{d} overhead µs"]
        rows = []
        for name in result["settings"]["scenarios"]:
            base = per["baseline"].get("scenarios", {}).get(name)
            r = rate.get(name)
            row = [name, f"{base['per_task']:,.0f}" if base else "—", f"{r:.3f}" if r else "—"]
            for d in dets:
                s = per.get(d, {}).get("scenarios", {}).get(name)
                if s is None or base is None:
                    row += ["—", "—", "—"]
                    continue
                ov = s["per_task"] - base["per_task"]
                row += [
                    f"{s['per_task']:,.0f}",
                    f"{ov:+,.0f}",
                    f"{ov * r / 1000:+.3f}" if r else "—",
                ]
            rows.append(row)
        out.append("\n" + reporting.markdown_table(head, rows))
    return "\n".join(out)


def verdict(result: dict[str, Any]) -> list[str]:
    """Whether the watch's targets are met, per loop with a target, in instructions."""
    lines = []
    for loop, target in TARGET_US.items():
        per = result["loops"].get(loop, {})
        w = per.get("ringloop.watch", {}).get("scenarios")
        if not w or "baseline" not in per:
            continue
        worst = None
        for name, s in w.items():
            base = per["baseline"]["scenarios"][name]
            r = per.get("ns_per_instruction", {}).get(name)
            if r:
                us = (s["per_task"] - base["per_task"]) * r / 1000
                if worst is None or us > worst[0]:
                    worst = (us, name)
        if worst:
            met = "met" if worst[0] <= target else "NOT met"
            lines.append(
                f"- {loop}: ≤ {target} µs per task — {met}: the largest overhead is "
                f"{worst[0]:+.3f} µs ({worst[1]})."
            )
    return lines


def readme_body(result: dict[str, Any]) -> str:
    s, m = result["settings"], result["machine"]
    head = (
        f"Measured {m['timestamp']} at commit `{m['git_commit']}` ({m['cpu_model']}, "
        f"{m['cpu_count']} CPUs, Python {m['python']}; load average {m['loadavg_start'][0]:.1f} "
        f"at the start: instruction counts do not depend on it, the ns/instr rate does — "
        f"on a loaded 2-CPU machine it comes out up to 2× a quiet one's). `watch_callgrind.py --sizes {s['sizes'][0]} {s['sizes'][1]}`: loop thread's "
        f"instructions per task = (I({s['sizes'][1]}) − I({s['sizes'][0]})) / "
        f"{s['sizes'][1] - s['sizes'][0]} gathered tasks, threshold {THRESHOLD:g} s (no "
        "block), the watch's histogram floor at 50 ms; µs at the baseline's own ns per "
        "instruction (native run, loop thread CPU time per task over instructions per task, "
        f"best of {s['cpu_reps']}).\n"
    )
    return head + table(result) + "\n\n" + "\n".join(verdict(result)) + "\n"


def measure_loop(args: argparse.Namespace, loop: str, work: Path) -> dict[str, Any]:
    missing = wo._loop_available(loop)
    if missing:
        return {"error": missing}
    per: dict[str, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {d: pool.submit(callgrind_run, args, d, loop, work) for d in args.detectors}
        cpu = cpu_run(args, loop)
        for d, fut in futs.items():
            per[d] = fut.result()
    for d in args.detectors:
        run = per[d]
        if "error" in run:
            print(f"  {loop} {d}: {run['error']}", flush=True)
            continue
        beat = beat_cost(run) if d == "ringloop.watch" and loop == "uvloop" else 0.0
        run["beat_instructions"] = round(beat)
        run["scenarios"] = {n: per_task(args, run, n, beat) for n in args.scenarios}
    base = per.get("baseline", {})
    if "scenarios" in base and "error" not in cpu:
        per["ns_per_instruction"] = {}
        per["cpu_ns_per_task"] = {}
        for n in args.scenarios:
            ns = cpu_ns_per_task(args, cpu, n)
            per["cpu_ns_per_task"][n] = ns
            if ns:
                per["ns_per_instruction"][n] = ns / base["scenarios"][n]["per_task"]
    elif "error" in cpu:
        per["cpu_error"] = cpu["error"]
    if args.top and "scenarios" in base and "scenarios" in per.get("ringloop.watch", {}):
        per["top"] = {n: top_growth(args, per["ringloop.watch"], base, n) for n in args.scenarios}
        for n, lines in per["top"].items():
            print(f"\n{loop} / {n}: own instructions per task, ringloop.watch − baseline")
            for ln in lines:
                print(f"  {ln}")
    for d in args.detectors:
        per[d].pop("costs", None)
    return per


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="watch_callgrind.py", description=__doc__.split("\n")[0])
    p.add_argument("--loops", nargs="+", default=wo.LOOPS, choices=wo.LOOPS)
    p.add_argument("--detectors", nargs="+", default=DETECTORS, choices=ALL_DETECTORS)
    p.add_argument("--scenarios", nargs="+", default=SCENARIO_NAMES, choices=SCENARIO_NAMES)
    p.add_argument("--sizes", nargs=2, type=int, default=[1000, 5000], metavar=("N1", "N2"))
    p.add_argument("--reps", type=int, default=1, help="N1/N2 pairs per scenario under callgrind")
    p.add_argument("--cpu-reps", type=int, default=7, help="pairs in the native CPU-time run")
    p.add_argument("--top", type=int, default=0, help="functions that grew most, per scenario")
    p.add_argument("--jobs", type=int, default=2, help="callgrind children at once")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--keep", type=Path, help="copy the callgrind files here")
    p.add_argument("--readme", action="store_true", help="write the table into the README")
    p.add_argument("--name", default="watch_callgrind.json")
    p.add_argument("--out", type=Path, default=reporting.RESULTS_DIR)
    p.add_argument("--child", nargs=2, metavar=("DETECTOR", "LOOP"), help=argparse.SUPPRESS)
    p.add_argument("--idle", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        out = harness.claim_stdout()
        res = _child(*args.child, args.sizes, args.reps, args.scenarios, args.idle)
        harness.emit(out, {"type": "result", **res})
        return 0
    if args.sizes[1] <= args.sizes[0] or args.sizes[0] < 1:
        p.error("--sizes: N2 must be larger than N1, both at least 1")
    if "baseline" not in args.detectors:
        args.detectors = ["baseline", *args.detectors]
    if shutil.which("valgrind") is None:
        print("watch_callgrind: valgrind is not installed (apt-get install valgrind)")
        return 1
    t0 = time.monotonic()
    machine = harness.machine_info()
    result: dict[str, Any] = {
        "suite": "watch_callgrind",
        "machine": machine,
        "settings": {
            "sizes": args.sizes,
            "reps": args.reps,
            "cpu_reps": args.cpu_reps,
            "threshold_s": THRESHOLD,
            "hist_floor_ns": HIST_FLOOR_UNDER_VALGRIND_NS,
            "detectors": args.detectors,
            "scenarios": args.scenarios,
            "date": datetime.date.today().isoformat(),
        },
        "loops": {},
    }
    with tempfile.TemporaryDirectory(prefix="ringloop-watch-cg-") as tmp:
        for loop in args.loops:
            print(f"{loop}: {', '.join(args.detectors)} under callgrind...", flush=True)
            result["loops"][loop] = measure_loop(args, loop, Path(tmp))
    result["settings"]["seconds"] = round(time.monotonic() - t0, 1)
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    reporting.publish(
        result,
        args.out,
        args.name,
        lambda r: ["", table(r), "", *verdict(r)],
        section="watch-instructions" if args.readme else None,
        readme_body=readme_body,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
