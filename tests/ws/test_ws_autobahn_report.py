"""How ``ws_autobahn`` reads wstest's report: verdicts counted per group, failures named.

A report written here in wstest's own layout (``index.json`` plus one JSON file per case),
so the reading is checked without running the fuzzing client; the real runs are
``test_ws_autobahn.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import ws_autobahn


def _report(tmp_path: Path, cases: dict[str, tuple[str, str, str]]) -> Path:
    entries = {}
    for case_id, (behavior, behavior_close, result) in cases.items():
        name = f"agent_case_{case_id.replace('.', '_')}.json"
        (tmp_path / name).write_text(json.dumps({"result": result, "resultClose": "closed"}))
        entries[case_id] = {
            "behavior": behavior,
            "behaviorClose": behavior_close,
            "duration": 3,
            "remoteCloseCode": 1000,
            "reportfile": name,
        }
    (tmp_path / "index.json").write_text(json.dumps({"agent": entries}))
    return tmp_path


def test_counts_per_group_and_failures_named(tmp_path: Path) -> None:
    out = _report(
        tmp_path,
        {
            "1.1.2": ("OK", "OK", "fine"),
            "1.1.10": ("NON-STRICT", "OK", "fine"),
            "7.1.6": ("INFORMATIONAL", "INFORMATIONAL", "fine"),
            "6.4.1": ("FAILED", "OK", "Expected to fail fast on invalid UTF-8"),
            "7.5.1": ("WRONG CODE", "WRONG CODE", "Expected close code 1007"),
            "12.1.1": ("UNIMPLEMENTED", "UNIMPLEMENTED", "No permessage-deflate"),
        },
    )
    summary = ws_autobahn.Summary("agent", ws_autobahn.read_report(out, "agent"), 1.0)
    # Case ids sort numerically: 1.1.10 after 1.1.2.
    assert [c.id for c in summary.cases] == ["1.1.2", "1.1.10", "6.4.1", "7.1.6", "7.5.1", "12.1.1"]
    assert summary.counts["1"] == {
        "OK": 1,
        "NON-STRICT": 1,
        "INFORMATIONAL": 0,
        "UNIMPLEMENTED": 0,
        "FAILED": 0,
    }
    assert summary.counts["7"]["INFORMATIONAL"] == 1
    assert summary.counts["7"]["FAILED"] == 1  # WRONG CODE is not a pass
    assert summary.counts["12"]["UNIMPLEMENTED"] == 1
    assert not summary.ok
    assert [c.id for c in summary.failures] == ["6.4.1", "7.5.1", "12.1.1"]
    lines = summary.failure_lines()
    assert "Expected to fail fast on invalid UTF-8" in lines[0]
    assert lines[1].startswith("7.5.1: WRONG CODE")
    table = summary.table()
    assert "| 12.x Compression: payloads | 0 | 0 | 0 | 1 | 0 |" in table
    assert "| **total** | **1** | **1** | **1** | **1** | **2** |" in table


def test_all_passing_and_readme_markers(tmp_path: Path) -> None:
    out = _report(tmp_path, {"2.1": ("OK", "OK", ""), "7.1.6": ("INFORMATIONAL", "OK", "")})
    summary = ws_autobahn.Summary("agent", ws_autobahn.read_report(out, "agent"), 2.0)
    assert summary.ok and not summary.failures
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- autobahn:begin -->\nold\n<!-- autobahn:end -->\noutro\n")
    assert ws_autobahn.update_readme(readme, ws_autobahn.readme_block(summary, ["*"], None))
    text = readme.read_text()
    assert "old" not in text and text.startswith("intro\n") and text.endswith("outro\n")
    assert "every case OK, NON-STRICT or INFORMATIONAL" in text
    readme.write_text("no markers here\n")
    assert not ws_autobahn.update_readme(readme, "x")


def test_an_empty_report_is_not_a_pass(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text(json.dumps({"agent": {}}))
    assert not ws_autobahn.Summary("agent", ws_autobahn.read_report(tmp_path, "agent"), 0).ok
