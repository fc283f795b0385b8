"""Shared fixtures: run every loop test against stock asyncio (the oracle) and ringloop.

The test suite is written once, uvloop-style: each test takes the ``loop`` (or ``new_loop``)
fixture and makes the same assertions whatever loop it gets.  ``loop_kind`` is parametrized
over three ids:

* ``asyncio``            -- ``asyncio.SelectorEventLoop`` (epoll), the reference behaviour;
* ``ringloop-io_uring``  -- ``ringloop.Loop(backend="io_uring")``; the fixture asserts that the
  loop really runs on io_uring and only skips when the kernel refuses io_uring
  (``ringloop.io_uring_available()`` returns ``(False, reason)``);
* ``ringloop-epoll``     -- ``ringloop.Loop(backend="epoll")``.

While ``import ringloop`` fails (the native loop is being written), the ringloop params skip
with ``"ringloop not importable: <error>"``.  ``RINGLOOP_REQUIRE=1`` (set by CI) turns that
skip into a failure so a broken build can never pass as "all skipped".

Selecting kinds from a test:

* ``@pytest.mark.only_kinds("ringloop-io_uring", "ringloop-epoll", reason="...")`` runs the test
  only on those kinds (the others skip with the reason);
* ``@pytest.mark.skip_kinds("asyncio", reason="...")`` skips the named kinds;
* ``condition=<bool>`` on any of them applies the marker only when true (a CPython version's
  own asyncio behaving differently, say);
* ``@pytest.mark.xfail_kinds("ringloop-epoll", reason="...")`` marks a known divergence as a
  strict xfail on those kinds (it must fail; an unexpected pass is reported);
* or request ``loop_kind`` and call ``pytest.skip``/``pytest.xfail`` with a reason naming why.
"""

from __future__ import annotations

import asyncio
import os

import pytest

LOOP_KINDS = ("asyncio", "ringloop-io_uring", "ringloop-epoll")
RINGLOOP_KINDS = ("ringloop-io_uring", "ringloop-epoll")

_KIND_MARKERS = ("only_kinds", "skip_kinds", "xfail_kinds")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "only_kinds(*kinds, reason=...): run a loop test only on these loop kinds"
    )
    config.addinivalue_line(
        "markers", "skip_kinds(*kinds, reason=...): skip a loop test on these loop kinds"
    )
    config.addinivalue_line(
        "markers",
        "xfail_kinds(*kinds, reason=...): strict xfail of a loop test on these loop kinds",
    )


def _ringloop_import():
    """Return (module, None) or (None, "ExcType: message")."""
    try:
        import ringloop
    except Exception as exc:  # ImportError, or anything the half-built module raises
        return None, f"{type(exc).__name__}: {exc}"
    return ringloop, None


def ringloop_or_skip():
    """Import ringloop, or skip (fail under RINGLOOP_REQUIRE=1) with the import error."""
    mod, err = _ringloop_import()
    if mod is None:
        msg = f"ringloop not importable: {err}"
        if os.environ.get("RINGLOOP_REQUIRE") == "1":
            pytest.fail(msg + " (RINGLOOP_REQUIRE=1)", pytrace=False)
        pytest.skip(msg)
    return mod


def backend_of(kind: str) -> str | None:
    """The ringloop backend name of a loop kind, or None for the asyncio oracle."""
    return kind.removeprefix("ringloop-") if kind in RINGLOOP_KINDS else None


def _apply_kind_markers(request: pytest.FixtureRequest, kind: str) -> None:
    for name in _KIND_MARKERS:
        for mark in request.node.iter_markers(name):
            kinds = mark.args
            unknown = set(kinds) - set(LOOP_KINDS)
            if unknown or not kinds:
                pytest.fail(
                    f"{name} marker names unknown loop kinds {sorted(unknown)}; "
                    f"choose from {LOOP_KINDS}",
                    pytrace=False,
                )
            reason = mark.kwargs.get("reason", "")
            if not mark.kwargs.get("condition", True):
                continue  # e.g. a divergence of one CPython version's asyncio
            if name == "only_kinds" and kind not in kinds:
                pytest.skip(f"only on {', '.join(kinds)}: {reason}".rstrip(": "))
            if name == "skip_kinds" and kind in kinds:
                pytest.skip(f"skipped on {kind}: {reason}".rstrip(": "))
            if name == "xfail_kinds" and kind in kinds:
                request.applymarker(
                    pytest.mark.xfail(reason=reason or f"known on {kind}", strict=True)
                )


@pytest.fixture(params=LOOP_KINDS, ids=LOOP_KINDS)
def loop_kind(request: pytest.FixtureRequest) -> str:
    """The kind of loop under test; skips ringloop kinds while ringloop is not importable."""
    kind = request.param
    _apply_kind_markers(request, kind)
    if kind in RINGLOOP_KINDS:
        ringloop = ringloop_or_skip()
        if kind == "ringloop-io_uring":
            ok, reason = ringloop.io_uring_available()
            if not ok:
                pytest.skip(f"kernel refuses io_uring: {reason}")
    return kind


def make_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A fresh, un-set loop of ``kind``.

    The oracle is built directly (not through the policy) so that a test which installs the
    ringloop policy cannot turn the oracle into ringloop behind our back.
    """
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    import ringloop

    backend = backend_of(kind)
    loop = ringloop.Loop(backend=backend)
    try:
        assert loop.backend == backend, (
            f"{kind}: asked for backend={backend!r}, loop runs on {loop.backend!r}"
        )
    except BaseException:
        loop.close()
        raise
    return loop


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    # Same as asyncio.runners._cancel_all_tasks: leftovers are cancelled and awaited so a
    # failing test does not spill "Task was destroyed but it is pending" into the next one.
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close a loop the way asyncio.run does; safe on an already closed loop."""
    if loop.is_closed():
        return
    try:
        if not loop.is_running():
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


@pytest.fixture
def loop(loop_kind: str):
    """A fresh loop of ``loop_kind``, set as the current loop, closed and unset afterwards."""
    lp = make_loop(loop_kind)
    asyncio.set_event_loop(lp)
    try:
        yield lp
    finally:
        try:
            close_loop(lp)
        finally:
            asyncio.set_event_loop(None)


@pytest.fixture
def new_loop(loop_kind: str):
    """Factory of fresh un-set loops of ``loop_kind``; every loop made is closed at teardown."""
    made: list[asyncio.AbstractEventLoop] = []

    def factory() -> asyncio.AbstractEventLoop:
        lp = make_loop(loop_kind)
        made.append(lp)
        return lp

    yield factory
    errors = []
    for lp in made:
        try:
            close_loop(lp)
        except Exception as exc:  # close the rest, then report
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def ringloop(loop_kind: str):
    """The ringloop module, for ringloop-only tests (skips on the asyncio oracle)."""
    if loop_kind == "asyncio":
        pytest.skip("ringloop-only behaviour: not defined for stock asyncio")
    return ringloop_or_skip()
