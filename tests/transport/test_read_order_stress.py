"""The read-order stress scenarios (``read_order_stress``) on every loop kind, cores busy.

Each seed is one scenario (see that module's docs); each runs on stock asyncio, ringloop's
io_uring and epoll loops (and, under ``make test-bound``, on thread-bound io_uring loops).
The first ``QUICK`` seeds run in ``make test``; the rest are marked ``slow`` (volume through
the same code: ``make test-long``), and ``make stress`` runs the same scenarios over many more.
"""

from __future__ import annotations

import pytest
from read_order_stress import Scenario, busy_cores, run_scenario
from transport_helpers import run

SEEDS = range(150)
QUICK = 50

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", autouse=True)
def _busy():
    with busy_cores():
        yield


@pytest.mark.parametrize(
    "seed", [s if s < QUICK else pytest.param(s, marks=pytest.mark.slow) for s in SEEDS]
)
def test_read_order(loop, seed: int) -> None:
    sc = Scenario.draw(seed)
    problems = run(loop, run_scenario(sc), timeout=200)
    assert not problems, f"{sc}\n" + "\n".join(problems)


@pytest.mark.only_kinds("ringloop-io_uring", reason="the provided-buffer ring is io_uring's")
def test_crowds_run_the_ring_dry(loop) -> None:
    """The crowd scenarios reach the path they exist for: recvs that found the buffer ring
    empty, read straight from their sockets (a crowd that never did would test nothing new)."""
    crowds = [s for s in SEEDS if Scenario.draw(s).block_ms][:3]
    assert crowds, "no crowd among the seeds"
    for seed in crowds:
        sc = Scenario.draw(seed)
        problems = run(loop, run_scenario(sc), timeout=200)
        assert not problems, f"{sc}\n" + "\n".join(problems)
    assert loop._starved_reads() > 0
