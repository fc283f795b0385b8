"""Requests the server must refuse, on the wire (RFC 9112, RFC 9110, RFC 6585), on ringloop's
server (both loop backends) and uvicorn (httptools and h11): malformed requests and request
smuggling (400 and close, with a valid request pipelined before it answered in full, and
nothing else lost), and the limits (414, 431, 413), including a 413 that reaches a client
still sending its body.

Where uvicorn itself is lax against the RFC, the case is marked `reference_lax` with what
uvicorn does, and only ringloop is held to the RFC there.
"""

from __future__ import annotations

import threading
import time

import pytest
from srv_harness import (
    BOTH,
    GOOD,
    GOOD_BODY,
    H11,
    HTTPTOOLS,
    MiB,
    Raw,
    chunked,
    exchange,
    request,
)

pytestmark = pytest.mark.timeout(60)


# -- malformed requests and smuggling: 400 and close, nothing before it lost -----------------------


# name: (bytes, statuses allowed, reference kinds that are lax, what they do)
BAD = {
    "content-length-and-transfer-encoding": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        {400},
        H11,
        "h11 lets Transfer-Encoding win (RFC 9112 §6.3: 'ought to be handled as an error')",
    ),
    "two-content-lengths-differing": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        {400},
        (),
        "",
    ),
    "content-length-list-differing": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!",
        {400},
        (),
        "",
    ),
    "transfer-encoding-chunked-identity": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "transfer-encoding-identity": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
        {400, 501},
        (),
        "",
    ),
    "transfer-encoding-chunked-twice": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "transfer-encoding-gzip-chunked": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        {400, 501},
        HTTPTOOLS,
        "httptools ignores the gzip coding and hands the app the coded bytes",
    ),
    "obs-fold": (
        b"GET /path HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
        {400},
        H11,
        "h11 unfolds obs-fold into SP (RFC 9112 §5.2 lets it; ringloop rejects)",
    ),
    "bare-lf-line-ends": (
        b"GET /path HTTP/1.1\nHost: a\n\n",
        {400},
        H11,
        "h11 accepts bare LF (RFC 9112 §2.2 lets it; ringloop rejects)",
    ),
    "bare-lf-in-field-section": (
        b"GET /path HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
        {400},
        H11,
        "h11 accepts bare LF (RFC 9112 §2.2 lets it; ringloop rejects)",
    ),
    "bare-cr": (b"GET /path HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", {400}, (), ""),
    "whitespace-before-colon": (
        b"GET /path HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n",
        {400},
        (),
        "",
    ),
    "whitespace-before-colon-content-length": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\nhello",
        {400},
        (),
        "",
    ),
    "chunk-size-not-hex": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "chunk-size-negative": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"-5\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "chunk-size-0x-prefix": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0x5\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "chunk-size-inner-space": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5 5\r\nhello\r\n0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "chunk-size-overflow": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"fffffffffffffffff1\r\nhello\r\n0\r\n\r\n",
        {400},
        H11,
        "h11 waits for 2**68 bytes instead of rejecting the size",
    ),
    "chunk-data-not-followed-by-crlf": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhelloXX0\r\n\r\n",
        {400},
        (),
        "",
    ),
    "content-length-negative": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\nhello",
        {400},
        (),
        "",
    ),
    "content-length-plus-sign": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
        {400},
        (),
        "",
    ),
    "content-length-overflow": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\nhi",
        {400, 413},
        (),
        "",
    ),
    "content-length-hex": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
        {400},
        (),
        "",
    ),
    "content-length-empty": (
        b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\nhello",
        {400},
        (),
        "",
    ),
    "method-not-a-token": (b"G(T /path HTTP/1.1\r\nHost: a\r\n\r\n", {400}, (), ""),
    "target-with-space": (b"GET /pa th HTTP/1.1\r\nHost: a\r\n\r\n", {400}, (), ""),
    "target-with-control": (b"GET /pa\x01th HTTP/1.1\r\nHost: a\r\n\r\n", {400}, (), ""),
    "target-not-ascii": (b"GET /pa\xffth HTTP/1.1\r\nHost: a\r\n\r\n", {400}, (), ""),
    "asterisk-target-outside-options": (
        b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
        {400},
        BOTH,
        "uvicorn passes `GET *` to the app (RFC 9112 §3.2.4: asterisk-form is for OPTIONS)",
    ),
    "version-malformed": (b"GET /path HTTP/1.x\r\nHost: a\r\n\r\n", {400}, (), ""),
    "version-2-on-http1": (
        b"GET /path HTTP/2.0\r\nHost: a\r\n\r\n",
        {400, 505},
        BOTH,
        "uvicorn serves an `HTTP/2.0` request line as HTTP/1.1",
    ),
    "http09-request-line": (
        b"GET /path\r\n\r\n",
        {400},
        HTTPTOOLS,
        "httptools serves an HTTP/0.9 request line",
    ),
    "nul-in-field-value": (b"GET /path HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", {400}, (), ""),
    "field-name-not-a-token": (b"GET /path HTTP/1.1\r\nHost: a\r\nX(a): b\r\n\r\n", {400}, (), ""),
    "missing-host": (
        b"GET /path HTTP/1.1\r\n\r\n",
        {400},
        HTTPTOOLS,
        "httptools serves HTTP/1.1 without Host (RFC 9112 §3.2: MUST respond 400)",
    ),
    "two-host-fields": (
        b"GET /path HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        {400},
        HTTPTOOLS,
        "httptools serves two Host fields (RFC 9112 §3.2: MUST respond 400)",
    ),
    "invalid-host": (
        b"GET /path HTTP/1.1\r\nHost: a b\r\n\r\n",
        {400},
        BOTH,
        "uvicorn serves `Host: a b` (RFC 9112 §3.2: MUST respond 400 to an invalid Host)",
    ),
}


