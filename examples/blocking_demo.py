"""A request handler that blocks the event loop, caught by ringloop.watch.

    python examples/blocking_demo.py

Runs the same app on stock asyncio and, when it is importable, on ringloop's native loop;
prints the report for the blocking handler and shows the fixed handler passing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _import_watch():
    import ringloop.watch as watch

    return watch


watch = _import_watch()


def render_report(user_id: int) -> str:
    time.sleep(0.05)  # stands in for a slow synchronous library call
    return f"report for {user_id}"


async def get_report(user_id: int) -> str:
    """The bug: a synchronous call inside an async handler."""
    await asyncio.sleep(0)
    return render_report(user_id)


async def get_report_fixed(user_id: int) -> str:
    """The fix: run the synchronous call in a worker thread."""
    await asyncio.sleep(0)
    return await asyncio.to_thread(render_report, user_id)


async def serve(handler) -> list:
    # A no-op action: the blocks are printed by main(), from nb.blocks.
    async with watch.no_blocking(threshold=0.01, action=lambda block: None) as nb:
        await asyncio.gather(
            *(asyncio.create_task(handler(i), name=f"GET /report/{i}") for i in range(2))
        )
    return nb.blocks


def main() -> int:
    loops = [("asyncio", asyncio.new_event_loop)]
    try:
        import ringloop

        loops.append(("ringloop", ringloop.new_event_loop))
    except ImportError:
        print("(ringloop's native loop is not built: running on stock asyncio only)\n")
    failures = 0
    for name, factory in loops:
        with asyncio.Runner(loop_factory=factory) as runner:
            blocks = runner.run(serve(get_report))
            print(f"=== {name}: blocking handler -> {len(blocks)} block(s) ===")
            for block in blocks:
                print(block, end="\n\n")
            fixed = runner.run(serve(get_report_fixed))
            print(f"=== {name}: fixed handler -> {len(fixed)} block(s) ===\n")
            failures += (len(blocks) == 0) + (len(fixed) != 0)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
