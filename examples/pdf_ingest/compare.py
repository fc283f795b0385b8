"""Run the load tool against four configurations side by side and write the results:
{blocking, async} endpoint x {uvicorn (uvloop + httptools), `ringloop serve`}, 1 worker each.

    python examples/pdf_ingest/compare.py [--concurrency 100 1000] [--requests-per-conn 3]
                                          [--out examples/pdf_ingest/results]

For each server it starts a fresh S3 server (moto) and the app, sends a short warm-up, then
the load for each endpoint and concurrency, and stops both. Writes `pdf_ingest.json` (every
latency), `pdf_ingest.md` (the table) and `pdf_ingest_latency.png` (latency CDF per
configuration, one panel per concurrency), and prints the table.

Pinning on a 2-core machine: the app server on CPU 0; the S3 server and this process (the
load client) on CPU 1. The server under test then has a core to itself, and what it does
with that core (block or overlap the S3 round trips with extraction) is what is measured.
With more cores, the server gets CPU 0 and the others share the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from load_test import format_summary, load  # noqa: E402
from s3_server import S3Server  # noqa: E402
from samples import make_pdf  # noqa: E402
from servers import KINDS, AppServer  # noqa: E402

ENDPOINTS = ("blocking", "async")
SERVER_LABEL = {"uvicorn": "uvicorn (uvloop+httptools)", "ringloop": "ringloop serve"}


def cpu_plan() -> tuple[set[int] | None, set[int] | None]:
    """(CPUs for the app server, CPUs for S3 + the client), or (None, None) on one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


def proc_cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(
    concurrencies: list[int],
    per_conn: int,
    min_requests: int,
    pdf: bytes,
    servers: tuple[str, ...] = KINDS,
    extra: dict[str, list[str]] | None = None,
    log=print,
    logs: dict[str, str] | None = None,
) -> list[dict]:
    """Load every endpoint of every server in `servers` at each concurrency; one row per run.
    `extra` adds command-line flags per server kind; `logs` receives each server's log."""

    server_cpus, other_cpus = cpu_plan()
    if other_cpus:
        os.sched_setaffinity(0, other_cpus)
    rows = []
    for kind in servers:
        with S3Server(cpus=other_cpus) as s3:
            with AppServer(kind, s3.env(), cpus=server_cpus, extra=(extra or {}).get(kind)) as app:
                for endpoint in ENDPOINTS:
                    url = app.url(f"/ingest/{endpoint}")
                    load(url, pdf, 8, 16)  # warm-up: executor threads, connection pools
                    for c in concurrencies:
                        n = max(min_requests, c * per_conn)
                        cpu0 = proc_cpu_seconds(app.proc.pid)
                        result = load(url, pdf, c, n)
                        cpu = proc_cpu_seconds(app.proc.pid) - cpu0
                        s = result.summary()
                        log(f"{SERVER_LABEL[kind]:28} {format_summary(s)}")
                        rows.append(
                            {
                                "server": kind,
                                "endpoint": endpoint,
                                **s,
                                "server_cpu_ms_per_request": round(1000 * cpu / max(1, s["ok"]), 1),
                                "latencies_ms": result.latencies_ms,
                            }
                        )
                        time.sleep(0.5)
                app_log = app.log_text()
            if logs is not None:
                logs[kind] = app_log
            elif app_log.strip():
                log(f"--- {kind} log ---\n{app_log[-2000:]}")
    return rows


def find(rows: list[dict], server: str, endpoint: str, c: int) -> dict | None:
    return next(
        (
            r
            for r in rows
            if r["server"] == server and r["endpoint"] == endpoint and r["concurrency"] == c
        ),
        None,
    )


