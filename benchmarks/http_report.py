"""The HTTP suite's report: its tables, the target line, the README section and the charts.

Rendered from the suite's result JSON alone (``results/http.json``: settings, and per
subject per scenario the medians and every run), so the same functions render a fresh run
and a committed one. The generic pieces (number formats, Markdown, README markers, figure
saving) are ``reporting.py``'s.

Every table has a row for nginx and one for the C floor (``c-floor``, ``http_floor.c``),
so every figure stands next to what a server with no Python costs on this machine: the
floor's CPU per request is the kernel's TCP work, which no server goes below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import reporting
from reporting import fmt_rate, fmt_us

FLOOR = "c-floor"
NGINX = "nginx"

# The targets, each computed from the same run: (what, subject, scenario, reference
# subject, reference scenario, the ratio not to exceed, the figure compared).
TARGETS = [
    ("ASGI plaintext ≤ 0.5× granian ASGI", "ringloop-asgi", "plaintext", "granian-asgi", 0.5),
    ("native plaintext ≤ 1.3× c-floor", "ringloop-native", "plaintext", FLOOR, 1.3),
    ("WSGI plaintext ≤ 0.6× granian WSGI", "ringloop-wsgi", "plaintext", "granian-wsgi", 0.6),
    ("pipelined ×16 ASGI ≤ 0.4× granian's", "ringloop-asgi", "pipelined", "granian-asgi", 0.4),
    ("FastAPI JSON ≤ 0.85× uvicorn (uvloop + httptools)", "ringloop-asgi", "json", "uvicorn", 0.85),
]
P99_TARGET = ("p99 at 64 connections no worse than granian's", "ringloop-asgi", "granian-asgi")
IDLE_TARGET_KIB = 8.0
# The slowloris connections must all be cut, and the load's p99 beside them stay within
# this multiple of the quiet run's.
SLOWLORIS_TARGET = ("ringloop-asgi", 2.0)
# Scenarios with a table of their own; every other one is a wrk column of the main tables.
OWN_TABLE = ("idle", "slowloris")

# One colour per server (every interface of a server shares it), the references in greys.
COLOURS = {
    "ringloop": "#d62728",
    "granian": "#1f77b4",
    "uvicorn": "#2ca02c",
    "cymongoose": "#9467bd",
    "socketify": "#ff7f0e",
    "aiohttp": "#17becf",
    NGINX: "#7f7f7f",
    FLOOR: "#3b3b3b",
}


def _server(name: str) -> str:
    return name.split("-")[0] if name != FLOOR else FLOOR


def _cell(result: dict[str, Any], name: str, key: str) -> dict[str, Any] | None:
    return result["subjects"].get(name, {}).get("scenarios", {}).get(key)


def _keys(result: dict[str, Any], only: str | None = None) -> list[str]:
    """The scenarios of the main tables, or with ``only`` ("idle", "slowloris") that one."""
    labels = result["settings"]["scenario_labels"]
    keys = [k for k in result["settings"]["scenarios"] if k in labels]
    return [k for k in keys if k == only] if only else [k for k in keys if k not in OWN_TABLE]


def _label(result: dict[str, Any], key: str) -> str:
    return result["settings"]["scenario_labels"][key]


def _status(c: dict[str, Any] | None) -> str:
    if c is None:
        return "—"
    return "unavailable" if c["status"] == "unavailable" else c["status"]


def _ms(us: float | None) -> str:
    return "n/a" if us is None else f"{us / 1000:.2f}"


def _mib(b: float | None) -> str:
    return "—" if b is None else f"{b / 2**20:.1f}"


def _s(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.1f}"


def brief(run: dict[str, Any]) -> str:
    """The progress line of one run (rounds.py prints it)."""
    if "sl_rate" in run:
        ratio = f" ({run['p99_ratio']:.2f}×)" if run.get("p99_ratio") is not None else ""
        cut = f"cut {run['cut']}/{run['opened']}"
        if run["cut"]:
            cut += f" after {_s(run['close_median_s'])} s median, {_s(run['close_max_s'])} max"
        return (
            f"quiet {fmt_rate(run['rate'])}/s p99 {_ms(run['p99_us'])} ms; beside "
            f"{run['opened']} slowloris {fmt_rate(run['sl_rate'])}/s p99 "
            f"{_ms(run['sl_p99_us'])} ms{ratio}; {cut}; {run['still_open']} still open"
        )
    if "rss_per_conn" in run:
        return (
            f"{run['rss_per_conn'] / 1024:.2f} KiB/connection "
            f"({run['connections']} connections, RSS {_mib(run['rss_before'])} → "
            f"{_mib(run['rss_after'])} MiB)"
        )
    p99 = f", p99 {_ms(run['p99_us'])} ms" if run.get("p99_us") is not None else ""
    return (
        f"{fmt_rate(run['rate'])}/s  {run['cpu_us']:.1f} µs/req{p99}  "
        f"(server busy {run['server_busy']:.0%}, client busy {run['client_busy']:.0%})"
    )


# --------------------------------------------------------------------------- tables


def _ratio(result: dict[str, Any], name: str, ref: str, key: str, field: str = "cpu_us") -> str:
    mine, other = _cell(result, name, key), _cell(result, ref, key)
    if not mine or not other or field not in mine or field not in other or not other[field]:
        return "—"
    return f"{mine[field] / other[field]:.2f}×"


def cpu_table(result: dict[str, Any]) -> str:
    """Rows = subjects; per wrk scenario: server CPU µs/request (× the C floor's)."""
    keys = _keys(result)
    header = ["server", "interface", *(f"{_label(result, k)} µs/req (× floor)" for k in keys)]
    rows = []
    for name, entry in result["subjects"].items():
        row = [name, entry["kind"]]
        for key in keys:
            c = _cell(result, name, key)
            if c and "cpu_us" in c:
                ratio = _ratio(result, name, FLOOR, key)
                shown = name != FLOOR and ratio != "—"
                row.append(fmt_us(c["cpu_us"]) + (f" ({ratio})" if shown else ""))
            else:
                row.append(_status(c))
        rows.append(row)
    return reporting.markdown_table(header, rows)


def rate_table(result: dict[str, Any]) -> str:
    """Rows = subjects; per wrk scenario: requests/s, p50 / p99 latency in ms, RSS."""
    keys = _keys(result)
    header = ["server"]
    for key in keys:
        header += [f"{_label(result, key)} req/s", f"{_label(result, key)} p50 / p99 ms"]
    with_rss = "plaintext" in keys
    if with_rss:
        header.append("RSS after plaintext MiB")
    rows = []
    for name in result["subjects"]:
        row = [name]
        for key in keys:
            c = _cell(result, name, key)
            if c and "rate" in c:
                row += [fmt_rate(c["rate"]), f"{_ms(c.get('p50_us'))} / {_ms(c.get('p99_us'))}"]
            else:
                row += [_status(c), "—"]
        if with_rss:
            row.append(_mib((_cell(result, name, "plaintext") or {}).get("rss_bytes")))
        rows.append(row)
    return reporting.markdown_table(header, rows)


def idle_table(result: dict[str, Any]) -> str:
    """Rows = subjects: RSS before and with the idle connections, KiB per connection."""
    n = result["settings"]["idle_connections"]
    header = ["server", "RSS before MiB", f"RSS with {n:,} idle MiB", "KiB per connection"]
    rows = []
    for name in result["subjects"]:
        c = _cell(result, name, "idle")
        if c and "rss_per_conn" in c:
            rows.append(
                [
                    name,
                    _mib(c["rss_before"]),
                    _mib(c["rss_after"]),
                    f"{c['rss_per_conn'] / 1024:.2f}",
                ]
            )
        else:
            rows.append([name, _status(c), "—", "—"])
    return reporting.markdown_table(header, rows)


def _head_timeout(result: dict[str, Any], name: str) -> str:
    setting = result["settings"].get("head_timeout_settings", {}).get(name)
    return f"`{setting}`" if setting else "none (its defaults)"


def slowloris_table(result: dict[str, Any]) -> str:
    """Rows = subjects: plaintext quiet and beside the slowloris connections; what they saw."""
    header = [
        "server",
        "head timeout setting",
        "quiet req/s",
        "quiet p50 / p99 / max ms",
        "slowloris req/s",
        "slowloris p50 / p99 / max ms",
        "p99 × quiet",
        "CPU µs/req quiet / slowloris",
        "cut / opened",
        "cut after median / max s",
        "still open",
    ]
    rows = []
    for name in result["subjects"]:
        c = _cell(result, name, "slowloris")
        if c is None:
            continue
        if "sl_rate" not in c:
            rows.append([name, _head_timeout(result, name), _status(c), *["—"] * 8])
            continue
        ratio = c.get("p99_ratio")
        rows.append(
            [
                name,
                _head_timeout(result, name),
                fmt_rate(c["rate"]),
                f"{_ms(c.get('p50_us'))} / {_ms(c.get('p99_us'))} / {_ms(c.get('max_us'))}",
                fmt_rate(c["sl_rate"]),
                f"{_ms(c.get('sl_p50_us'))} / {_ms(c.get('sl_p99_us'))} / "
                f"{_ms(c.get('sl_max_us'))}",
                "—" if ratio is None else f"{ratio:.2f}×",
                f"{fmt_us(c['cpu_us'])} / {fmt_us(c['sl_cpu_us'])}",
                f"{c['cut']:,g} / {c['opened']:,g}",
                f"{_s(c.get('close_median_s'))} / {_s(c.get('close_max_s'))}",
                f"{c['still_open']:,g}",
            ]
        )
    return reporting.markdown_table(header, rows)


# --------------------------------------------------------------------------- targets


def target_lines(result: dict[str, Any]) -> list[str]:
    """Each target of the issue, from this run: the figures, the ratio, met or not."""
    out = []
    for what, name, key, ref, limit in TARGETS:
        if key not in result["settings"]["scenarios"]:
            continue
        mine, other = _cell(result, name, key), _cell(result, ref, key)
        if not mine or not other or "cpu_us" not in mine or "cpu_us" not in other:
            why = "; ".join(
                f"{n}: {_status(c)}"
                for n, c in ((name, mine), (ref, other))
                if not c or "cpu_us" not in c
            )
            out.append(f"- {what} (CPU µs/request): not measured ({why})")
            continue
        ratio = mine["cpu_us"] / other["cpu_us"]
        verdict = "**met**" if ratio <= limit else "**not met**"
        out.append(
            f"- {what} (CPU µs/request): {fmt_us(mine['cpu_us'])} / {fmt_us(other['cpu_us'])} "
            f"= {ratio:.3f}× — {verdict}"
        )
    if "plaintext" in result["settings"]["scenarios"]:
        what, name, ref = P99_TARGET
        mine, other = _cell(result, name, "plaintext"), _cell(result, ref, "plaintext")
        if mine and other and mine.get("p99_us") and other.get("p99_us"):
            verdict = "**met**" if mine["p99_us"] <= other["p99_us"] else "**not met**"
            out.append(
                f"- {what} (plaintext, ASGI): {_ms(mine['p99_us'])} vs {_ms(other['p99_us'])} ms "
                f"— {verdict}"
            )
        else:
            out.append(f"- {what}: not measured")
    if "idle" in result["settings"]["scenarios"]:
        c = _cell(result, "ringloop-asgi", "idle")
        if c and "rss_per_conn" in c:
            kib = c["rss_per_conn"] / 1024
            verdict = "**met**" if kib <= IDLE_TARGET_KIB else "**not met**"
            out.append(
                f"- ≤ {IDLE_TARGET_KIB:g} KiB RSS per idle connection (ringloop-asgi): "
                f"{kib:.2f} KiB — {verdict}"
            )
        else:
            out.append(f"- ≤ {IDLE_TARGET_KIB:g} KiB RSS per idle connection: not measured")
    if "slowloris" in result["settings"]["scenarios"]:
        out.append(_slowloris_target(result))
    return out


def _slowloris_target(result: dict[str, Any]) -> str:
    """The load's p99 beside the slowloris connections over its quiet p99, and were all cut."""
    name, limit = SLOWLORIS_TARGET
    s = result["settings"]
    what = f"p99 under {s['slowloris_connections']:,} slowloris ≤ {limit:g}× quiet ({name})"
    c = _cell(result, name, "slowloris")
    if not c or c.get("p99_ratio") is None:
        return f"- {what}: not measured ({_status(c)})"
    cut, opened = c["cut"], c["opened"]
    verdict = "**met**" if c["p99_ratio"] <= limit and cut == opened > 0 else "**not met**"
    return (
        f"- {what}: {_ms(c['sl_p99_us'])} / {_ms(c['p99_us'])} ms = {c['p99_ratio']:.2f}×; "
        f"{cut:,g}/{opened:,g} cut, after {_s(c.get('close_median_s'))} s median "
        f"({_s(c.get('close_max_s'))} s max; head timeout {s['head_timeout']:g} s) — {verdict}"
    )


def notes(result: dict[str, Any]) -> list[str]:
    """What to read with caution: unavailable subjects, crashes, unsaturated runs."""
    out = []
    subjects = result["subjects"]
    for name, e in subjects.items():
        if any(c["status"] == "unavailable" for c in e["scenarios"].values()):
            out.append(f"- **{name}**: unavailable — {e['load_error']}")
    # reporting.run_notes knows crashes, skips, rebuilt packages and saturated clients.
    ran = {
        n: {
            **e,
            "scenarios": {k: c for k, c in e["scenarios"].items() if c["status"] != "unavailable"},
        }
        for n, e in subjects.items()
    }
    return out + _slowloris_notes(result) + reporting.run_notes(ran)


def _slowloris_notes(result: dict[str, Any]) -> list[str]:
    """Settings that are not a head timeout, and a slowloris client that fell behind."""
    out = [
        f"- **{name}** (slowloris): {note}; run with it set to the head timeout anyway"
        for name, note in result["settings"].get("head_timeout_notes", {}).items()
        if name in result["subjects"]
    ]
    for name in result["subjects"]:
        c = _cell(result, name, "slowloris") or {}
        late = max((r["slowloris"]["late_max_s"] for r in c.get("runs", [])), default=0.0)
        if late > 0.5:
            out.append(
                f"- **{name}** `slowloris`: the slowloris client sent a byte up to {late:.1f} s "
                "late (it shares CPU 1 with wrk): it trickled slower than one byte a second"
            )
    return out


def versions_line(result: dict[str, Any]) -> str:
    """ "Versions: granian 2.8.7 (uvloop 0.23.0), ..." from what the runs recorded."""
    seen: dict[str, str] = {}
    for e in result["subjects"].values():
        for run in (r for c in e["scenarios"].values() for r in c.get("runs", [])):
            seen.update({k: v for k, v in (run.get("versions") or {}).items() if v})
    for e in result["subjects"].values():
        for c in e["scenarios"].values():
            crash = c.get("crash") or {}
            seen.update({k: v for k, v in (crash.get("versions") or {}).items() if v})
    return "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + "."


# --------------------------------------------------------------------------- output


def console(result: dict[str, Any]) -> list[str]:
    """What the suite prints at the end of a run."""
    lines = []
    if _keys(result):
        lines += ["", "Server CPU µs per request (× c-floor's):", "", cpu_table(result)]
        lines += ["", "Requests/s, latency, memory:", "", rate_table(result)]
    if _keys(result, "idle"):
        lines += ["", "Idle keep-alive connections:", "", idle_table(result)]
    if _keys(result, "slowloris"):
        lines += ["", "Plaintext quiet and beside slowloris connections:", ""]
        lines += [slowloris_table(result)]
    if targets := target_lines(result):
        lines += ["", "Targets (this run):", *targets]
    return lines + notes(result)


def readme_section(result: dict[str, Any]) -> str:
    """The README block: method line, the tables, the targets, notes, charts."""
    m, s = result["machine"], result["settings"]
    parts = [
        reporting.measured_line(m)
        + f"{s['rounds']} round(s) × {s['duration']:g} s per run, median; server pinned to CPU "
        f"{s['server_cpu']}, wrk `-t1 -c{s['connections']}` to CPU {s['client_cpu']}"
        + (" (quick mode)" if s["quick"] else "")
        + ".",
        "",
        versions_line(result),
    ]
    if _keys(result):
        parts += [
            "",
            "**Server CPU µs per request** (the server's whole process tree, from /proc; lower "
            "is better), and in brackets that figure over the C floor's in the same scenario.",
            "",
            cpu_table(result),
            "",
            "**Requests/s, wrk's p50 / p99 latency** (n/a: pipelined, where wrk's percentiles "
            "are not measurements) **and the server's RSS after the plaintext load.**",
            "",
            rate_table(result),
        ]
    if _keys(result, "idle"):
        parts += [
            "",
            f"**{s['idle_connections']:,} idle keep-alive connections**, each having served "
            "one request: the server's RSS before and with them (kernel socket memory is not "
            "in RSS).",
            "",
            idle_table(result),
        ]
    if _keys(result, "slowloris"):
        parts += [
            "",
            f"**Plaintext beside {s['slowloris_connections']:,} slowloris connections** "
            "(each sends a request line, then one header byte a second, never ending its "
            f"head): wrk `-t1 -c{s['connections']}` for {s['slowloris_seconds']:g} s quiet, "
            "then again in the same server process once the slowloris connections are open; "
            f"each server is given a {s['head_timeout']:g} s head timeout where it has one. "
            "*Cut*: closed by the server; *cut after*: seconds from connect to that close.",
            "",
            slowloris_table(result),
        ]
    if targets := target_lines(result):
        parts += ["", "**Targets**, computed from this run:", "", *targets]
    if extra := notes(result):
        parts += ["", "Notes:", "", *extra]
    parts += ["", "![CPU per request](results/http_cpu.png) ![requests/s](results/http_rate.png)"]
    return "\n".join(parts)


# --------------------------------------------------------------------------- charts


def charts(result: dict[str, Any], outdir: Path) -> list[Path]:
    """http_cpu.png (CPU µs/request) and http_rate.png (requests/s): a panel per scenario.

    Horizontal bars, one per subject in its server's colour, each panel on its own scale:
    an upload costs a hundred times a plaintext request and would flatten it.
    """
    keys = _keys(result)
    if not keys:
        return []
    written = []
    tail = f"{result['machine']['cpu_model']}, Python {result['machine']['python']}"
    for field, what, filename in (
        ("cpu_us", "server CPU µs/request (lower is better)", "http_cpu.png"),
        ("rate", "requests/s (higher is better)", "http_rate.png"),
    ):
        written.append(_chart(result, keys, field, what, outdir / filename, tail))
    return written


def _chart(
    result: dict[str, Any], keys: list[str], field: str, what: str, path: Path, tail: str
) -> Path:
    return reporting.scenario_panels(
        result,
        keys,
        field,
        f"{what}: server on CPU 0, wrk -t1 -c64 on CPU 1 ({tail})",
        path,
        cell=lambda name, key: _cell(result, name, key),
        colour=lambda name: COLOURS.get(_server(name), "#333333"),
        status=_status,
        label=lambda key: _label(result, key),
    )
