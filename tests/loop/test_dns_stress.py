"""getaddrinfo / getnameinfo, checked against the socket module, and a small stress test.

The resolver results are compared with ``socket.getaddrinfo``/``getnameinfo`` called with the
same arguments: a numeric fast path in the loop must give byte-for-byte the libc answer.
"""

from __future__ import annotations

import random
import socket

import pytest
from loop_helpers import run_forever_with_watchdog, run_with_timeout

pytestmark = pytest.mark.timeout(60)

HAS_IPV6 = socket.has_ipv6
NS = 1e-9


def _ipv6_loopback_ok():
    if not HAS_IPV6:
        return False
    try:
        socket.getaddrinfo("::1", 80, socket.AF_INET6)
    except OSError:
        return False
    return True


GAI_CASES = [
    (("127.0.0.1", 80), {}),
    (("127.0.0.1", "80"), {}),
    (("127.0.0.1", 0), {"type": socket.SOCK_STREAM}),
    (("127.0.0.1", 53), {"type": socket.SOCK_DGRAM, "proto": socket.IPPROTO_UDP}),
    (("127.0.0.1", None), {}),
    ((None, 8080), {"flags": socket.AI_PASSIVE, "type": socket.SOCK_STREAM}),
    (("localhost", 80), {"type": socket.SOCK_STREAM}),
    (("localhost", 80), {"family": socket.AF_INET}),
    ((b"127.0.0.1", b"80"), {}),
    (("127.0.0.1", "http"), {"type": socket.SOCK_STREAM}),
]


@pytest.mark.parametrize("args, kwargs", GAI_CASES, ids=[f"{a}-{k}" for a, k in GAI_CASES])
def test_getaddrinfo_matches_socket_module(loop, args, kwargs):
    expected = socket.getaddrinfo(*args, **kwargs)
    got = run_with_timeout(loop, loop.getaddrinfo(*args, **kwargs))
    assert sorted(got) == sorted(expected)


@pytest.mark.skipif(not _ipv6_loopback_ok(), reason="no IPv6 loopback on this host")
def test_getaddrinfo_ipv6_numeric(loop):
    kw = {"type": socket.SOCK_STREAM}
    expected = socket.getaddrinfo("::1", 443, **kw)
    assert run_with_timeout(loop, loop.getaddrinfo("::1", 443, **kw)) == expected


def test_getaddrinfo_errors_like_socket_module(loop):
    with pytest.raises(socket.gaierror) as exp:
        socket.getaddrinfo("127.0.0.1", "no-such-service-xyz")
    with pytest.raises(socket.gaierror) as got:
        run_with_timeout(loop, loop.getaddrinfo("127.0.0.1", "no-such-service-xyz"))
    assert got.value.errno == exp.value.errno


@pytest.mark.parametrize(
    "sockaddr, flags",
    [
        (("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV),
        (("127.0.0.1", 80), socket.NI_NUMERICHOST),
        (("127.0.0.1", 8080), 0),
    ],
)
def test_getnameinfo_matches_socket_module(loop, sockaddr, flags):
    expected = socket.getnameinfo(sockaddr, flags)
    assert run_with_timeout(loop, loop.getnameinfo(sockaddr, flags)) == expected


def test_100k_call_soon_in_order(loop):
    n = 100_000
    out = []
    append = out.append
    for i in range(n):
        loop.call_soon(append, i)
    loop.call_soon(loop.stop)
    assert not run_forever_with_watchdog(loop, 30)
    assert len(out) == n and out == list(range(n))


def test_10k_random_timers_fire_in_when_order(loop):
    rng = random.Random(20240601)
    n = 10_000
    fired = []

    def cb(handle_box):
        fired.append((handle_box[0].when(), loop.time()))
        if len(fired) == n:
            loop.stop()

    for _ in range(n):
        box = []
        box.append(loop.call_later(rng.uniform(0, 0.3), cb, box))
    assert not run_forever_with_watchdog(loop, 30), f"{len(fired)}/{n} fired"
    # Non-decreasing `when` order, to one nanosecond: the design keeps time as integer
    # nanoseconds, so two timers whose float `when` differ by less than 1 ns are a tie and
    # may run in either order (asyncio compares the floats exactly).
    late = 0.0
    for i, (w, _) in enumerate(fired):
        assert w >= late - NS, f"timer #{i} (when={w!r}) ran after one due at {late!r}"
        late = max(late, w)
    assert all(t >= w - NS for w, t in fired), "a timer fired early"


def test_timers_cancelled_in_bulk(loop):
    rng = random.Random(7)
    fired = []
    handles = [loop.call_later(rng.uniform(0, 0.05), fired.append, i) for i in range(5000)]
    for h in handles[::2]:
        h.cancel()
    loop.call_later(0.2, loop.stop)
    assert not run_forever_with_watchdog(loop, 30)
    assert sorted(fired) == list(range(1, 5000, 2))
