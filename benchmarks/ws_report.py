"""The WebSocket suite's tables, targets, notes and charts (``ws_suite.py`` measures).

Results are shaped like the HTTP suite's: ``subjects -> name -> scenarios -> key -> cell``
with the medians ``rate`` (messages/s), ``cpu_us`` (server CPU µs per message), ``p50_us``,
``p99_us`` and the busy fractions. Two tables (CPU per message with the ratio to granian's,
then rates and latency), the issue's targets computed from the same run, and two PNGs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import reporting
from reporting import fmt_rate, fmt_us

REFERENCE = "granian-asgi"
# The targets, from one run: (what, subject, scenario, reference, field, limit, how):
# "≤" a ratio of CPU per message, or "≥" a ratio of rates.
TARGETS = [
    ("CPU per echoed 1 KiB message ≤ 0.5× granian ASGI", "ringloop-asgi", "echo-1k",
     "granian-asgi", "cpu_us", 0.5, "≤"),
    ("CPU per echoed 1 KiB message ≤ 0.4× uvicorn (websockets)", "ringloop-asgi", "echo-1k",
     "uvicorn-websockets", "cpu_us", 0.4, "≤"),
    ("broadcast to 1,000 subscribers ≥ 2× granian's messages/s", "ringloop-asgi", "broadcast",
     "granian-asgi", "rate", 2.0, "≥"),
]  # fmt: skip
COLOURS = {
    "ringloop": "#d62728",
    "granian": "#1f77b4",
    "uvicorn": "#2ca02c",
    "cymongoose": "#9467bd",
    "socketify": "#ff7f0e",
    "aiohttp": "#17becf",
    "websockets": "#8c564b",
}


def _server(name: str) -> str:
    return name.split("-")[0]


def _cell(result: dict[str, Any], name: str, key: str) -> dict[str, Any] | None:
    return result["subjects"].get(name, {}).get("scenarios", {}).get(key)


def _keys(result: dict[str, Any]) -> list[str]:
    return list(result["settings"]["scenarios"])


def _label(result: dict[str, Any], key: str) -> str:
    return result["settings"]["scenario_labels"][key]


def _status(c: dict[str, Any] | None) -> str:
    return "—" if c is None else c["status"]


def _ms(us: float | None) -> str:
    return "n/a" if us is None else f"{us / 1000:.2f}"


def brief(run: dict[str, Any]) -> str:
    """The progress line of one run (rounds.py prints it)."""
    return (
        f"{fmt_rate(run['rate'])} msg/s  {run['cpu_us']:.2f} µs/msg  p99 {_ms(run['p99_us'])} ms "
        f"(server busy {run['server_busy']:.0%}, client busy {run['client_busy']:.0%})"
    )


def cpu_table(result: dict[str, Any]) -> str:
    """Rows = subjects; per scenario: server CPU µs per message (× granian ASGI's)."""
    keys = _keys(result)
    header = ["server", *(f"{_label(result, k)} µs/msg (× granian)" for k in keys)]
    rows = []
    for name in result["subjects"]:
        row = [name]
        for key in keys:
            c, ref = _cell(result, name, key), _cell(result, REFERENCE, key)
            if c and "cpu_us" in c:
                text = fmt_us(c["cpu_us"])
                if name != REFERENCE and ref and ref.get("cpu_us"):
                    text += f" ({c['cpu_us'] / ref['cpu_us']:.2f}×)"
                row.append(text)
            else:
                row.append(_status(c))
        rows.append(row)
    return reporting.markdown_table(header, rows)


def rate_table(result: dict[str, Any]) -> str:
    """Rows = subjects; per scenario: messages/s and p50 / p99 in ms."""
    keys = _keys(result)
    header = ["server"]
    for key in keys:
        header += [f"{_label(result, key)} msg/s", f"{_label(result, key)} p50 / p99 ms"]
    rows = []
    for name in result["subjects"]:
        row = [name]
        for key in keys:
            c = _cell(result, name, key)
            if c and "rate" in c:
                row += [fmt_rate(c["rate"]), f"{_ms(c.get('p50_us'))} / {_ms(c.get('p99_us'))}"]
            else:
                row += [_status(c), "—"]
        rows.append(row)
    return reporting.markdown_table(header, rows)


def target_lines(result: dict[str, Any]) -> list[str]:
    """Each target of the issue, from this run: the figures, the ratio, met or not."""
    out = []
    for what, name, key, ref, field, limit, sense in TARGETS:
        if key not in result["settings"]["scenarios"]:
            continue
        mine, other = _cell(result, name, key), _cell(result, ref, key)
        if not mine or not other or field not in mine or not other.get(field):
            why = "; ".join(
                f"{n}: {_status(c)}"
                for n, c in ((name, mine), (ref, other))
                if not c or field not in c
            )
            out.append(f"- {what}: not measured ({why})")
            continue
        ratio = mine[field] / other[field]
        met = ratio <= limit if sense == "≤" else ratio >= limit
        shown = fmt_us if field == "cpu_us" else fmt_rate
        unit = "µs/msg" if field == "cpu_us" else "msg/s"
        out.append(
            f"- {what}: {shown(mine[field])} / {shown(other[field])} {unit} = {ratio:.3f}× — "
            + ("**met**" if met else "**not met**")
        )
    return out


def notes(result: dict[str, Any]) -> list[str]:
    """Unavailable subjects, then crashes, skips and unsaturated runs (reporting.run_notes)."""
    out = []
    for name, e in result["subjects"].items():
        if any(c["status"] == "unavailable" for c in e["scenarios"].values()):
            out.append(f"- **{name}**: unavailable — {e['load_error']}")
    ran = {
        n: {
            **e,
            "scenarios": {k: c for k, c in e["scenarios"].items() if c["status"] != "unavailable"},
        }
        for n, e in result["subjects"].items()
    }
    return out + reporting.run_notes(ran)


def versions_line(result: dict[str, Any]) -> str:
    seen: dict[str, str] = {}
    for e in result["subjects"].values():
        for c in e["scenarios"].values():
            for run in [*c.get("runs", []), c.get("crash") or {}]:
                seen.update({k: v for k, v in (run.get("versions") or {}).items() if v})
    return "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + "."


def console(result: dict[str, Any]) -> list[str]:
    lines = ["", "Server CPU µs per message (× granian ASGI's):", "", cpu_table(result)]
    lines += ["", "Messages/s and latency:", "", rate_table(result)]
    if targets := target_lines(result):
        lines += ["", "Targets (this run):", *targets]
    return lines + notes(result)


def readme_section(result: dict[str, Any]) -> str:
    """The README block: method, how each server runs, the tables, the targets, notes."""
    m, s = result["machine"], result["settings"]
    parts = [
        reporting.measured_line(m)
        + f"{s['rounds']} round(s) × {s['duration']:g} s per run, median; server pinned to CPU "
        f"{s['server_cpu']}, `ws_client.c` to CPU {s['client_cpu']}"
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        f"*Echo*: {s['connections']} connections, each sending a binary message and waiting for "
        f"its echo before the next. *Broadcast*: {s['subscribers']:,} subscribers and one "
        f"publisher of {s['broadcast_size']} B messages, at most {s['window']} of them not yet "
        "received by every subscriber; messages/s counts deliveries, and the latency is from "
        "a message's send until its last subscriber has it. No compression.",
        "",
        "How each server runs: " + "; ".join(f"**{n}** {how}" for n, how in s["how"].items()) + ".",
        "",
        versions_line(result),
        "",
        "**Server CPU µs per message** (the server's whole process tree, from /proc; lower is "
        "better), and in brackets that figure over granian ASGI's in the same scenario.",
        "",
        cpu_table(result),
        "",
        "**Messages/s and p50 / p99 latency.**",
        "",
        rate_table(result),
    ]
    if targets := target_lines(result):
        parts += ["", "**Targets**, computed from this run:", "", *targets]
    if extra := notes(result):
        parts += ["", "Notes:", "", *extra]
    parts += ["", "![CPU per message](results/ws_cpu.png) ![messages/s](results/ws_rate.png)"]
    return "\n".join(parts)


def charts(result: dict[str, Any], outdir: Path) -> list[Path]:
    """ws_cpu.png (CPU µs/message) and ws_rate.png (messages/s): a panel per scenario."""
    written = []
    tail = f"{result['machine']['cpu_model']}, Python {result['machine']['python']}"
    for field, what, filename in (
        ("cpu_us", "server CPU µs/message (lower is better)", "ws_cpu.png"),
        ("rate", "messages/s (higher is better)", "ws_rate.png"),
    ):
        written.append(_chart(result, field, what, outdir / filename, tail))
    return written


def _chart(result: dict[str, Any], field: str, what: str, path: Path, tail: str) -> Path:
    return reporting.scenario_panels(
        result,
        _keys(result),
        field,
        f"WebSocket {what}: server on CPU 0, ws_client on CPU 1 ({tail})",
        path,
        cell=lambda name, key: _cell(result, name, key),
        colour=lambda name: COLOURS.get(_server(name), "#333333"),
        status=_status,
        label=lambda key: _label(result, key),
        size=(3.6, 0.32, 2.0),
        headroom=1.35,
    )
