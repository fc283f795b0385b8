"""Primitives suite: the loop's own overhead for nine asyncio operations, in µs per operation.

The nine rows are the ones uringcore publishes (sleep(0), create_task, gather(10),
gather(100), queue, event, lock, future result, call_soon), but each is measured as a
tight loop *inside one coroutine*, timed with ``perf_counter`` around the loop only.
uringcore's own suite wraps every single operation in ``run_until_complete``, which mostly
measures ``run_until_complete`` (task creation, asyncgen hooks, stop callback), not the op.

What one "op" is, per row (see the ``bench_*`` functions):

  sleep(0)      one ``await asyncio.sleep(0)``: one trip through the ready queue
  create_task   ``await loop.create_task(noop())``: create, schedule, run, wake the awaiter
  gather(k)     ``await asyncio.gather(*[noop() for _ in range(k)])``: one whole gather
  queue         one item through an ``asyncio.Queue(maxsize=1)`` from a producer task to a
                consumer task (the bound makes them alternate, so futures and wake-ups are
                involved, not only the deque inside Queue)
  event         one round trip between two tasks: A sets ``ping`` and waits on ``pong``,
                B waits on ``ping``, clears it and sets ``pong``
  lock          ``async with lock: pass`` uncontended. asyncio.Lock's fast path never
                touches the loop, so this row is a control: every loop should show ~1.0x,
                and a large deviation means the run was noisy
  future        ``fut = loop.create_future(); loop.call_soon(fut.set_result, None); await fut``
  call_soon     one ``loop.call_soon(cb)`` plus running ``cb``; callbacks are scheduled in
                batches of 1000 and a future set by a final callback ends each batch

Run ``python benchmarks/primitives.py [--quick]`` (or ``benchmarks/run.py primitives``).
The runner half spawns ``primitives.py --worker LOOP`` once per loop per round, pinned to
one CPU, and reads JSON lines from its stdout; the worker half does the timing with GC off.
Outputs: ``results/latest.json``, ``results/primitives_us.png``,
``results/primitives_speedup.png`` and the table in ``README.md`` between the
``primitives`` markers; ``--quick`` writes the same files under ``results/quick/`` and
leaves the README alone.

This module holds the workload (the ``bench_*`` operations, the worker, the rounds, the
table and charts); the loops come from ``loops.py``, the worker processes and pinning from
``harness.py``, the files, Markdown and bar charts from ``reporting.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The path line above makes these importable when this file is run as a script.
import harness  # noqa: E402
import reporting  # noqa: E402
from loops import LOOPS, PEERS, make_loop  # noqa: E402
from reporting import fmt_us  # noqa: E402
from rounds import rotation  # noqa: E402

# --------------------------------------------------------------------------- the ops

perf_counter = time.perf_counter


async def _noop() -> None:
    pass


def _cb() -> None:
    pass


async def bench_sleep0(n: int) -> float:
    sleep = asyncio.sleep
    t0 = perf_counter()
    for _ in range(n):
        await sleep(0)
    return perf_counter() - t0


async def bench_create_task(n: int) -> float:
    # loop.create_task rather than asyncio.create_task: the latter adds a
    # get_running_loop() and a name check that are the same for every loop.
    create_task = asyncio.get_running_loop().create_task
    t0 = perf_counter()
    for _ in range(n):
        await create_task(_noop())
    return perf_counter() - t0


def _bench_gather(k: int) -> Callable[[int], Awaitable[float]]:
    async def bench_gather(n: int) -> float:
        gather = asyncio.gather
        rk = range(k)
        t0 = perf_counter()
        for _ in range(n):
            await gather(*[_noop() for _ in rk])
        return perf_counter() - t0

    return bench_gather


async def bench_queue(n: int) -> float:
    q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

    async def consumer() -> None:
        get = q.get
        for _ in range(n):
            await get()

    put = q.put
    t0 = perf_counter()
    task = asyncio.get_running_loop().create_task(consumer())
    for i in range(n):
        await put(i)
    await task
    return perf_counter() - t0


async def bench_event(n: int) -> float:
    ping, pong = asyncio.Event(), asyncio.Event()

    async def responder() -> None:
        for _ in range(n):
            await ping.wait()
            ping.clear()
            pong.set()

    t0 = perf_counter()
    task = asyncio.get_running_loop().create_task(responder())
    for _ in range(n):
        ping.set()
        await pong.wait()
        pong.clear()
    await task
    return perf_counter() - t0


async def bench_lock(n: int) -> float:
    lock = asyncio.Lock()
    t0 = perf_counter()
    for _ in range(n):
        async with lock:
            pass
    return perf_counter() - t0


async def bench_future(n: int) -> float:
    loop = asyncio.get_running_loop()
    create_future, call_soon = loop.create_future, loop.call_soon
    t0 = perf_counter()
    for _ in range(n):
        fut = create_future()
        call_soon(fut.set_result, None)
        await fut
    return perf_counter() - t0


CALL_SOON_BATCH = 1000


async def bench_call_soon(n: int) -> float:
    # Batches, because n can be a few hundred thousand: queueing them all at once would
    # measure a huge deque and cold handles, not the steady state of a busy loop. The one
    # future per batch costs ~1/1000 of a loop iteration per op.
    loop = asyncio.get_running_loop()
    create_future, call_soon = loop.create_future, loop.call_soon
    full, rest = divmod(n, CALL_SOON_BATCH)
    t0 = perf_counter()
    for size in [CALL_SOON_BATCH] * full + ([rest] if rest else []):
        for _ in range(size):
            call_soon(_cb)
        fut = create_future()
        call_soon(fut.set_result, None)
        await fut
    return perf_counter() - t0


# name -> (coroutine function taking n, first n for calibration)
PRIMITIVES: dict[str, tuple[Callable[[int], Awaitable[float]], int]] = {
    "sleep(0)": (bench_sleep0, 256),
    "create_task": (bench_create_task, 128),
    "gather(10)": (_bench_gather(10), 16),
    "gather(100)": (_bench_gather(100), 2),
    "queue": (bench_queue, 128),
    "event": (bench_event, 128),
    "lock": (bench_lock, 1024),
    "future": (bench_future, 256),
    "call_soon": (bench_call_soon, 1024),
}

# --------------------------------------------------------------------------- worker


def _time_once(name: str, bench: Callable[[int], Awaitable[float]], n: int) -> float:
    """Seconds for n ops in a fresh loop; GC is off and the heap collected beforehand."""
    loop, _info = make_loop(name)
    try:
        asyncio.set_event_loop(loop)
        gc.collect()
        return loop.run_until_complete(bench(n))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _calibrate(name: str, bench: Callable[[int], Awaitable[float]], n0: int, target: float) -> int:
    """Pick n so one repetition lasts about ``target`` seconds.

    Grows n until a run lasts target/20 (at least 2 ms), then scales linearly. These runs
    double as the warm-up: caches, the free lists of the loop and of CPython.
    """
    n = n0
    floor = max(target / 20, 0.002)
    while True:
        elapsed = _time_once(name, bench, n)
        if elapsed >= floor or n >= 1 << 26:
            break
        n *= 4 if elapsed < floor / 4 else 2
    return max(1, int(n * target / max(elapsed, 1e-9)))


def worker(argv: list[str]) -> int:
    """Measure one loop; JSON lines on the protocol stream, never an uncaught exception."""
    parser = argparse.ArgumentParser(prog="primitives.py --worker")
    parser.add_argument("--worker", required=True, choices=sorted(LOOPS))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--target-ms", type=float, default=100.0)
    parser.add_argument("--cpu", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None, choices=list(PRIMITIVES))
    args = parser.parse_args(argv)
    out = harness.claim_stdout()
    name = args.worker
    pinned = harness.pin_to_cpu(args.cpu)

    try:
        loop, info = make_loop(name)
        loop.close()
    except Exception as exc:  # import failure, io_uring refused, backend mismatch...
        harness.emit_error(out, "load", exc, getattr(exc, "info", {}), limit=4)
        return 2
    harness.emit(out, {"type": "meta", "loop": name, "pid": os.getpid(), "cpu": pinned, **info})

    # GC off for the whole measurement phase; _time_once collects before each run so
    # garbage from the previous run is not charged to the next one.
    gc.disable()
    target = args.target_ms / 1000
    for prim in args.only or PRIMITIVES:
        bench, n0 = PRIMITIVES[prim]
        try:
            n = _calibrate(name, bench, n0, target)
            runs = [_time_once(name, bench, n) / n * 1e6 for _ in range(args.reps)]
        except Exception as exc:
            harness.emit(
                out,
                {"type": "result", "primitive": prim, "error": f"{type(exc).__name__}: {exc}"},
            )
            continue
        harness.emit(out, {"type": "result", "primitive": prim, "n": n, "us_per_op": runs})
    harness.emit(out, {"type": "done"})
    return 0


# --------------------------------------------------------------------------- runner

QUICK = {"rounds": 3, "target_ms": 30.0}
FULL = {"rounds": 5, "target_ms": 100.0}


def _collect(loops: list[str], rounds: int, target_ms: float, cpu: int | None) -> dict[str, Any]:
    """Run every loop ``rounds`` times, rotating the order each round.

    One repetition per process and rounds interleaved across loops: when a neighbour on the
    shared machine wakes up for a few seconds, it hurts one repetition of several loops
    instead of all repetitions of one loop, and the median of 5 absorbs it.
    """
    state: dict[str, dict[str, Any]] = {
        name: {"status": "ok", "meta": None, "errors": [], "runs": {}, "n": {}, "prim_errors": {}}
        for name in loops
    }
    timeout = 60 + 30 * target_ms / 1000 * len(PRIMITIVES)
    for r in range(rounds):
        order = rotation(loops, r)
        for name in order:
            st = state[name]
            if st["status"] != "ok":
                continue  # failed to load, crashed or hung once: not retried every round
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                name,
                "--reps",
                "1",
                "--target-ms",
                str(target_ms),
            ]
            if cpu is not None:
                cmd += ["--cpu", str(cpu)]
            run = harness.run_worker(cmd, LOOPS[name].env, timeout)
            got_done = False
            for line in run.lines:
                kind = line["type"]
                if kind == "meta":
                    st["meta"] = st["meta"] or line
                elif kind == "error":
                    if "loop_class" in line:  # a backend mismatch still says what ran
                        st["meta"] = st["meta"] or line
                    st["status"] = "mismatch" if "BackendMismatch" in line["error"] else "failed"
                    st["errors"].append(line["error"])
                elif kind == "result":
                    prim = line["primitive"]
                    if "error" in line:
                        st["prim_errors"][prim] = line["error"]
                    else:
                        st["runs"].setdefault(prim, []).extend(line["us_per_op"])
                        st["n"].setdefault(prim, []).append(line["n"])
                elif kind == "done":
                    got_done = True
            if st["status"] == "ok" and not got_done:
                st["status"] = "crashed"
                st["errors"].append(harness.describe_failure(run))
            print(
                f"  round {r + 1}/{rounds}  {name:<18} "
                f"{st['status'] if st['status'] != 'ok' else 'ok'} ({run.seconds:.1f}s)"
                + (f": {st['errors'][-1]}" if st["errors"] else ""),
                flush=True,
            )
    return state


def _summarise(state: dict[str, dict[str, Any]]) -> dict[str, Any]:
    loops: dict[str, Any] = {}
    for name, st in state.items():
        meta = st["meta"] or {}
        entry: dict[str, Any] = {
            "status": st["status"],
            "kind": LOOPS[name].kind,
            "error": "; ".join(dict.fromkeys(st["errors"])) or None,
            "loop_class": meta.get("loop_class"),
            "version": meta.get("version"),
            "backend": meta.get("backend"),
            "cpu": meta.get("cpu"),
            "primitives": {},
        }
        for prim in PRIMITIVES:
            runs = st["runs"].get(prim)
            if runs:
                entry["primitives"][prim] = {
                    "median_us": statistics.median(runs),
                    "min_us": min(runs),
                    "runs_us": runs,
                    "n_per_run": st["n"][prim],
                }
            elif prim in st["prim_errors"]:
                entry["primitives"][prim] = {"error": st["prim_errors"][prim]}
        loops[name] = entry
    return loops


def _median(loops: dict[str, Any], name: str, prim: str) -> float | None:
    entry = loops.get(name)
    if not entry:
        return None
    return entry["primitives"].get(prim, {}).get("median_us")


def markdown_table(result: dict[str, Any]) -> str:
    """Rows = primitives; a cell is ``µs/op (speed-up over asyncio)``; then best peer and
    ringloop / best peer (>1 means ringloop is faster)."""
    loops = result["loops"]
    # Every loop of the run gets a column, measured or not: a ringloop column full of "—"
    # (with the reason under the table) says more than a column that silently vanished.
    shown = list(loops)
    ours = [name for name in shown if loops[name]["kind"] == "ours"]
    header = ["primitive", *shown, "best peer"] + [f"{n} vs best peer" for n in ours]
    rows = []
    for prim in PRIMITIVES:
        base = _median(loops, "asyncio", prim)
        cells = [prim]
        for name in shown:
            us = _median(loops, name, prim)
            if us is None:
                cells.append("—")
            elif name == "asyncio" or base is None:
                cells.append(fmt_us(us))
            else:
                cells.append(f"{fmt_us(us)} ({base / us:.2f}×)")
        peers = [(u, p) for p in PEERS if (u := _median(loops, p, prim)) is not None]
        best = min(peers) if peers else None
        cells.append(f"{best[1]} {fmt_us(best[0])}" if best else "—")
        for name in ours:
            us = _median(loops, name, prim)
            cells.append(f"{best[0] / us:.2f}×" if (us and best) else "—")
        rows.append(cells)
    return reporting.markdown_table(header, rows)


def _notes(result: dict[str, Any]) -> list[str]:
    notes = []
    for name, e in result["loops"].items():
        if e["status"] != "ok":
            notes.append(f"- **{name}**: {e['status']} — {e['error']}")
        for prim, p in e["primitives"].items():
            if "error" in p:
                notes.append(f"- **{name}** `{prim}`: {p['error']}")
    return notes


def console(result: dict[str, Any]) -> list[str]:
    """What the suite prints at the end of a run: the table and what was not measured."""
    return ["", markdown_table(result), *_notes(result)]


def readme_section(result: dict[str, Any]) -> str:
    s = result["settings"]
    parts = [
        reporting.measured_line(result["machine"])
        + f"{s['rounds']} rounds × {s['target_ms']:.0f} ms, workers pinned to CPU {s['cpu']}"
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        reporting.loops_line((n, e) for n, e in result["loops"].items() if e["primitives"]),
        "",
        "µs per operation, median of the rounds (lower is better); (×) is the speed-up over "
        "stock asyncio measured in the same run; *vs best peer* > 1 means ringloop is faster.",
        "",
        markdown_table(result),
    ]
    notes = _notes(result)
    if notes:
        parts += ["", "Not measured / failed:", "", *notes]
    parts += [
        "",
        "![µs per op](results/primitives_us.png) ![speed-up](results/primitives_speedup.png)",
    ]
    return "\n".join(parts)


def charts(result: dict[str, Any], outdir: Path) -> list[Path]:
    """Two PNGs: µs/op per loop (grouped bars, log scale) and speed-up over asyncio."""
    plt = reporting.pyplot()
    loops = result["loops"]
    shown = [name for name, e in loops.items() if e["primitives"]]
    prims = list(PRIMITIVES)
    written = []
    title_tail = f"({result['machine']['cpu_model']}, Python {result['machine']['python']})"

    def grouped(ax: Any, names: list[str], value: Callable[[str, str], float | None]) -> None:
        reporting.grouped_bars(ax, names, prims, value)
        ax.set_xticklabels(prims, rotation=30, ha="right")
        ax.legend(fontsize="small")

    missing = [name for name, e in loops.items() if not e["primitives"]]

    def footnote(fig: Any) -> None:
        # A loop that failed is named on the chart, so nobody reads its absence as a result.
        if missing:
            fig.text(
                0.01,
                0.01,
                "not measured: " + ", ".join(missing) + " (see latest.json)",
                fontsize="small",
                color="#555555",
            )

    def save(fig: Any, filename: str) -> None:
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        footnote(fig)
        written.append(reporting.save_figure(fig, outdir / filename))

    fig, ax = plt.subplots(figsize=(11, 5.5))
    grouped(ax, shown, lambda n, p: _median(loops, n, p))
    ax.set_yscale("log")  # gather(100) is ~1000x call_soon: linear bars would hide the rest
    ax.set_ylabel("µs per operation (log scale, lower is better)")
    ax.set_title(f"asyncio primitives: µs/op, median {title_tail}")
    save(fig, "primitives_us.png")

    def speedup(name: str, prim: str) -> float | None:
        base, us = _median(loops, "asyncio", prim), _median(loops, name, prim)
        return base / us if base and us else None

    fig, ax = plt.subplots(figsize=(11, 5.5))
    grouped(ax, [n for n in shown if n != "asyncio"], speedup)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_ylabel("speed-up over stock asyncio (higher is better)")
    ax.set_title(f"asyncio primitives: speed-up over stock asyncio, same run {title_tail}")
    save(fig, "primitives_speedup.png")
    return written


def main(argv: list[str] | None = None) -> int:
    """Runner entry point (also what ``benchmarks/run.py primitives`` calls)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:
        return worker(argv)
    parser = argparse.ArgumentParser(prog="primitives.py", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds × 30 ms (< 60 s)")
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS))
    parser.add_argument("--rounds", type=int, default=None, help="repetitions (default 5, quick 3)")
    parser.add_argument("--target-ms", type=float, default=None, help="length of one repetition")
    parser.add_argument(
        "--cpu", type=int, default=harness.default_bench_cpu(), help="pin workers here"
    )
    reporting.add_output_args(parser)
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    rounds = args.rounds or preset["rounds"]
    target_ms = args.target_ms or preset["target_ms"]
    out_dir, update_readme = reporting.output_choice(args)

    machine = harness.machine_info()
    print(
        f"primitives: {len(args.loops)} loops × {rounds} rounds × {target_ms:.0f} ms per op, "
        f"workers pinned to CPU {args.cpu}",
        flush=True,
    )
    t0 = time.monotonic()
    state = _collect(args.loops, rounds, target_ms, args.cpu)
    machine["loadavg_end"] = list(os.getloadavg())
    result = {
        "suite": "primitives",
        "machine": machine,
        "settings": {
            "quick": args.quick,
            "rounds": rounds,
            "target_ms": target_ms,
            "cpu": args.cpu,
            "gc": "disabled during timing",
            "statistic": "median of rounds; one repetition per worker process",
            "seconds": round(time.monotonic() - t0, 1),
        },
        "loops": _summarise(state),
    }
    reporting.publish(
        result,
        out_dir,
        "latest.json",
        console,
        charts=charts,
        section="primitives" if update_readme else None,
        readme_body=readme_section,
    )
    ok = any(e["primitives"] for e in result["loops"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
