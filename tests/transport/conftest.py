"""Fixtures of the transport tests; the loop fixtures (``loop``, ``loop_kind``, the
``only_kinds``/``skip_kinds``/``xfail_kinds`` markers) come from tests/conftest.py.

* ``family`` runs a stream test over TCP and over a Unix socket;
* ``loop_errors`` (autouse) installs an exception handler on the loop that records every
  call. A test that expects the handler to run inspects and clears the list; anything left at
  teardown fails the test, so a transport that reports a spurious error (or a protocol
  assertion that fired inside a callback) cannot go unnoticed.
"""

from __future__ import annotations

import pytest
from transport_helpers import StreamFamily


@pytest.fixture(params=["tcp", "unix"])
def family(request: pytest.FixtureRequest):
    fam = StreamFamily(request.param)
    yield fam
    fam.cleanup()


@pytest.fixture(autouse=True)
def loop_errors(loop):
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    unexpected = [f"{ctx.get('message')}: {ctx.get('exception')!r}" for ctx in errors]
    assert not unexpected, f"unexpected calls of the loop's exception handler: {unexpected}"
