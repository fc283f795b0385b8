"""How exact the watch's block durations are, per loop: reported duration against the truth.

Each case blocks the loop once, from inside a task, for a known time — ``time.sleep(d)`` (a
wait: the loop thread is off its CPU) or a CPU spin of ``d`` — at a random phase (a random
short ``await asyncio.sleep`` first, so the block starts anywhere relative to uvloop's
heartbeat). The truth is the blocking call's own ``perf_counter`` span; the error is the
watch's ``Block.duration`` minus it. Threshold 10 ms.

    python benchmarks/watch_accuracy.py [--cases N]

Prints a markdown table (mean and worst error, share of cases within 1 ms) and writes
``benchmarks/results/watch_accuracy.json``. The machine may be loaded: a CPU spin on a shared
CPU is where the heartbeat's estimate is weakest (its start comes from the loop thread's CPU
clock, which does not count the time it waited for a CPU), so the load is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time

DURATIONS = (0.02, 0.035, 0.05, 0.08)
THRESHOLD = 0.01


def _factories():
    import ringloop

    out = {"asyncio": asyncio.new_event_loop, "ringloop": ringloop.new_event_loop}
    try:
        import uvloop

        out["uvloop"] = uvloop.new_event_loop
    except ImportError:
        pass
    return out


def _spin(d: float) -> None:
    end = time.perf_counter() + d
    while time.perf_counter() < end:
        pass


async def _one(kind: str, d: float) -> tuple[float, float | None]:
    from ringloop.watch import no_blocking

    async with no_blocking(THRESHOLD, action="log") as nb:
        await asyncio.sleep(random.uniform(0.001, 0.006))
        t = time.perf_counter()
        if kind == "sleep":
            time.sleep(d)
        else:
            _spin(d)
        truth = time.perf_counter() - t
        await asyncio.sleep(0.005)
    longest = max((b.duration for b in nb.blocks), default=None)
    return truth, longest


def run(cases: int) -> dict:
    import logging

    logging.getLogger("ringloop.watch").setLevel(logging.ERROR)
    out: dict = {"load": os.getloadavg(), "cases": {}}
    for name, factory in _factories().items():
        for kind in ("sleep", "cpu"):
            errors = []
            for i in range(cases):
                d = DURATIONS[i % len(DURATIONS)]
                with asyncio.Runner(loop_factory=factory) as r:
                    truth, got = r.run(_one(kind, d))
                errors.append(None if got is None else got - truth)
            out["cases"][f"{name}/{kind}"] = errors
    return out


def table(res: dict) -> str:
    lines = [
        f"load average {res['load'][0]:.2f} (2 CPUs)",
        "",
        "| loop / block | cases | found | mean error | worst error | within 1 ms |",
        "|---|---|---|---|---|---|",
    ]
    for key, errs in res["cases"].items():
        found = [e for e in errs if e is not None]
        if not found:
            lines.append(f"| {key} | {len(errs)} | 0 | - | - | - |")
            continue
        worst = max(found, key=abs)
        within = sum(abs(e) <= 0.001 for e in found)
        lines.append(
            f"| {key} | {len(errs)} | {len(found)} | {statistics.mean(found) * 1e3:+.2f} ms"
            f" | {worst * 1e3:+.2f} ms | {within}/{len(errs)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=30)
    args = p.parse_args(argv)
    res = run(args.cases)
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.join(here, "results"), exist_ok=True)
    with open(os.path.join(here, "results", "watch_accuracy.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(table(res))


if __name__ == "__main__":
    main()
