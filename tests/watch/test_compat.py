"""`ringloop.watch.no_event_loop_blocking`: pyleak's signature, mapped onto `no_blocking`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import warnings

import pytest
from ringloop.watch import (
    BlockingError,
    BlockingWarning,
    EventLoopBlockError,
    no_blocking,
    no_event_loop_blocking,
)


def test_signature_is_pyleaks():
    params = inspect.signature(no_event_loop_blocking).parameters
    assert list(params) == ["action", "logger", "threshold", "check_interval", "caller_context"]
    assert params["action"].default == "warn"
    assert params["threshold"].default == 0.2
    assert params["threshold"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["check_interval"].kind is inspect.Parameter.KEYWORD_ONLY
    pyleak = pytest.importorskip("pyleak")
    theirs = inspect.signature(pyleak.no_event_loop_blocking).parameters
    assert [(p.name, p.kind) for p in theirs.values()] == [
        (p.name, p.kind) for p in params.values()
    ]
    assert theirs["threshold"].default == params["threshold"].default


def test_raise_catches_a_block_and_is_pyleaks_error_name():
    assert EventLoopBlockError is BlockingError

    async def main():
        with pytest.raises(EventLoopBlockError) as caught:
            async with no_event_loop_blocking(action="raise", threshold=0.02, check_interval=0.001):
                time.sleep(0.06)
        return caught.value.blocks

    blocks = asyncio.run(main())
    assert blocks and blocks[0].duration >= 0.05
    assert blocks[0].line is not None and blocks[0].line.name == "main"


def test_clean_code_passes():
    async def main():
        async with no_event_loop_blocking(action="raise", threshold=0.05) as scope:
            await asyncio.sleep(0.06)
        return scope

    scope = asyncio.run(main())
    assert isinstance(scope, no_blocking) and scope.blocks == []


def test_warn_is_the_default_action():
    async def main():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            async with no_event_loop_blocking(threshold=0.02):
                time.sleep(0.05)
        return seen

    seen = asyncio.run(main())
    assert any(issubclass(w.category, BlockingWarning) for w in seen)


@pytest.mark.parametrize("action", ["log", "cancel"])
def test_log_and_cancel_go_to_the_given_logger(action, caplog):
    log = logging.getLogger("team.blocking")

    async def main():
        async with no_event_loop_blocking(action, log, threshold=0.02):
            time.sleep(0.05)

    with caplog.at_level(logging.WARNING, logger="team.blocking"):
        asyncio.run(main())
    records = [r for r in caplog.records if r.name == "team.blocking"]
    assert records and "event loop blocked for" in records[0].getMessage()


def test_pyleak_leakaction_members_are_accepted():
    pyleak_base = pytest.importorskip("pyleak.base")
    scope = no_event_loop_blocking(action=pyleak_base.LeakAction.RAISE, threshold=0.1)
    assert scope.action == "raise" and scope.threshold == 0.1


def test_decorator():
    @no_event_loop_blocking(action="raise", threshold=0.02)
    async def handler():
        time.sleep(0.05)

    with pytest.raises(BlockingError):
        asyncio.run(handler())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"action": "explode"}, "action must be one of warn, log, raise, cancel"),
        ({"threshold": 0}, "threshold must be a positive number"),
        ({"check_interval": -1}, "check_interval must be a positive number"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        no_event_loop_blocking(**kwargs)