def _bad_param(name: str, nothing_lost: bool):
    data, statuses, lax, what = BAD[name]
    lax = set(lax)
    if nothing_lost:
        # httptools parses a whole read at once and drops a valid request that came in the
        # same packet as a malformed one.
        lax |= set(HTTPTOOLS)
        if not what:
            what = "httptools drops the valid request pipelined before the malformed one"
    marks = [pytest.mark.reference_lax(what, kinds=tuple(lax))] if lax else []
    return pytest.param(name, data, statuses, id=name, marks=marks)


def _assert_rejected(c: Raw, statuses: set[int]) -> None:
    r = c.read_response()
    assert r.status in statuses, f"got {r.status} {r.body[:100]!r}"
    assert "close" in (r.header("connection") or "").lower()
    assert c.closed(), "the connection stayed open after a rejected request"


@pytest.mark.parametrize(("name", "data", "statuses"), [_bad_param(n, False) for n in BAD])
def test_malformed_request_is_rejected_and_closed(asgi, name, data, statuses):
    with asgi.raw() as c:
        c.send(data)
        _assert_rejected(c, statuses)


@pytest.mark.parametrize(("name", "data", "statuses"), [_bad_param(n, True) for n in BAD])
def test_valid_request_before_a_malformed_one_is_answered(asgi, name, data, statuses):
    with asgi.raw() as c:
        c.send(GOOD + data)
        r = c.read_response()
        assert (r.status, r.body) == (200, GOOD_BODY)
        _assert_rejected(c, statuses)


def test_http10_request_with_transfer_encoding_closes(asgi):
    # RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: the server
    # may reject it, or process it and then close the connection; it must not read on.
    with asgi.raw() as c:
        c.send(
            b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            + GOOD
        )
        r = c.read_response()
        assert r.status in (200, 400)
        assert c.rest() == b"", "the server read on after a faulty-framed HTTP/1.0 request"


def test_repeated_equal_content_lengths(asgi):
    # RFC 9110 §8.6: the recipient may reject, or use the one value; never desynchronise.
    with asgi.raw() as c:
        c.send(
            b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"
            b"hello" + GOOD
        )
        r = c.read_response()
        if r.status == 400:
            assert c.closed()
        else:
            assert (r.status, r.body) == (200, b"hello")
            assert c.read_response().body == GOOD_BODY


def test_connection_closed_mid_head_gets_no_response(asgi):
    with asgi.raw() as c:
        c.send(b"GET /path HTTP/1.1\r\nHost: a\r\n")
        c.sock.shutdown(1)  # SHUT_WR: the client gives up inside the head
        rest = c.rest()
        # Nothing, or a 400: never a 200 for half a request.
        assert rest == b"" or rest.startswith(b"HTTP/1.1 400"), rest[:100]


# -- limits (ringloop's settings; uvicorn has none of these) ----------------------------------------

