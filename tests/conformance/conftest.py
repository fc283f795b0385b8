"""Apply `expectations.py` to the generated conformance classes.

A key of `SKIP`/`XFAIL` is `<module>.<Suite>.<test>` (module without `test_` prefix stripped:
`test_events.EventLoopTests.test_create_connection`) and applies to both ringloop backends;
a `[io_uring]`/`[epoll]` suffix narrows it to one backend, `[all]` widens it to the asyncio
oracle too (for tests this machine cannot run at all). XFAILs are strict: a fixed bug shows up
as XPASS(strict) and its entry must go.
"""

from __future__ import annotations

import os
from asyncio import selector_events

import pytest
import ringloop

from ._loops import RINGLOOP_LOOPS
from .expectations import SKIP, SLOW, XFAIL

# A hang must not eat the whole run. The thread method (dump stacks, end the process) keeps
# SIGALRM free for the tests (test_events uses setitimer); CONFORMANCE_TIMEOUT_METHOD=signal
# turns a hang into one failed test instead, for exploring.
TIMEOUT = float(os.environ.get("CONFORMANCE_TIMEOUT", 60))
TIMEOUT_METHOD = os.environ.get("CONFORMANCE_TIMEOUT_METHOD", "thread")
# Audit mode: run the SKIP entries too, to find the ones that pass now.
RUN_SKIPPED = os.environ.get("CONFORMANCE_RUN_SKIPPED") == "1"


def conformance_key(item) -> tuple[str, str] | None:
    cls = getattr(item, "cls", None)
    suite = getattr(cls, "conformance_suite", None)
    if suite is None:
        return None
    module = item.module.__name__.rpartition(".")[2]
    return f"{module}.{suite}.{item.originalname or item.name}", cls.conformance_loop


def _lookup(table: dict, key: str, loop: str) -> str | None:
    for candidate in (f"{key}[{loop}]", f"{key}[all]"):
        if candidate in table:
            return table[candidate]
    if loop in RINGLOOP_LOOPS:
        return table.get(key)
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        found = conformance_key(item)
        if found is None:
            continue
        key, loop = found
        item.add_marker(pytest.mark.timeout(TIMEOUT, method=TIMEOUT_METHOD))
        if key in SLOW:
            item.add_marker(pytest.mark.slow)
        reason = None if RUN_SKIPPED else _lookup(SKIP, key, loop)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            continue
        reason = _lookup(XFAIL, key, loop)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "call":
        item.conformance_call_report = report
    return report


@pytest.fixture(autouse=True)
def _ran_on_ringloop(request, monkeypatch):
    """A ringloop class whose test passes after building a stock selector loop and no
    `ringloop.Loop` ran on the wrong loop (a suite that builds its loop another way than the
    generator assumed): make that an error rather than a false pass."""
    cls = getattr(request.node, "cls", None)
    if getattr(cls, "conformance_loop", None) not in RINGLOOP_LOOPS:
        yield
        return
    built = []
    for klass in (ringloop.Loop, selector_events.BaseSelectorEventLoop):
        real_init = klass.__init__

        def counting_init(self, *args, _real=real_init, **kwargs):
            built.append(type(self))
            _real(self, *args, **kwargs)

        monkeypatch.setattr(klass, "__init__", counting_init)
    yield
    report = getattr(request.node, "conformance_call_report", None)
    if report is not None and report.passed and built:
        if not any(issubclass(t, ringloop.Loop) for t in built):
            pytest.fail(f"ran on {built[0].__name__}, not on ringloop {cls.conformance_loop}")