def table(rows: list[dict]) -> str:
    """The markdown table: one line per configuration, then the story's ratios."""
    out = [
        "| concurrency | server | endpoint | requests | errors | req/s | p50 ms | p95 ms | p99 ms | server CPU ms/req |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        errors = sum(r["errors"].values())
        out.append(
            f"| {r['concurrency']} | {SERVER_LABEL[r['server']]} | {r['endpoint']} | "
            f"{r['ok']}/{r['requests']} | {errors} | {r['throughput_rps']:.1f} | "
            f"{r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['p99_ms']:.0f} | "
            f"{r['server_cpu_ms_per_request']:.1f} |"
        )
    lines = ["\n".join(out), ""]
    for c in sorted({r["concurrency"] for r in rows}):
        for kind in KINDS:
            blocking, fixed = find(rows, kind, "blocking", c), find(rows, kind, "async", c)
            if blocking and fixed and blocking["throughput_rps"] and blocking["p99_ms"]:
                lines.append(
                    f"- {c} concurrent, {SERVER_LABEL[kind]}, async vs blocking: throughput "
                    f"{fixed['throughput_rps'] / blocking['throughput_rps']:.2f}x, p99 "
                    f"{fixed['p99_ms'] / blocking['p99_ms']:.2f}x"
                )
        base = find(rows, "uvicorn", "blocking", c)
        fixed_uv = find(rows, "uvicorn", "async", c)
        fixed_rl = find(rows, "ringloop", "async", c)
        if not base:
            continue
        for label, other in (("async on ringloop serve", fixed_rl),):
            if other and base["throughput_rps"] and base["p99_ms"]:
                lines.append(
                    f"- {c} concurrent, {label} vs blocking on uvicorn: throughput "
                    f"{other['throughput_rps'] / base['throughput_rps']:.2f}x, p99 "
                    f"{other['p99_ms'] / base['p99_ms']:.2f}x"
                )
        if fixed_uv and fixed_rl and fixed_uv["throughput_rps"]:
            lines.append(
                f"- {c} concurrent, async on ringloop serve vs async on uvicorn: throughput "
                f"{fixed_rl['throughput_rps'] / fixed_uv['throughput_rps']:.2f}x, p99 "
                f"{fixed_rl['p99_ms'] / fixed_uv['p99_ms']:.2f}x"
            )
    return "\n".join(lines) + "\n"


def chart(rows: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["concurrency"] for r in rows})
    fig, axes = plt.subplots(1, len(levels), figsize=(6.5 * len(levels), 4.5), squeeze=False)
    styles = {"blocking": "--", "async": "-"}
    colors = {"uvicorn": "tab:orange", "ringloop": "tab:blue"}
    for ax, c in zip(axes[0], levels, strict=True):
        for r in (r for r in rows if r["concurrency"] == c):
            lat = sorted(r["latencies_ms"])
            if not lat:
                continue
            ys = [(i + 1) / len(lat) for i in range(len(lat))]
            ax.plot(
                [v / 1000 for v in lat],
                ys,
                styles[r["endpoint"]],
                color=colors[r["server"]],
                label=f"{r['endpoint']} / {SERVER_LABEL[r['server']]}",
            )
        ax.set_title(f"{c} concurrent uploads")
        ax.set_xlabel("latency (s)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("PDF ingest: latency CDF per configuration (1 worker, server pinned to 1 core)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[100, 1000])
    ap.add_argument(
        "--requests-per-conn", type=int, default=3, help="requests = this x concurrency"
    )
    ap.add_argument("--min-requests", type=int, default=1000, help="at least this many requests")
    ap.add_argument("--servers", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    ap.add_argument(
        "--timeout-keep-alive",
        type=int,
        default=None,
        metavar="S",
        help="pass --timeout-keep-alive S to both servers (default: their own, 5 s)",
    )
    args = ap.parse_args(argv)
    if min(args.concurrency) < 1 or args.requests_per_conn < 1:
        ap.error("--concurrency and --requests-per-conn must be at least 1")
    pdf = make_pdf()
    keep_alive = args.timeout_keep_alive
    flags = [] if keep_alive is None else ["--timeout-keep-alive", str(keep_alive)]
    extra = {kind: flags for kind in KINDS}
    rows = run(
        args.concurrency, args.requests_per_conn, args.min_requests, pdf, tuple(args.servers), extra
    )
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "pinning": "app server on CPU 0; S3 server and load client on the others",
        "pdf_bytes": len(pdf),
        "server_flags": flags,
    }
    (args.out / "pdf_ingest.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    md = table(rows)
    (args.out / "pdf_ingest.md").write_text(md)
    chart(rows, args.out / "pdf_ingest_latency.png")
    print()
    print(md)
    print(f"wrote {args.out}/pdf_ingest.json, pdf_ingest.md, pdf_ingest_latency.png")


if __name__ == "__main__":
    main()
