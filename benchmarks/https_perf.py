"""Where a full TLS handshake's CPU time goes, per server: perf's timer samples by library.

The VM has no hardware counters, so this samples time, not cycles: ``perf record -e
cpu-clock`` (a software timer, user and kernel, call chains for the kernel's frames) on the
server's process tree while ``openssl s_time -new`` (``https_suite.handshakes``: a full
handshake and one request per connection) runs against it, the server pinned to CPU 0 and
the client to CPU 1 as in the suite. Each sample is put in one component by the library it
landed in (and, in the binaries that link rustls and aws-lc statically, by the symbol's
name); the component's share of the samples times the server's CPU per handshake over the
same window (from /proc, split user/system) is its µs per handshake. Kernel samples are put
in the system call (or io_uring operation, page fault, interrupt) they happened under.
Needs perf, and root or ``kernel.perf_event_paranoid`` ≤ 1 to attach to the server (kernel
symbols: ``kernel.kptr_restrict`` 0).

    .venv/bin/python benchmarks/https_perf.py [--subjects ringloop-asgi rust-floor granian-asgi]
        [--key ecdsa] [--seconds 8] [--freq 5000] [--rounds 2] [--top 15]

``misses DIR`` reads instead the callgrind files ``https_callgrind.py --keep DIR
--valgrind-flag=--cache-sim=yes`` kept, and prints per handshake (handshake run minus the
baseline run, over ``--handshakes``) the instructions and the simulated I1/D1/LL misses by
the same components:

    .venv/bin/python benchmarks/https_perf.py misses DIR [--handshakes 60]

Output: ``results/https_perf.json`` (or ``--name``) and tables.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import https_suite  # noqa: E402
import tools  # noqa: E402

RESULTS = harness.BENCH_DIR / "results" / "https_perf.json"
# The binaries with rustls and aws-lc linked in: their samples are split by symbol.
STATIC_TLS = ("_core.cpython", "tls_floor")
# Kernel frames that say nothing of what the work was: skipped from the outside in.
GENERIC = re.compile(
    r"^(entry_|do_syscall_64|x64_sys_call|__x64_sys_io_uring_enter|__do_sys_io_uring_enter|"
    r"io_submit_sqes|_*io_issue_sqe|io_queue_sqe|io_uring_|syscall_exit|exit_to_user_mode|"
    r"task_work_run|tctx_task_work|io_handle_tw_list|__io_run_local_work|io_run_task_work|"
    r"io_cqring_wait|\[unknown\])"
)


def component(dso: str, sym: str) -> str:
    """The component a sample (or a callgrind function) belongs to."""
    if "kernel" in dso or dso.startswith("[k"):
        return "kernel"
    name = dso.rsplit("/", 1)[-1]
    if "libpython" in name or name.startswith("python3") or "lib-dynload" in dso:
        return "CPython"
    if name.startswith(("libc.so", "libc-")):
        return "libc"
    if name.startswith("ld-linux"):
        return "ld.so"
    if "_granian" in name:
        return "granian .so (stripped)"
    if any(s in name for s in STATIC_TLS):
        if "rustls::" in sym:
            return "rustls"
        if "aws_lc_rs::" in sym or ("::" not in sym and not sym.startswith(("[", "0x", "<"))):
            return "aws-lc"
        return "server (Rust)" if "tls_floor" in name else "ringloop _core (Rust)"
    return "other" if name not in ("[unknown]", "") else "unknown"


def kernel_op(frames: list[tuple[str, str]]) -> str:
    """What a kernel sample was doing: the outermost frame that is not entry or io_uring
    plumbing (its system call, io_uring operation, page fault or interrupt)."""
    kernel = [s for s, d in frames if "kernel" in d]
    for sym in reversed(kernel):
        if not GENERIC.match(sym):
            return sym
    return kernel[0] if kernel else "?"


def parse_script(text: str) -> list[list[tuple[str, str]]]:
    """``perf script -F ip,sym,dso`` with call chains: one list of (symbol, dso) per sample,
    the leaf first."""
    samples: list[list[tuple[str, str]]] = []
    cur: list[tuple[str, str]] = []
    frame = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")
    for ln in text.splitlines():
        m = frame.match(ln)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            cur.append((sym, m.group(2)))
        elif not ln.strip() and cur:
            samples.append(cur)
            cur = []
    if cur:
        samples.append(cur)
    return samples


def tree_user_sys(pid: int) -> tuple[int, int]:
    """User and system clock ticks of `pid` and its descendants (threads included)."""
    user = system = 0
    for p in [pid, *harness.descendants(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return user, system


def profile(subject: str, cert: Path, key: Path, work: Path, args: Any) -> dict[str, Any]:
    srv = https_suite.start(subject, cert, key, work)
    try:
        pids = ",".join(str(p) for p in [srv.pid, *harness.descendants(srv.pid)])
        data = work / "perf.data"
        rec = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.freq), "-g"]
            + ["-p", pids, "-o", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # perf attaches; no handshake runs before the window opens anyway
        u0, s0 = tree_user_sys(srv.pid)
        if args.scenario == "keep-alive":
            res = https_suite.keep_alive(args.wrk, srv, args.seconds)
        else:
            res = https_suite.handshakes(srv, args.seconds)
        u1, s1 = tree_user_sys(srv.pid)
        rec.send_signal(signal.SIGINT)  # our own child: perf writes its file and exits
        rec.wait(timeout=120)
    finally:
        srv.stop()
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym,dso"],
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    samples = parse_script(script)
    n = res["requests"] or 1
    tick = 1e6 / harness.os.sysconf("SC_CLK_TCK")
    user_us, sys_us = (u1 - u0) * tick / n, (s1 - s0) * tick / n
    total_us = user_us + sys_us
    comps: collections.Counter[str] = collections.Counter()
    syms: collections.Counter[str] = collections.Counter()
    kops: collections.Counter[str] = collections.Counter()
    for frames in samples:
        sym, dso = frames[0]
        c = component(dso, sym)
        comps[c] += 1
        syms[f"{sym} [{c}]"] += 1
        if c == "kernel":
            kops[kernel_op(frames)] += 1
    k = len(samples) or 1

    def per_hs(counter: collections.Counter[str], top: int | None = None) -> dict[str, float]:
        return {name: round(v / k * total_us, 1) for name, v in counter.most_common(top)}

    return {
        "subject": subject,
        "count": res["requests"],
        "rate": res["rate"],
        "samples": len(samples),
        "sampled_cpu_s": round(len(samples) / args.freq, 2),
        "proc_cpu_s": round(total_us * n / 1e6, 2),
        "user_us": round(user_us, 1),
        "system_us": round(sys_us, 1),
        "components_us": per_hs(comps),
        "top_symbols_us": per_hs(syms, args.top),
        "kernel_ops_us": per_hs(kops, args.top),
    }


def print_profile(r: dict[str, Any]) -> None:
    print(
        f"\n## {r['subject']}: {r['count']} {r['scenario']}s ({r['rate'] or 0:.0f}/s), "
        f"{r['user_us']} user + {r['system_us']} system µs each; {r['samples']} samples "
        f"({r['sampled_cpu_s']} s sampled, {r['proc_cpu_s']} s by /proc)"
    )
    for title, key in (
        ("component", "components_us"),
        ("symbol", "top_symbols_us"),
        ("kernel, by operation", "kernel_ops_us"),
    ):
        print(f"  by {title} (µs per {r['scenario']}):")
        for name, us in r[key].items():
            print(f"    {us:8.1f}  {name}")


# ---- callgrind --cache-sim files, by component -------------------------------------------


def callgrind_self_costs(path: Path) -> tuple[list[str], dict[str, list[int]]]:
    """The events and each component's own (exclusive) costs in one callgrind file."""
    events: list[str] = []
    names: dict[tuple[str, str], str] = {}
    totals: dict[str, list[int]] = {}
    ob = fn = ""
    skip_next = False
    compressed = re.compile(r"^\((\d+)\)(?:\s+(.*))?$")

    def name_of(kind: str, value: str) -> str:
        m = compressed.match(value)
        if not m:
            return value
        if m.group(2) is not None:
            names[(kind, m.group(1))] = m.group(2)
        return names.get((kind, m.group(1)), value)

    for ln in path.read_text(errors="replace").splitlines():
        if ln.startswith("events:"):
            events = ln.split()[1:]
        elif ln.startswith("ob="):
            ob = name_of("ob", ln[3:])
        elif ln.startswith("fn="):
            fn = name_of("fn", ln[3:])
        elif ln.startswith(("cob=",)):
            name_of("ob", ln[4:])
        elif ln.startswith("cfn="):
            name_of("fn", ln[4:])
        elif ln.startswith("calls="):
            skip_next = True  # the next cost line is the call's inclusive cost
        elif ln[:1].isdigit() or ln[:1] in "+-*":
            if skip_next:
                skip_next = False
                continue
            costs = [int(x) for x in ln.split()[1:]]
            acc = totals.setdefault(component(ob, fn), [0] * len(events))
            for i, c in enumerate(costs):
                acc[i] += c
    return events, totals


