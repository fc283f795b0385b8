"""The entry points (`ringloop.run`, `install`, `EventLoopPolicy`, a loop factory) on every
Python, with deprecation warnings turned into errors.

Python 3.14 deprecated asyncio's policy names (`asyncio.DefaultEventLoopPolicy`,
`set_event_loop_policy`, ...; removal in 3.16). Importing and using ringloop must not warn
there, and `install()` must still make plain `asyncio.run()` build a ringloop loop. Each case
runs in a fresh interpreter with `-W error::DeprecationWarning`, so a warning anywhere
(import included) fails it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CASES = {
    "import": "import ringloop",
    "run": """
        async def main():
            return type(asyncio.get_running_loop())
        assert ringloop.run(main()) is ringloop.Loop
    """,
    "install then asyncio.run": """
        ringloop.install()
        async def main():
            return type(asyncio.get_running_loop())
        assert asyncio.run(main()) is ringloop.Loop
        loop = asyncio.new_event_loop()
        assert isinstance(loop, ringloop.Loop)
        loop.close()
    """,
    "loop_factory": """
        async def main():
            return type(asyncio.get_running_loop())
        with asyncio.Runner(loop_factory=ringloop.new_event_loop) as runner:
            assert runner.run(main()) is ringloop.Loop
        if sys.version_info >= (3, 12):
            assert asyncio.run(main(), loop_factory=ringloop.new_event_loop) is ringloop.Loop
    """,
    "EventLoopPolicy": """
        loop = ringloop.EventLoopPolicy().new_event_loop()
        assert isinstance(loop, ringloop.Loop)
        loop.close()
    """,
    "signal handler": """
        import signal
        async def main():
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
            return loop.remove_signal_handler(signal.SIGUSR1)
        assert ringloop.run(main()) is True
    """,
    "subprocess": """
        async def main():
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
            return await proc.wait()
        assert ringloop.run(main()) == 0
    """,
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_deprecation_warning(case):
    code = "import asyncio, sys\nimport ringloop\n" + textwrap.dedent(CASES[case])
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_install_sets_a_default_policy():
    # On every version: what asyncio.get_event_loop_policy() returns is ringloop's, a kind of
    # asyncio.DefaultEventLoopPolicy (both names warn on 3.14, hence the filter).
    code = textwrap.dedent(
        """
        import asyncio, sys, warnings, ringloop
        warnings.simplefilter("ignore", DeprecationWarning)
        ringloop.install()
        policy = asyncio.get_event_loop_policy()
        assert isinstance(policy, ringloop.EventLoopPolicy)
        assert isinstance(policy, asyncio.DefaultEventLoopPolicy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
