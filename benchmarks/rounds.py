"""Rounds of measurements: every (scenario, subject) pair several times, and the medians.

A comparison on a shared two-core machine is only fair if the things compared meet the
same neighbours, so every suite repeats its measurements in rounds, visits the subjects in
a rotated order each round (``rotation``) and keeps the median. ``run_rounds`` does that
for suites that load a server once per (scenario, subject) pair and get a rate and a CPU
figure back (see ``harness.rates``), recording crashes instead of retrying them;
``summarise_rounds`` turns its state into the JSON that ``reporting.run_notes`` and the
suites' tables read. It prints one progress line per run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from reporting import fmt_rate


def rotation(names: list[str], round_index: int) -> list[str]:
    """``names`` rotated by the round number.

    Rounds interleaved and rotated: when a neighbour on the shared machine wakes up for a
    few seconds, it hurts one repetition of several subjects instead of all repetitions of
    one, and the median absorbs it.
    """
    cut = round_index % len(names)
    return names[cut:] + names[:cut]


def run_rounds(
    names: list[str],
    scenarios: list[Any],
    rounds: int,
    measure: Callable[[str, Any], dict[str, Any]],
    *,
    skip: Callable[[Any], str | None] = lambda sc: None,
    applies: Callable[[str, Any], bool] = lambda name, sc: True,
    brief: Callable[[dict[str, Any]], str] | None = None,
) -> dict[str, Any]:
    """Every (scenario, name) ``rounds`` times, names in a rotated order each round.

    Scenario by scenario, so the things compared in one scenario are measured minutes apart
    at most, and rotated (``rotation``). ``measure(name, scenario)`` runs one measurement
    and never raises: it returns ``{"status": "ok", "meta": ready line, figures...}`` or
    ``{"status": "crash", "error": ..., "stage": ...}``. A pair that crashed is not retried,
    and a name whose crash had ``"stage": "load"`` (it cannot even start) is marked crashed
    in every later scenario without running. ``skip(scenario)`` gives the reason a whole
    scenario cannot run (its load generator is missing); ``applies`` leaves a pair out.
    A scenario needs a ``key``. Prints one progress line per run (``brief(last run)`` says
    how it went, by default its rate and CPU per op); ``summarise_rounds`` turns the state
    into the JSON.
    """
    state: dict[str, Any] = {
        name: {"meta": None, "load_error": None, "builds": set(), "scenarios": {}} for name in names
    }
    for r in range(rounds):
        order = rotation(names, r)
        for sc in scenarios:
            why_not = skip(sc)
            for name in order:
                if not applies(name, sc):
                    continue
                cell = state[name]["scenarios"].setdefault(
                    sc.key, {"status": "skipped" if why_not else "ok", "error": why_not, "runs": []}
                )
                if state[name]["load_error"] and cell["status"] == "ok" and not cell["runs"]:
                    cell["status"], cell["error"] = "crash", state[name]["load_error"]
                if why_not or cell["status"] != "ok":
                    continue
                _record(state[name], cell, measure(name, sc))
                print(
                    f"  round {r + 1}/{rounds}  {sc.key:<19} {name:<18} {_brief(cell, brief)}",
                    flush=True,
                )
    return state


def _record(own: dict[str, Any], cell: dict[str, Any], res: dict[str, Any]) -> None:
    meta = res.pop("meta", None) or {}
    if "loop_class" in meta:
        own["meta"] = own["meta"] or meta
    if meta.get("package_mtime"):
        own["builds"].add(meta["package_mtime"])
    if res["status"] == "ok":
        cell["runs"].append(res)
        return
    cell["status"], cell["error"] = "crash", res["error"]
    cell["crash"] = res
    if res.get("stage") == "load":  # cannot import or start it: nothing else will run
        own["load_error"] = res["error"]


def _brief(cell: dict[str, Any], brief: Callable[[dict[str, Any]], str] | None) -> str:
    if cell["status"] != "ok":
        return f"{cell['status']}: {cell['error']}"
    last = cell["runs"][-1]
    if brief is not None:
        return brief(last)
    return (
        f"{fmt_rate(last['rate'])}/s  {last['cpu_us']:.1f} µs/op  "
        f"(server busy {last['server_busy']:.0%}, client busy {last['client_busy']:.0%})"
    )


MEDIAN_FIELDS = ("rate", "cpu_us", "server_busy", "client_busy")


def summarise_rounds(
    state: dict[str, Any],
    scenarios: list[Any],
    kind: Callable[[str], str],
    fields: tuple[str, ...] = MEDIAN_FIELDS,
) -> dict[str, Any]:
    """``run_rounds``'s state as JSON: per name, per scenario, the medians and every run.

    Per name: its ``kind`` (``kind(name)``), what it said about itself (``loop_class``,
    ``version``, ``backend``), ``load_error``, ``package_mtimes`` and ``scenarios``; per
    scenario: ``status``, ``error``, the medians of ``fields`` (by default ``rate``,
    ``cpu_us``, ``server_busy`` and ``client_busy``) over the runs, each where every run has
    it, ``runs`` and any ``crash`` record. ``reporting.run_notes`` reads this shape.
    """
    out: dict[str, Any] = {}
    for name, own in state.items():
        meta = own["meta"] or {}
        entry = {
            "kind": kind(name),
            "loop_class": meta.get("loop_class"),
            "version": meta.get("version"),
            "backend": meta.get("backend"),
            "load_error": own["load_error"],
            # More than one: the package changed during the run, rounds saw different builds.
            "package_mtimes": sorted(own["builds"]),
            "scenarios": {},
        }
        for sc in scenarios:
            cell = own["scenarios"].get(sc.key)
            if cell is None:
                continue
            summary: dict[str, Any] = {"status": cell["status"], "error": cell["error"]}
            runs = cell["runs"]
            if runs and cell["status"] == "ok":
                for field in fields:
                    # A field some runs lack (a scenario that measures memory, not rate) or
                    # hold as None (percentiles wrk could not give) has no median.
                    if all(r.get(field) is not None for r in runs):
                        summary[field] = statistics.median(r[field] for r in runs)
            summary["runs"] = runs
            if "crash" in cell:
                summary["crash"] = cell["crash"]
            entry["scenarios"][sc.key] = summary
        out[name] = entry
    return out
