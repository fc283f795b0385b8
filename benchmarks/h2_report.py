"""The HTTP/2 suite's report: its table, the issue's targets, the README section and the charts.

Rendered from the suite's result JSON alone (``results/h2.json``), so the same functions
render a fresh run and a committed one. Ratios are against granian ``--http 2`` in the same
scenario (issue 22's reference) and, for h2c, against the ``h2``-crate floor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import http_report
import reporting
from reporting import fmt_rate, fmt_us

GRANIAN = "granian-asgi"
FLOOR = "h2-floor"
# (what, subject, scenario, reference, the ratio not to exceed), on server CPU per request.
TARGETS = [
    ("h2c plaintext ≤ 0.5× granian `--http 2`", "ringloop-asgi", "h2c", GRANIAN, 0.5),
    ("h2 over TLS plaintext ≤ 0.5× granian's", "ringloop-asgi", "tls", GRANIAN, 0.5),
]
COLOURS = {
    **http_report.COLOURS,
    "hypercorn": "#8c564b",
    FLOOR: "#3b3b3b",
}


def _cell(result: dict[str, Any], name: str, key: str) -> dict[str, Any] | None:
    return result["subjects"].get(name, {}).get("scenarios", {}).get(key)


def _ms(us: float | None) -> str:
    return "n/a" if us is None else f"{us / 1000:.2f}"


def _status(c: dict[str, Any] | None) -> str:
    return "—" if c is None else c["status"]


def _ratio(result: dict[str, Any], name: str, ref: str, key: str) -> str:
    mine, other = _cell(result, name, key), _cell(result, ref, key)
    if name == ref or not mine or not other or "cpu_us" not in mine or "cpu_us" not in other:
        return "—"
    return f"{mine['cpu_us'] / other['cpu_us']:.2f}×"


def brief(run: dict[str, Any]) -> str:
    """The progress line of one run."""
    return (
        f"{fmt_rate(run['rate'])}/s  {run['cpu_us']:.1f} µs/req  p99 {_ms(run['p99_us'])} ms  "
        f"(server busy {run['server_busy']:.0%}, client busy {run['client_busy']:.0%})"
    )


def table(result: dict[str, Any]) -> str:
    """One row per (scenario, subject): req/s, p50 / p99, CPU µs/req, × granian, × floor."""
    header = [
        "scenario",
        "server",
        "req/s",
        "p50 / p99 ms",
        "CPU µs/req",
        "× granian",
        "× h2-floor",
        "RSS MiB",
    ]
    rows = []
    labels = result["settings"]["scenario_labels"]
    for key in result["settings"]["scenarios"]:
        for name in result["subjects"]:
            c = _cell(result, name, key)
            if c is None:
                continue
            if "cpu_us" not in c:
                rows.append([labels[key], name, _status(c), "—", "—", "—", "—", "—"])
                continue
            rss = c.get("rss_bytes")
            rows.append(
                [
                    labels[key],
                    name,
                    fmt_rate(c["rate"]),
                    f"{_ms(c.get('p50_us'))} / {_ms(c.get('p99_us'))}",
                    fmt_us(c["cpu_us"]),
                    _ratio(result, name, GRANIAN, key),
                    _ratio(result, name, FLOOR, key),
                    "—" if rss is None else f"{rss / 2**20:.1f}",
                ]
            )
    return reporting.markdown_table(header, rows)


def target_lines(result: dict[str, Any]) -> list[str]:
    out = []
    for what, name, key, ref, limit in TARGETS:
        if key not in result["settings"]["scenarios"]:
            continue
        mine, other = _cell(result, name, key), _cell(result, ref, key)
        if not mine or not other or "cpu_us" not in mine or "cpu_us" not in other:
            out.append(f"- {what}: not measured ({_status(mine)} / {_status(other)})")
            continue
        ratio = mine["cpu_us"] / other["cpu_us"]
        verdict = "**met**" if ratio <= limit else "**not met**"
        out.append(
            f"- {what} (CPU µs/request): {fmt_us(mine['cpu_us'])} / {fmt_us(other['cpu_us'])} "
            f"= {ratio:.3f}× — {verdict}"
        )
    return out


def notes(result: dict[str, Any]) -> list[str]:
    out = [
        f"- **{name}**: unavailable — {e['load_error']}"
        for name, e in result["subjects"].items()
        if any(c["status"] == "unavailable" for c in e["scenarios"].values())
    ]
    ran = {
        n: {
            **e,
            "scenarios": {k: c for k, c in e["scenarios"].items() if c["status"] != "unavailable"},
        }
        for n, e in result["subjects"].items()
    }
    return out + reporting.run_notes(ran)


def console(result: dict[str, Any]) -> list[str]:
    lines = ["", "HTTP/2 (h2load -c64 -m10):", "", table(result)]
    if targets := target_lines(result):
        lines += ["", "Targets (this run):", *targets]
    return lines + notes(result)


def readme_section(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    load = m.get("loadavg_end")
    parts = [
        reporting.measured_line(m)
        + f"{s['rounds']} round(s) × {s['duration']:g} s per run, median; server pinned to CPU "
        f"{s['server_cpu']}, `h2load -c{s['connections']} -m{s['streams']} -t1` to CPU "
        f"{s['client_cpu']}; TLS: {s['tls_key']} certificate, ALPN `h2`"
        + (f"; load average at the end {load[0]:.1f}" if load else "")
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        http_report.versions_line(result),
        "",
        "**Server CPU µs per request** (the server's whole process tree, from /proc), against "
        "granian `--http 2` and the `h2`-crate floor in the same scenario; requests/s is "
        "h2load's, p50 / p99 from its per-request log.",
        "",
        table(result),
    ]
    if targets := target_lines(result):
        parts += ["", "**Targets**, computed from this run:", "", *targets]
    if extra := notes(result):
        parts += ["", "Notes:", "", *extra]
    parts += [
        "",
        "![HTTP/2 CPU per request](results/h2_cpu.png) ![HTTP/2 requests/s](results/h2_rate.png)",
    ]
    return "\n".join(parts)


def charts(result: dict[str, Any], outdir: Path) -> list[Path]:
    """h2_cpu.png and h2_rate.png: a panel per scenario, a bar per server in its colour."""
    keys = result["settings"]["scenarios"]
    tail = f"{result['machine']['cpu_model']}, Python {result['machine']['python']}"
    written = []
    for field, what, filename in (
        ("cpu_us", "HTTP/2 server CPU µs/request (lower is better)", "h2_cpu.png"),
        ("rate", "HTTP/2 requests/s (higher is better)", "h2_rate.png"),
    ):
        written.append(_chart(result, keys, field, what, outdir / filename, tail))
    return written


def _chart(
    result: dict[str, Any], keys: list[str], field: str, what: str, path: Path, tail: str
) -> Path:
    labels = result["settings"]["scenario_labels"]
    return reporting.scenario_panels(
        result,
        keys,
        field,
        f"{what}: server on CPU 0, h2load -c64 -m10 on CPU 1 ({tail})",
        path,
        cell=lambda name, key: _cell(result, name, key),
        colour=lambda name: COLOURS.get(name, COLOURS.get(name.split("-")[0], "#333333")),
        status=_status,
        label=lambda key: labels[key],
        size=(4.2, 0.36, 1.5),
        # hypercorn costs ~50x the others: on a linear axis they would be slivers.
        log_spread=20,
    )
