"""The transports suite's report: its HTTP and echo tables, the target line, README, charts.

Rendered from the suite's result JSON alone plus its scenario catalogue (``transports.
SCENARIOS``, passed in as ``catalogue``: for each scenario key its ``kind``, ``label``,
``api`` and echo ``size``), so the same function renders a fresh run and a committed
``results/transports.json``. The catalogue is a parameter rather than an import because
``transports.py`` imports this module to print its report; importing it back would make
the two a cycle.

The generic pieces (number formats, Markdown, notes, bar charts) are ``reporting.py``'s;
what is here is what the transports tables hold: per loop the rate, the server CPU µs per
operation and that CPU over rloop's, and the project's target (ringloop-io_uring's CPU per
HTTP request at most 0.8× rloop's) next to the C floor, the kernel's share of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import reporting
from reporting import cell, fmt_rate, fmt_us

Catalogue = Mapping[str, Any]  # scenario key -> transports.Scenario

# The loop every CPU figure is compared with: the fastest peer in our measurements, and the
# one the project's target names.
REFERENCE = "rloop"
TARGET = "Target (ringloop-io_uring CPU µs/request ≤ 0.8× rloop's, plain HTTP)"


def _keys(result: dict[str, Any], catalogue: Catalogue, kind: str) -> list[str]:
    return [k for k in result["settings"]["scenarios"] if catalogue[k].kind == kind]


def _ratio_vs_rloop(loops: dict[str, Any], name: str, key: str) -> str:
    mine, ref = cell(loops, name, key), cell(loops, REFERENCE, key)
    if not mine or not ref or "cpu_us" not in mine or "cpu_us" not in ref:
        return "—"
    return f"{mine['cpu_us'] / ref['cpu_us']:.2f}×"


def _status_text(c: dict[str, Any] | None) -> str:
    return "—" if c is None else c["status"]


def _floor(loops: dict[str, Any]) -> str | None:
    """The C floor's name: the run's "reference" entry, not a loop."""
    return next((name for name, e in loops.items() if e["kind"] == "reference"), None)


def http_table(result: dict[str, Any], catalogue: Catalogue) -> str:
    """Rows = loops; per HTTP scenario: req/s, server CPU µs/req, that CPU over rloop's."""
    loops = result["loops"]
    keys = _keys(result, catalogue, "http")
    header = ["loop"]
    for key in keys:
        label = catalogue[key].label
        header += [f"{label} req/s", f"{label} CPU µs/req", f"{label} CPU vs rloop"]
    rows = []
    for name in loops:
        row = [name]
        for key in keys:
            c = cell(loops, name, key)
            if c and "rate" in c:
                row += [fmt_rate(c["rate"]), fmt_us(c["cpu_us"]), _ratio_vs_rloop(loops, name, key)]
            else:
                row += [_status_text(c), "—", "—"]
        rows.append(row)
    return reporting.markdown_table(header, rows)


def echo_table(result: dict[str, Any], catalogue: Catalogue) -> str:
    """Rows = loops; one column per echo scenario: msg/s · server CPU µs/msg (× rloop's)."""
    loops = result["loops"]
    keys = _keys(result, catalogue, "echo")
    header = ["loop", *(catalogue[k].label for k in keys)]
    rows = []
    for name in loops:
        if not any(cell(loops, name, key) for key in keys):
            continue  # the C floor serves HTTP only
        row = [name]
        for key in keys:
            c = cell(loops, name, key)
            if c and "rate" in c:
                ratio = _ratio_vs_rloop(loops, name, key)
                tail = f" ({ratio})" if name != REFERENCE and ratio != "—" else ""
                row.append(f"{fmt_rate(c['rate'])} · {fmt_us(c['cpu_us'])} µs{tail}")
            else:
                row.append(_status_text(c))
        rows.append(row)
    return reporting.markdown_table(header, rows)


def target_line(result: dict[str, Any]) -> str | None:
    """The project target: ringloop-io_uring's CPU µs/request ≤ 0.8× rloop's (plain HTTP)."""
    loops = result["loops"]
    mine, ref = cell(loops, "ringloop-io_uring", "http"), cell(loops, REFERENCE, "http")
    if not mine or not ref:
        return None
    if "cpu_us" not in mine or "cpu_us" not in ref:
        return f"{TARGET}: not measurable in this run."
    ratio = mine["cpu_us"] / ref["cpu_us"]
    verdict = "met" if ratio <= 0.8 else "not met"
    line = (
        f"{TARGET}: {fmt_us(mine['cpu_us'])} / {fmt_us(ref['cpu_us'])} µs = {ratio:.2f}× — "
        f"{verdict}."
    )
    floor = _floor(loops)
    floor_cell = cell(loops, floor, "http") if floor else None
    if floor_cell and "cpu_us" in floor_cell:
        line += (
            f" The same responder in C on epoll ({floor}: no Python, no loop library) used "
            f"{fmt_us(floor_cell['cpu_us'])} µs = {floor_cell['cpu_us'] / ref['cpu_us']:.2f}× "
            "rloop's: the kernel's TCP work per request, which no server on this machine goes "
            "below."
        )
    return line


def _has(result: dict[str, Any], catalogue: Catalogue, kind: str) -> bool:
    return bool(_keys(result, catalogue, kind))