LIMITS = {
    "limit_request_line": 512,
    "limit_request_headers": 10,
    "limit_request_header_size": 2048,
    "limit_request_body": 1000,
}


@pytest.fixture
def limited(ringloop_kind, pool):
    return pool.get(ringloop_kind, "srv_asgi_app:app", **LIMITS)


@pytest.mark.ringloop_only("uvicorn has no --limit-request-line (RFC 9112 §3: 414 when too long)")
def test_request_line_too_long_is_414_with_default_limit(asgi):
    with asgi.raw() as c:
        c.send(GOOD + request("GET", "/" + "a" * 9000))
        assert c.read_response().body == GOOD_BODY
        _assert_rejected(c, {414})


@pytest.mark.ringloop_only("uvicorn has no header-size limit (RFC 6585 §5: 431)")
def test_header_section_too_large_is_431_with_default_limit(asgi):
    big = [(f"X-{i}", "v" * 1000) for i in range(20)]  # 20 KB > 16 KiB
    with asgi.raw() as c:
        c.send(GOOD + request("GET", "/path", headers=big))
        assert c.read_response().body == GOOD_BODY
        _assert_rejected(c, {431})


@pytest.mark.ringloop_only("uvicorn has no header-count limit (RFC 6585 §5: 431)")
def test_too_many_headers_is_431_with_default_limit(asgi):
    many = [(f"X-{i}", "v") for i in range(150)]  # > 100
    with asgi.raw() as c:
        c.send(GOOD + request("GET", "/path", headers=many))
        assert c.read_response().body == GOOD_BODY
        _assert_rejected(c, {431})


def test_configured_request_line_limit(limited):
    assert exchange(limited, request("GET", "/path?" + "q" * 200)).status == 200
    with limited.raw() as c:
        c.send(request("GET", "/path?" + "q" * 1000))
        _assert_rejected(c, {414})


def test_configured_header_limits(limited):
    ok = [(f"X-{i}", "v" * 100) for i in range(5)]
    assert exchange(limited, request("GET", "/path", headers=ok)).status == 200
    with limited.raw() as c:
        c.send(request("GET", "/path", headers=[(f"X-{i}", "v") for i in range(20)]))
        _assert_rejected(c, {431})
    with limited.raw() as c:
        c.send(request("GET", "/path", headers=[("X-Big", "v" * 4000)]))
        _assert_rejected(c, {431})


def test_body_at_the_limit_is_accepted(limited):
    body = b"b" * 1000
    assert exchange(limited, request("POST", "/echo", body=body)).body == body
    data = request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
    assert exchange(limited, data + chunked([body[:500], body[500:]])).body == body


def test_content_length_over_the_limit_is_413(limited):
    with limited.raw() as c:
        c.send(request("POST", "/echo", headers=[("Content-Length", "1001")]))
        # Answered from the declared length, before any body byte is sent.
        _assert_rejected(c, {413})


def test_chunked_body_over_the_limit_is_413(limited):
    with limited.raw() as c:
        c.send(
            request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
            + chunked([b"x" * 600, b"y" * 600])
        )
        _assert_rejected(c, {413})


def test_413_reaches_a_client_that_is_still_sending(limited):
    # A client that sends its whole body before it reads (http.client, curl, most libraries)
    # must get to read the 413: had the server closed with the body unread, the kernel would
    # answer the rest with an RST, the client's send would fail (EPIPE / ECONNRESET) and it
    # would raise without reading the answer. The server half-closes and drains instead.
    with limited.raw(timeout=20) as c:
        c.send(request("POST", "/echo", headers=[("Content-Length", str(8 * MiB))]))
        time.sleep(0.3)  # the 413 is written and the server has stopped reading requests
        errors: list[OSError] = []

        def send_body() -> None:
            try:
                for _ in range(8):
                    c.sock.sendall(b"x" * MiB)
            except OSError as e:
                errors.append(e)

        sender = threading.Thread(target=send_body)
        sender.start()
        sender.join(20)
        assert not errors, f"sending the body failed: {errors[0]!r}"
        _assert_rejected(c, {413})


def test_body_limit_applies_to_a_body_the_app_does_not_read(limited):
    # The unread body is skipped for the next request; a skipped body is still limited.
    with limited.raw() as c:
        c.send(request("POST", "/noread", body=b"z" * 5000) + GOOD)
        _assert_rejected(c, {413})
