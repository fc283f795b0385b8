"""What the suites publish: results JSON, Markdown tables, README sections, charts, notes.

The pieces every suite renders the same way, so that two suites' tables, charts and
README sections look alike and a new suite does not write them again:

* **where results go** (``add_output_args``, ``output_choice``, ``publish``): ``--out`` and
  ``--readme``; the JSON first (a chart or a table that fails must not cost the numbers),
  then the charts, the console report, the README section and the "wrote" line;
* **files** (``write_json_atomically``, ``update_readme_section``, ``write_section``): an
  interrupted run leaves the old JSON, a README without the markers is never clobbered;
* **text** (``markdown_table``, ``fmt_us``, ``fmt_rate``, ``measured_line``, ``loops_line``):
  one number format and one header line for every table;
* **notes** (``run_notes``): crashes, skips, loop errors and unsaturated runs of a result
  shaped ``loops -> name -> scenarios -> key -> cell``, the lines under a table;
* **charts** (``pyplot``, ``COLOURS``, ``grouped_bars``, ``legend_handles``,
  ``save_figure``): grouped bars, one colour per loop in every chart.

What each suite's tables contain stays with the suite. This module renders; it starts no
process and imports nothing of the other benchmark modules.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_DIR = RESULTS_DIR / "quick"
README = RESULTS_DIR.parent / "README.md"

# --------------------------------------------------------------------------- where results go


def add_output_args(parser: argparse.ArgumentParser, quick_dir: Path | None = QUICK_DIR) -> None:
    """`--readme/--no-readme` and `--out`, the same for every suite.

    ``quick_dir`` is where ``--quick`` writes by default (None: the same place as a full
    run); ``output_choice`` reads it back from the parsed arguments.
    """
    parser.add_argument(
        "--readme",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rewrite the README table (default: yes for full runs, no for --quick)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results directory (default: results/"
        + (", or results/quick/ for --quick)" if quick_dir is not None else ")"),
    )
    parser.set_defaults(quick_dir=quick_dir)


def output_choice(args: argparse.Namespace) -> tuple[Path, bool]:
    """(results directory, rewrite the README?) from ``--out``, ``--readme`` and ``--quick``."""
    # A demo (--quick) must not replace the committed full-run figures the README shows.
    out_dir = args.out or (args.quick_dir if args.quick and args.quick_dir else RESULTS_DIR)
    update_readme = (not args.quick) if args.readme is None else args.readme
    return out_dir, update_readme


def publish(
    result: dict[str, Any],
    out_dir: Path,
    json_name: str,
    console: Callable[[dict[str, Any]], list[str]],
    *,
    charts: Callable[[dict[str, Any], Path], list[Path]] | None = None,
    section: str | None = None,
    readme_body: Callable[[dict[str, Any]], str] | None = None,
) -> list[Path]:
    """Write a suite's results and report them; returns the files written.

    In this order, each step after the JSON allowed to fail without losing the ones
    before: the JSON, the charts (a failure is reported on stderr), the ``console`` lines,
    the README section ``section`` (when given) with ``readme_body``, and the line saying
    how long the run took (``result["settings"]["seconds"]``) and what it wrote.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / json_name
    write_json_atomically(json_path, result)
    written = [json_path]
    if charts is not None:
        try:
            written += charts(result, out_dir)
        except Exception as exc:  # a chart must not cost us the numbers
            print(f"charts skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    for line in console(result):
        print(line)
    if (
        section is not None
        and readme_body is not None
        and write_section(section, readme_body(result))
    ):
        written.append(README)
    print(f"\n{result['settings']['seconds']}s; wrote " + ", ".join(str(p) for p in written))
    return written


# --------------------------------------------------------------------------- files


def write_json_atomically(path: Path, obj: Any) -> None:
    """Write JSON through a temporary file so an interrupted run leaves the old file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    tmp.replace(path)


def write_section(name: str, body: str) -> bool:
    """``update_readme_section`` on our README, saying on stderr when the markers are missing."""
    if update_readme_section(name, body):
        return True
    print(f"README.md has no {name} markers; table not written there", file=sys.stderr)
    return False


def update_readme_section(name: str, body: str, readme: Path = README) -> bool:
    """Replace the text between ``<!-- name:begin -->`` and ``<!-- name:end -->``.

    Returns False (and leaves the file alone) when the markers are missing, so a README
    rewritten by hand is never clobbered.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    try:
        text = readme.read_text()
    except OSError:
        return False
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        return False
    new = pattern.sub(lambda _m: f"{begin}\n{body.rstrip()}\n{end}", text, count=1)
    if new != text:
        readme.write_text(new)
    return True


# --------------------------------------------------------------------------- text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table: the header, its separator, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def fmt_us(us: float) -> str:
    """Microseconds to three significant digits, whole numbers from 100 up."""
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def fmt_rate(rate: float) -> str:
    """Operations per second, in thousands ("12.3k") from 1000 up."""
    return f"{rate / 1000:.1f}k" if rate >= 1000 else f"{rate:.0f}"


def measured_line(machine: dict[str, Any]) -> str:
    """The start of a README section: when, at which commit, on what machine and Python.

    The suite goes on with its own settings after the "; ".
    """
    m = machine
    return (
        f"Measured {m['timestamp']} at commit `{m['git_commit']}`: {m['cpu_model']}, "
        f"{m['cpu_count']} CPUs, Linux {m['kernel']}, Python {m['python']}; "
    )


def loops_line(entries: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """ "Loops: name version [backend], ..." for the (name, JSON entry) pairs given."""
    described = ", ".join(
        f"{name} {e['version'] or '?'}" + (f" [{e['backend']}]" if e["backend"] else "")
        for name, e in entries
    )
    return f"Loops: {described}."


# --------------------------------------------------------------------------- notes


def cell(loops: dict[str, Any], name: str, key: str) -> dict[str, Any] | None:
    """The result of loop ``name`` in scenario ``key``, if it was run."""
    return loops.get(name, {}).get("scenarios", {}).get(key)


def run_notes(loops: dict[str, Any]) -> list[str]:
    """The notes under a table of loaded runs: what to read with caution, and why.

    For results shaped ``{name: {"package_mtimes": [...], "scenarios": {key: cell}}}``
    where a cell has a ``status`` ("ok", "crash", "skipped"), an ``error``, its ``runs``
    and, when measured, the medians ``rate``, ``server_busy`` and ``client_busy``. Notes:
    skipped scenarios, servers mostly idle, a package rebuilt during the run, crashes,
    errors passed to the loop's exception handler, and runs where the load generator,
    not the server, was the bottleneck.
    """
    out = []
    cells = [c for e in loops.values() for c in e["scenarios"].values()]
    skips = {c["error"] for c in cells if c["status"] == "skipped"}
    out += [f"- skipped: {why}" for why in sorted(skips)]
    busy = [c["server_busy"] for c in cells if "server_busy" in c]
    if busy and statistics.median(busy) < 0.7:
        out.append(
            f"- servers were busy only {statistics.median(busy):.0%} of the time (median; a "
            "saturated server is near 100%): other work competed for the CPUs or the load "
            "generator fell behind, so the rates say little; compare the CPU µs per operation"
        )
    for name, e in loops.items():
        if len(e["package_mtimes"]) > 1:
            out.append(
                f"- **{name}**: its package was modified during the run (newest file at "
                f"{', '.join(e['package_mtimes'])}): the rounds did not all measure the same build"
            )
    for name, e in loops.items():
        for key, c in e["scenarios"].items():
            if c["status"] == "crash":
                out.append(f"- **{name}** `{key}`: crash — {c['error']}")
                continue
            if c["status"] != "ok" or "rate" not in c:
                continue
            errs = sum(r.get("loop_errors") or 0 for r in c["runs"])
            if errs:
                out.append(
                    f"- **{name}** `{key}`: {errs} errors passed to the loop's exception handler"
                )
            if c["server_busy"] < 0.85 and c["client_busy"] > 0.9:
                out.append(
                    f"- **{name}** `{key}`: load generator saturated (server busy "
                    f"{c['server_busy']:.0%}): the rate is the client's, the CPU µs/op still holds"
                )
    return out


# --------------------------------------------------------------------------- charts

# One colour per loop, shared by every suite's charts so a loop looks the same everywhere.
COLOURS = {
    "asyncio": "#7f7f7f",
    "uvloop": "#2ca02c",
    "rloop": "#9467bd",
    "uringcore": "#ff7f0e",
    "ringloop-io_uring": "#d62728",
    "ringloop-epoll": "#1f77b4",
    "c-floor": "#3b3b3b",  # transports.py's HTTP responder in C: the kernel's share
}


def pyplot() -> Any:
    """matplotlib.pyplot on the headless backend: the runner never opens a window.

    Imported here, when a chart is drawn, so a suite runs (and writes its JSON) without
    matplotlib installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(
    ax: Any,
    names: list[str],
    keys: list[str],
    value: Callable[[str, str], float | None],
    status: Callable[[str, str], str | None] | None = None,
) -> None:
    """One group of bars per key, one bar per name in its colour, labelled with the name.

    Where ``value`` has nothing and ``status`` names why (say "crash"), that word is
    written where the bar would stand, so nobody reads a missing bar as a tiny one. Sets
    the tick positions (one per key) and the grid; the labels are the caller's.
    """
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, key in enumerate(keys):
            x = j - 0.4 + width * (i + 0.5)
            v = value(name, key)
            if v is not None:
                xs.append(x)
                ys.append(v)
            elif status is not None and (why := status(name, key)):
                # x in data, y in axes coordinates: the label sits on the floor in log scale too
                ax.text(
                    x,
                    0.02,
                    why,
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize="x-small",
                    color="#aa0000",
                    transform=ax.get_xaxis_transform(),
                )
        ax.bar(xs, ys, width, label=name, color=COLOURS.get(name))
    ax.set_xticks(range(len(keys)))
    ax.grid(axis="y", which="both", alpha=0.3)


def scenario_panels(
    result: dict[str, Any],
    keys: list[str],
    field: str,
    title: str,
    path: Path,
    *,
    cell: Callable[[str, str], dict[str, Any] | None],
    colour: Callable[[str], str],
    status: Callable[[dict[str, Any]], str],
    label: Callable[[str], str],
    size: tuple[float, float, float] = (3.6, 0.32, 1.5),
    headroom: float = 1.3,
    log_spread: float | None = None,
) -> Path:
    """A panel per scenario (``keys``), a horizontal bar per subject in its ``colour``,
    labelled with its value (``field``: ``cpu_us`` in µs, else a rate); a subject measured but
    without a value shows its ``status`` where the bar would stand, so nobody reads a
    missing bar as a tiny one. ``size``: inches per panel, per subject, and of margin;
    ``log_spread``: a panel whose largest value is more than that many times its smallest
    gets a log axis (the others would be slivers). The suites' CPU and rate charts."""
    plt = pyplot()
    names = list(result["subjects"])
    per_panel, per_row, margin = size
    fig, axes = plt.subplots(
        1, len(keys), figsize=(per_panel * len(keys) + margin, per_row * len(names) + 2)
    )
    axes = axes if len(keys) > 1 else [axes]
    for col, key in enumerate(keys):
        ax = axes[col]
        ys = list(range(len(names)))[::-1]
        values = [(cell(n, key) or {}).get(field) for n in names]
        top = max((v for v in values if v is not None), default=1.0)
        for y, name, value in zip(ys, names, values, strict=True):
            if value is not None:
                ax.barh(y, value, color=colour(name))
                shown = fmt_us(value) if field == "cpu_us" else fmt_rate(value)
                ax.text(value, y, f" {shown}", va="center", fontsize="x-small")
            elif (c := cell(name, key)) is not None:
                ax.text(0, y, f" {status(c)}", va="center", fontsize="x-small", color="#aa0000")
        low = min((v for v in values if v), default=top)
        if log_spread is not None and top > log_spread * low:
            ax.set_xscale("log")
            ax.set_xlim(low / 2, top * 3)
            ax.set_title(f"{label(key)} (log scale)", fontsize="medium")
        else:
            ax.set_xlim(0, top * headroom)
            ax.set_title(label(key), fontsize="medium")
        ax.set_yticks(ys)
        ax.set_yticklabels(names if col == 0 else [""] * len(names), fontsize="small")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return save_figure(fig, path)


def legend_handles(names: Iterable[str]) -> list[Any]:
    """Legend entries in the loops' colours, for a legend outside the panels."""
    from matplotlib.patches import Patch

    return [Patch(color=COLOURS.get(name, "#333333"), label=name) for name in names]


def save_figure(fig: Any, path: Path) -> Path:
    """Save ``fig`` as a PNG at the resolution every chart uses, and free it."""
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path