def run_costs(run_dir: Path) -> tuple[list[str], dict[str, list[int]]]:
    events: list[str] = []
    total: dict[str, list[int]] = {}
    for f in run_dir.glob("callgrind.out.*"):
        ev, costs = callgrind_self_costs(f)
        events = events or ev
        for c, v in costs.items():
            acc = total.setdefault(c, [0] * len(ev))
            for i, x in enumerate(v):
                acc[i] += x
    return events, total


def misses(
    keep: Path, handshakes: int, run_name: str = "handshake", counts: dict[str, int] | None = None
) -> dict[str, Any]:
    """Per unit (handshake or request) of each kept subject: its run minus its baseline, by
    component. ``counts``: units per subject (``{subject}-{key}``) where they differ."""
    out: dict[str, Any] = {}
    for base_dir in sorted(keep.glob("*-baseline")):
        stem = base_dir.name.removesuffix("-baseline")
        hs_dir = keep / f"{stem}-{run_name}"
        if not hs_dir.is_dir():
            continue
        events, base = run_costs(base_dir)
        _, run = run_costs(hs_dir)
        rows = {}
        for c in sorted(set(base) | set(run)):
            b, r = base.get(c, [0] * len(events)), run.get(c, [0] * len(events))
            units = (counts or {}).get(stem, handshakes)
            per = {e: round((r[i] - b[i]) / units) for i, e in enumerate(events)}
            rows[c] = per
        rows["total"] = {e: sum(v[e] for v in rows.values()) for e in events}
        out[stem] = rows
    return out


