"""Python 3.14's external task introspection (`python -m asyncio ps PID` / `pstree PID`) on
a ringloop program, with stock asyncio as the oracle.

The tools read a live process's memory (ptrace permission: root here, or
`kernel.yama.ptrace_scope` 0) and walk the C `Task` objects of every thread; ringloop keeps
CPython's C `Task`, so a program under `ringloop.run` must list exactly what the same program
under `asyncio.run` lists, once the addresses of the tasks are taken out.
"""

from __future__ import annotations

import re
import select
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 14),
    reason="`python -m asyncio ps/pstree` (external task introspection) is new in Python 3.14",
)

PROGRAM = textwrap.dedent(
    """
    import asyncio, sys

    async def leaf(ev):
        await ev.wait()

    async def worker(ev):
        await leaf(ev)

    async def main():
        ev = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker(ev), name="worker-a")
            tg.create_task(worker(ev), name="worker-b")
            await asyncio.sleep(0)          # both workers now wait on ev
            print("ready", flush=True)
            await ev.wait()                 # until the test kills the process

    if sys.argv[1] == "ringloop":
        import ringloop
        ringloop.run(main())
    else:
        asyncio.run(main())
    """
)

# Task ids are addresses: different in every process.
_ADDRESS = re.compile(r"\b0x[0-9a-f]+\b|\b\d{6,}\b")


def _start(kind: str, script) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(script), kind], stdout=subprocess.PIPE, text=True)
    # Wait for the event (the program's "ready"), with a bound only against a hang.
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready or proc.stdout.readline().strip() != "ready":
        proc.kill()
        pytest.fail(f"the {kind} program did not get ready")
    return proc


def _tool(command: str, pid: int) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "asyncio", command, str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0 and "ermission" in out.stdout + out.stderr:
        pytest.skip(f"no ptrace permission for `python -m asyncio {command}`: {out.stdout}")
    assert out.returncode == 0, out.stdout + out.stderr
    # ps's first column is the thread id: another process, another number.
    lines = [re.sub(r"^\d+ ", "TID ", line.rstrip()) for line in out.stdout.splitlines()]
    return [_ADDRESS.sub("ID", line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def listings(tmp_path_factory):
    """`ps` and `pstree` of the same program under stock asyncio and ringloop."""
    got = {}
    # One script for both: its path is in every coroutine frame the tools print.
    script = tmp_path_factory.mktemp("introspection") / "introspected.py"
    script.write_text(PROGRAM)
    for kind in ("asyncio", "ringloop"):
        proc = _start(kind, script)
        try:
            got[kind] = {cmd: _tool(cmd, proc.pid) for cmd in ("ps", "pstree")}
        finally:
            proc.kill()
            proc.wait()
    return got


def test_ps_lists_the_tasks_as_stock_asyncio(listings):
    stock, ours = listings["asyncio"]["ps"], listings["ringloop"]["ps"]
    # The oracle really shows the program's tasks, with their coroutine stacks.
    body = "\n".join(stock)
    assert "worker-a" in body and "worker-b" in body and "leaf" in body, body
    assert sorted(ours) == sorted(stock)


def test_pstree_draws_the_same_tree_as_stock_asyncio(listings):
    stock, ours = listings["asyncio"]["pstree"], listings["ringloop"]["pstree"]
    body = "\n".join(stock)
    assert "(T) worker-a" in body and "(T) worker-b" in body and "main" in body, body
    assert ours == stock
