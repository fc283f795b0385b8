"""Autobahn|Testsuite conformance of the WebSocket server: the representative selection.

``ws_autobahn.SELECTION`` (1.x–7.x, 10.x, 12.1.x, 13.1.x; the full set is ``make autobahn``)
against ``ringloop serve`` with the echo app, through the real fuzzing client (Python 2.7,
installed by ``install_autobahn.sh``). Any case that is not OK, NON-STRICT or INFORMATIONAL
fails the test, named with the reason from its report.

``RINGLOOP_AUTOBAHN_SERVERS`` (comma separated: ringloop, uvicorn, uvicorn-wsproto; default
ringloop) picks the servers: ``uvicorn`` is the reference that shows the harness itself
passes. The selection costs about 140 s per server here, 90 % of it in 12.1.x/13.1.x.
"""

from __future__ import annotations

import os

import pytest
import ws_autobahn
from harness_basics import unavailable

SERVERS = [
    s.strip() for s in os.environ.get("RINGLOOP_AUTOBAHN_SERVERS", "ringloop").split(",") if s
]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("server", SERVERS)
def test_autobahn_selection(server: str, tmp_path) -> None:
    try:
        wstest = ws_autobahn.find_wstest()
    except RuntimeError as exc:
        unavailable(str(exc))
    assert wstest
    try:
        summary = ws_autobahn.run(server, ws_autobahn.SELECTION, tmp_path / "reports")
    except RuntimeError as exc:
        pytest.fail(f"the Autobahn run against {server} could not complete: {exc}")
    # Every group of the selection must have run: a spec that silently matched nothing
    # would otherwise pass.
    groups = {p.split(".")[0] for p in ws_autobahn.SELECTION}
    assert set(summary.counts) == groups, f"groups run: {sorted(summary.counts)}"
    if not summary.ok:
        pytest.fail(
            f"{len(summary.failures)} Autobahn case(s) failed against {server}:\n"
            + "\n".join(summary.failure_lines())
            + "\n"
            + summary.table()
        )