def console(result: dict[str, Any], catalogue: Catalogue) -> list[str]:
    """What the suite prints at the end of a run: the tables, the target, the notes."""
    lines: list[str] = []
    if _has(result, catalogue, "http"):
        lines += ["", http_table(result, catalogue)]
        if (target := target_line(result)) is not None:
            lines.append(target)
    if _has(result, catalogue, "echo"):
        lines += ["", echo_table(result, catalogue)]
    return lines + reporting.run_notes(result["loops"])


def readme_section(result: dict[str, Any], catalogue: Catalogue) -> str:
    """The README block: how it was measured, the HTTP table, the target, the echo table."""
    m, s = result["machine"], result["settings"]
    connections = s["connections"]
    parts = [
        reporting.measured_line(m)
        + f"{s['rounds']} round(s) × {s['duration']:g} s per run, median; server pinned to CPU "
        f"{s['server_cpu']}, load generator to CPU {s['client_cpu']}; {connections} connections"
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        reporting.loops_line(
            (name, e) for name, e in result["loops"].items() if e["version"] or e["backend"]
        ),
    ]
    images = []
    if _has(result, catalogue, "http"):
        parts += [
            "",
            "**HTTP** (wrk `-t1 -c64`, canned keep-alive response). CPU µs/req is the server "
            "process's CPU per request (lower is better); *vs rloop* is that figure over "
            "rloop's in the same run (< 1 means less CPU than rloop).",
            "",
            http_table(result, catalogue),
        ]
        if (target := target_line(result)) is not None:
            parts += ["", target]
        images.append("![HTTP](results/transports_http.png)")
    if _has(result, catalogue, "echo"):
        parts += [
            "",
            f"**Echo** ({connections} connections, message size per column). Each cell: "
            "messages/s · server CPU µs per message (that CPU over rloop's).",
            "",
            echo_table(result, catalogue),
        ]
        images.append("![echo](results/transports_echo.png)")
    if extra := reporting.run_notes(result["loops"]):
        parts += ["", "Notes:", "", *extra]
    parts += ["", " ".join(images)]
    return "\n".join(parts)


# --------------------------------------------------------------------------- charts


def charts(result: dict[str, Any], catalogue: Catalogue, outdir: Path) -> list[Path]:
    """transports_http.png and transports_echo.png: throughput above, server CPU/op below.

    One panel per HTTP scenario and one per echo API (message sizes side by side, log
    scale), because the rates differ tenfold between panels and would flatten each other.
    """
    plt = reporting.pyplot()
    written = []
    keys = result["settings"]["scenarios"]
    connections = result["settings"]["connections"]
    tail = f"{result['machine']['cpu_model']}, Python {result['machine']['python']}"
    for kind, unit, filename in (
        ("http", "request", "transports_http.png"),
        ("echo", "message", "transports_echo.png"),
    ):
        panels = _panels(catalogue, kind, keys)
        if not panels:
            continue
        # Only the loops measured in this kind of scenario (the C floor serves HTTP only).
        kind_keys = [k for _, group in panels for k in group]
        loops = {
            name: e
            for name, e in result["loops"].items()
            if any(cell(result["loops"], name, k) for k in kind_keys)
        }
        fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels) + 1, 8), squeeze=False)
        for col, (title, group) in enumerate(panels):
            for row, (field, what) in enumerate(
                (
                    ("rate", f"{unit}s/s (higher is better)"),
                    ("cpu_us", f"server CPU µs/{unit} (lower is better)"),
                )
            ):
                ax = axes[row][col]
                _bars(ax, loops, catalogue, group, field, log=kind == "echo")
                ax.set_title(title if row == 0 else "", fontsize="medium")
                if col == 0:
                    ax.set_ylabel(what)
        # Below the panels, not in one: a legend inside a panel hides somebody's bar.
        fig.legend(
            handles=reporting.legend_handles(loops),
            loc="lower center",
            ncol=len(loops),
            fontsize="small",
        )
        fig.suptitle(
            f"{kind}: {connections} connections, server and load on separate CPUs ({tail})"
        )
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        written.append(reporting.save_figure(fig, outdir / filename))
    return written


def _panels(catalogue: Catalogue, kind: str, keys: list[str]) -> list[tuple[str, list[str]]]:
    """(title, scenario keys) per chart panel: echo grouped by API, HTTP one per scenario."""
    mine = [k for k in keys if catalogue[k].kind == kind]
    if kind == "http":
        return [(catalogue[k].label, [k]) for k in mine]
    apis = list(dict.fromkeys(catalogue[k].api for k in mine))
    return [(f"echo, {api}", [k for k in mine if catalogue[k].api == api]) for api in apis]


def _bars(
    ax: Any, loops: dict[str, Any], catalogue: Catalogue, keys: list[str], field: str, log: bool
) -> None:
    """One panel: a bar per loop and scenario, "crash" or "skipped" where a bar is missing."""

    def value(name: str, key: str) -> float | None:
        return (cell(loops, name, key) or {}).get(field)

    def status(name: str, key: str) -> str | None:
        why = (cell(loops, name, key) or {}).get("status")
        return why if why in ("crash", "skipped") else None

    reporting.grouped_bars(ax, list(loops), keys, value, status)
    if log:
        ax.set_yscale("log")
    ax.set_xticklabels(
        [f"{catalogue[k].size // 1024} KiB" if catalogue[k].kind == "echo" else "" for k in keys]
    )
