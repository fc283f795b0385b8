"""What the server suites (``http_suite``, ``ws_suite``, ``h2_suite``) do alike around their
workloads: the command line, which subjects can run here, the rounds, the result and its
publication; and the self-signed certificates of the TLS rows (``https_suite`` too).

A server suite measures subjects (servers, one per row) in scenarios (each with a ``key``
and a ``label``) with ``rounds.run_rounds``, keeps the medians with
``rounds.summarise_rounds`` and publishes through ``reporting.publish`` with its report
module's ``console``, ``charts``, ``readme_section`` and ``brief``. Its workload, its
servers and its own settings stay in the suite; what is written here is written once so
that the suites' flags, JSON and exit status cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import harness
import reporting
from rounds import run_rounds, summarise_rounds

# The server and its load on the two cores of this machine, never sharing one.
SERVER_CPU = 0
CLIENT_CPU = 1
STATISTIC = "median of rounds; one server process per run"
TREE_CPU = "/proc/PID/stat utime+stime (+ reaped children) of the server's whole process tree"


class Report(Protocol):
    """A suite's report module (``http_report``, ``ws_report``, ``h2_report``)."""

    def console(self, result: dict[str, Any]) -> list[str]: ...

    def charts(self, result: dict[str, Any], outdir: Path) -> list[Path]: ...

    def readme_section(self, result: dict[str, Any]) -> str: ...

    def brief(self, run: dict[str, Any]) -> str: ...


# --------------------------------------------------------------------------- the command line