def print_misses(table: dict[str, Any], unit: str = "handshake") -> None:
    for stem, rows in table.items():
        print(f"\n## {stem}: per {unit}")
        print("| component | Ir | I1 misses | D1 misses | LL misses | D1 miss / 1k Ir |")
        print("|---|---:|---:|---:|---:|---:|")
        for c, e in sorted(rows.items(), key=lambda kv: -kv[1].get("Ir", 0)):
            d1 = e.get("D1mr", 0) + e.get("D1mw", 0)
            ll = e.get("ILmr", 0) + e.get("DLmr", 0) + e.get("DLmw", 0)
            rate = 1000 * d1 / e["Ir"] if e.get("Ir") else 0
            print(f"| {c} | {e['Ir']:,} | {e.get('I1mr', 0):,} | {d1:,} | {ll:,} | {rate:.1f} |")


def main(argv: list[str]) -> int:
    if argv[:1] == ["misses"]:
        p = argparse.ArgumentParser(prog="https_perf.py misses")
        p.add_argument("keep", type=Path)
        p.add_argument("--handshakes", type=int, default=60, help="or requests, with --run")
        p.add_argument("--run", default="handshake", choices=("handshake", "keep-alive"))
        p.add_argument(
            "--counts-from",
            type=Path,
            help="https_callgrind.py's JSON of the run: each subject's handshakes from it "
            "(with --s-time they differ)",
        )
        p.add_argument("--name", default="https_misses.json")
        a = p.parse_args(argv[1:])
        counts = None
        if a.counts_from:
            rows = json.loads(a.counts_from.read_text())["rows"]
            counts = {f"{r['subject']}-{r['key']}": r["handshake"]["units"] for r in rows}
        table = misses(a.keep, a.handshakes, a.run, counts)
        print_misses(table, "request" if a.run == "keep-alive" else "handshake")
        (RESULTS.parent / a.name).write_text(json.dumps(table, indent=1) + "\n")
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--subjects", nargs="+", default=["ringloop-asgi", "rust-floor", "granian-asgi"])
    p.add_argument("--key", default="ecdsa", choices=https_suite.KEYS)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--freq", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--top", type=int, default=15)
    p.add_argument(
        "--scenario",
        default="handshake",
        choices=("handshake", "keep-alive"),
        help="keep-alive: wrk, 64 connections (µs per request; for time per instruction of "
        "code that stays warm)",
    )
    p.add_argument("--name", default=RESULTS.name)
    args = p.parse_args(argv)
    if shutil.which("perf") is None:
        print("https_perf: no perf on PATH (Debian: apt-get install linux-perf)")
        return 1
    args.wrk, why = tools.ensure_wrk() if args.scenario == "keep-alive" else (None, None)
    if args.scenario == "keep-alive" and args.wrk is None:
        print(f"https_perf: {why}")
        return 1
    results = []
    with tempfile.TemporaryDirectory(prefix="ringloop-https-perf-") as tmp:
        work = Path(tmp)
        cert, key = https_suite.make_keys(work)[args.key]
        for r in range(args.rounds):
            for subject in args.subjects:
                sw = work / f"{subject}-{r}"
                sw.mkdir()
                load = Path("/proc/loadavg").read_text().split()[0]
                res = profile(subject, cert, key, sw, args)
                res.update(round=r, scenario=args.scenario, load_before=float(load))
                res["load_after"] = float(Path("/proc/loadavg").read_text().split()[0])
                print_profile(res)
                results.append(res)
    (RESULTS.parent / args.name).write_text(
        json.dumps({"machine": harness.machine_info(), "key": args.key, "runs": results}, indent=1)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