def parser(
    prog: str,
    doc: str | None,
    subjects: Iterable[str],
    scenarios: Iterable[str],
    *,
    quick_help: str,
    duration_help: str,
    own: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """The flags every server suite takes, described by the first line of the suite's ``doc``;
    ``own`` adds the suite's own after ``--duration`` (so ``--help`` lists them beside the
    other load settings, before pinning and output)."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--subjects", nargs="+", default=None, choices=list(subjects))
    p.add_argument("--scenarios", nargs="+", default=None, choices=list(scenarios))
    p.add_argument("--rounds", type=int, default=None, help="runs per pair (3; quick 1)")
    p.add_argument("--duration", type=float, default=None, help=duration_help)
    if own is not None:
        own(p)
    p.add_argument("--server-cpu", type=int, default=SERVER_CPU, help="pin the server here")
    p.add_argument("--client-cpu", type=int, default=CLIENT_CPU, help="pin the load here")
    reporting.add_output_args(p)
    return p


# --------------------------------------------------------------------------- the run


def available(
    names: list[str], check: Callable[[str], str | None]
) -> tuple[list[str], dict[str, str]]:
    """(the names that can run here, {name: why not} of the others), saying so of each."""
    unavailable = {}
    for name in names:
        if why := check(name):
            print(f"  {name}: unavailable: {why}", flush=True)
            unavailable[name] = why
    return [n for n in names if n not in unavailable], unavailable


@dataclass
class SuiteRun:
    """One run of a server suite: what it records in every result besides its own settings."""

    suite: str  # "http": the JSON is http.json, the README section "http"
    report: Report
    quick: bool
    rounds: int
    duration: float
    server_cpu: int | None
    client_cpu: int | None
    scenarios: list[Any]
    machine: dict[str, Any]
    t0: float = field(default=0.0, init=False)

    @classmethod
    def from_args(
        cls,
        suite: str,
        report: Report,
        args: argparse.Namespace,
        preset: Mapping[str, Any],
        scenarios: list[Any],
    ) -> SuiteRun:
        """From the common flags (``parser``); rounds and duration not given (or 0) are
        ``preset``'s (the suite's quick or full one). Records the machine now."""
        return cls(
            suite=suite,
            report=report,
            quick=args.quick,
            rounds=args.rounds or preset["rounds"],
            duration=args.duration or preset["duration"],
            server_cpu=args.server_cpu,
            client_cpu=args.client_cpu,
            scenarios=scenarios,
            machine=harness.machine_info(),
        )

    def run_rounds(
        self,
        names: list[str],
        measure: Callable[[str, Any], dict[str, Any]],
        *,
        load: str = "load",
        **rounds_kw: Any,
    ) -> dict[str, Any]:
        """Say what will run, then ``rounds.run_rounds``; the clock of ``settings["seconds"]``
        starts here (tools and floors built before it are not counted)."""
        print(
            f"{self.suite}: {len(names)} servers × {len(self.scenarios)} scenarios × "
            f"{self.rounds} round(s) × {self.duration:g} s; server on CPU {self.server_cpu}, "
            f"{load} on CPU {self.client_cpu}",
            flush=True,
        )
        self.t0 = time.monotonic()
        state = run_rounds(
            names, self.scenarios, self.rounds, measure, brief=self.report.brief, **rounds_kw
        )
        self.machine["loadavg_end"] = list(os.getloadavg())
        return state

    def subjects(
        self,
        state: dict[str, Any],
        catalogue: Mapping[str, Any],
        kind: Callable[[Any], str],
        fields: tuple[str, ...],
        unavailable: dict[str, str],
        applies: Callable[[str, Any], bool] = lambda _name, _sc: True,
    ) -> dict[str, Any]:
        """The medians of every subject that ran, an entry saying why of every one that could
        not (each cell "unavailable"), in the catalogue's order whatever ran. ``catalogue``:
        name -> subject (its ``how`` is the entry's ``loop_class``); ``kind`` of a subject:
        what the tables group it by."""
        out = summarise_rounds(state, self.scenarios, lambda n: kind(catalogue[n]), fields)
        for name, why in unavailable.items():
            out[name] = {
                "kind": kind(catalogue[name]),
                "loop_class": catalogue[name].how,
                "version": None,
                "backend": None,
                "load_error": why,
                "package_mtimes": [],
                "scenarios": {
                    sc.key: {"status": "unavailable", "error": why, "runs": []}
                    for sc in self.scenarios
                    if applies(name, sc)
                },
            }
        return {n: out[n] for n in catalogue if n in out}

    def settings(
        self,
        own: dict[str, Any],
        *,
        more: dict[str, Any] | None = None,
        cpu_source: str = TREE_CPU,
        latency_source: str | None = None,
    ) -> dict[str, Any]:
        """The JSON's settings: the common ones around the suite's ``own`` (after the
        duration) and ``more`` (after the scenarios), then how the figures were taken."""
        return {
            "quick": self.quick,
            "rounds": self.rounds,
            "duration": self.duration,
            **own,
            "server_cpu": self.server_cpu,
            "client_cpu": self.client_cpu,
            "scenarios": [sc.key for sc in self.scenarios],
            "scenario_labels": {sc.key: sc.label for sc in self.scenarios},
            **(more or {}),
            "statistic": STATISTIC,
            "cpu_source": cpu_source,
            **({"latency_source": latency_source} if latency_source is not None else {}),
            "seconds": round(time.monotonic() - self.t0, 1),
        }

    def publish(
        self,
        settings: dict[str, Any],
        subjects: dict[str, Any],
        out_dir: Path,
        update_readme: bool,
    ) -> int:
        """Write and report the result (``reporting.publish``); the suite's exit status: 0 when
        at least one run measured a rate."""
        result = {
            "suite": self.suite,
            "machine": self.machine,
            "settings": settings,
            "subjects": subjects,
        }
        reporting.publish(
            result,
            out_dir,
            f"{self.suite}.json",
            self.report.console,
            charts=self.report.charts,
            section=self.suite if update_readme else None,
            readme_body=self.report.readme_section,
        )
        ok = any("rate" in c for e in subjects.values() for c in e["scenarios"].values())
        return 0 if ok else 1


# --------------------------------------------------------------------------- TLS rows


def make_keys(work: Path) -> dict[str, tuple[Path, Path]]:
    """A self-signed certificate for 127.0.0.1 of each kind: {kind: (cert, key)}."""
    out = {}
    for kind, gen in (
        ("rsa", ["-newkey", "rsa:2048"]),
        ("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
    ):
        cert, key = work / f"{kind}.crt", work / f"{kind}.key"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                *gen,
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-subj",
                "/CN=127.0.0.1",
                "-days",
                "2",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        out[kind] = (cert, key)
    return out
