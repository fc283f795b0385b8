"""HTTP/1.1 on the wire (RFC 9112, RFC 9110), with raw sockets, on ringloop's server (both loop
backends) and uvicorn (httptools and h11): keep-alive and pipelining, request bodies
(Content-Length, chunked with extensions and trailers), `Expect: 100-continue`, HEAD, 204/304,
chunked responses, HTTP/1.0, target forms and the Host rules. Malformed requests, smuggling
and the limits are in test_server_rejects.py.

Where uvicorn itself is lax against the RFC, the case is marked `reference_lax` with what
uvicorn does, and only ringloop is held to the RFC there.
"""

from __future__ import annotations

import random
import time

import pytest
from srv_harness import (
    BOTH,
    GOOD,
    GOOD_BODY,
    H11,
    HTTPTOOLS,
    chunked,
    exchange,
    expect_path,
    request,
)

pytestmark = pytest.mark.timeout(60)

# -- keep-alive and pipelining ---------------------------------------------------------------------


def test_keep_alive_serves_sequential_requests(asgi):
    with asgi.raw() as c:
        for i in range(5):
            c.send(request("GET", f"/path?i={i}"))
            r = c.read_response()
            expect_path(r, "GET", "/path", f"i={i}")
            assert r.keep_alive
        assert not c.closed(0.2), "a keep-alive connection was closed after 5 requests"


def _pipeline_batch():
    """16 requests of every framing, and the body each response must carry."""
    rng = random.Random(16)
    reqs, want = [], []
    for i in range(16):
        kind = i % 4
        if kind == 0:
            reqs.append(request("GET", f"/path?i={i}"))
            want.append(f"GET /path i={i}".encode())
        elif kind == 1:
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
            reqs.append(request("POST", "/echo", body=body))
            want.append(body)
        elif kind == 2:
            parts = [bytes([65 + j]) * rng.randrange(1, 50) for j in range(rng.randrange(1, 6))]
            reqs.append(
                request("PUT", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(parts)
            )
            want.append(b"".join(parts))
        else:
            reqs.append(request("DELETE", f"/path?i={i}", body=b""))
            want.append(f"DELETE /path i={i}".encode())
    return reqs, want


def test_sixteen_pipelined_requests_answered_in_order(asgi):
    reqs, want = _pipeline_batch()
    with asgi.raw() as c:
        c.send(b"".join(reqs))
        got = [c.read_response().body for _ in reqs]
        assert got == want
        assert not c.closed(0.2)


def test_pipelined_requests_in_fragments(asgi):
    # The same batch, written in random small pieces: no request boundary, head or chunk line
    # may depend on how the bytes arrive.
    reqs, want = _pipeline_batch()
    data = b"".join(reqs)
    rng = random.Random(7)
    with asgi.raw() as c:
        i = 0
        while i < len(data):
            n = rng.randrange(1, 200)
            c.send(data[i : i + n])
            i += n
            if rng.random() < 0.05:
                time.sleep(0.002)
        got = [c.read_response().body for _ in reqs]
        assert got == want


def test_connection_close_request_is_honoured(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/path", headers=[("Connection", "close")]))
        r = c.read_response()
        expect_path(r, "GET", "/path")
        assert "close" in (r.header("connection") or "").lower()
        assert c.closed()


def test_requests_after_connection_close_are_not_served(asgi):
    # RFC 9112 §9.6: a server that sees `close` must not process further requests on it.
    with asgi.raw() as c:
        c.send(
            request("GET", "/path?n=1", headers=[("Connection", "close")])
            + request("GET", "/path?n=2")
        )
        r = c.read_response()
        expect_path(r, "GET", "/path", "n=1")
        assert c.rest() == b""


def test_unread_body_is_skipped_before_the_next_request(asgi):
    # The application answers without reading the body: the server must still find the next
    # request after it (or close the connection, saying so) — never read the body as a head.
    body = b"GET /path?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    for framing in ("length", "chunked"):
        if framing == "length":
            req = request("POST", "/noread", body=body)
        else:
            req = request("POST", "/noread", headers=[("Transfer-Encoding", "chunked")])
            req += chunked([body])
        with asgi.raw() as c:
            c.send(req + request("GET", "/path?n=2"))
            r = c.read_response()
            assert r.body == b"did not read"
            if "close" in (r.header("connection") or ""):
                assert c.rest() == b""
            else:
                expect_path(c.read_response(), "GET", "/path", "n=2")


def test_idle_keep_alive_connection_closed_after_timeout(asgi_kind, pool):
    server = pool.get(asgi_kind, "srv_asgi_app:app", timeout_keep_alive=1)
    with server.raw() as c:
        c.send(request("GET", "/path"))
        expect_path(c.read_response(), "GET", "/path")
        t0 = time.monotonic()
        assert c.closed(timeout=8), "idle connection not closed after --timeout-keep-alive 1"
        assert time.monotonic() - t0 >= 0.5  # not closed at once: it waited for the timeout


# -- request bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 65536, 1_000_003])
def test_content_length_body_echoed_exactly(asgi, size):
    body = random.Random(size).randbytes(size)
    r = exchange(asgi, request("POST", "/echo", body=body))
    assert r.status == 200
    assert r.body == body


def test_chunked_body_with_extensions_and_trailers(asgi):
    data = (
        request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
        + b"5;name=value\r\nhello\r\n"
        + b'6;a;b="quoted string"\r\n world\r\n'
        + b"0;last\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n"
    )
    with asgi.raw() as c:
        c.send(data + GOOD)
        r = c.read_response()
        assert r.status == 200
        assert r.body == b"hello world"
        assert (
            c.read_response().body == GOOD_BODY
        )  # the trailers were consumed, not parsed as a head


def test_chunked_body_of_many_small_chunks(asgi):
    rng = random.Random(3)
    parts = [rng.randbytes(rng.randrange(1, 8)) for _ in range(2000)]
    data = request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")]) + chunked(parts)
    r = exchange(asgi, data)
    assert r.body == b"".join(parts)


def test_chunked_body_with_uppercase_hex_sizes(asgi):
    data = request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
    data += b"A\r\n0123456789\r\n1f\r\n" + b"z" * 31 + b"\r\n0\r\n\r\n"
    assert exchange(asgi, data).body == b"0123456789" + b"z" * 31


def test_transfer_encoding_is_case_insensitive(asgi):
    data = request("POST", "/echo", headers=[("Transfer-Encoding", "Chunked")]) + chunked([b"ok"])
    assert exchange(asgi, data).body == b"ok"


# -- Expect: 100-continue --------------------------------------------------------------------------


def test_100_continue_sent_when_the_app_reads_the_body(asgi):
    with asgi.raw() as c:
        c.send(
            request("POST", "/echo", headers=[("Content-Length", "5"), ("Expect", "100-continue")])
        )
        interim = c.read_response(interim=True)  # before any body byte was sent
        assert interim.status == 100
        c.send(b"hello")
        r = c.read_response()
        assert (r.status, r.body) == (200, b"hello")


def test_no_100_continue_when_the_app_answers_without_reading(asgi):
    with asgi.raw() as c:
        c.send(
            request(
                "POST", "/noread", headers=[("Content-Length", "5"), ("Expect", "100-continue")]
            )
        )
        r = c.read_response(interim=True)
        assert r.status == 200, "a 100 was sent although the application never read the body"
        assert r.body == b"did not read"
        if "close" in (r.header("connection") or ""):
            assert c.closed()
        else:
            # Keeping the connection: the client now sends the body, then the next request.
            c.send(b"hello" + request("GET", "/path?n=2"))
            expect_path(c.read_response(interim=True), "GET", "/path", "n=2")


@pytest.mark.reference_lax(
    "httptools sends 100 (Continue) to an HTTP/1.0 client (RFC 9110 §10.1.1: MUST ignore)",
    kinds=HTTPTOOLS,
)
def test_100_continue_ignored_for_http10(asgi):
    # RFC 9110 §10.1.1: a server MUST ignore a 100-continue expectation in an HTTP/1.0 request.
    with asgi.raw() as c:
        c.send(
            request(
                "POST",
                "/echo",
                version="HTTP/1.0",
                host=None,
                headers=[("Content-Length", "5"), ("Expect", "100-continue")],
            )
        )
        time.sleep(0.3)
        c.send(b"hello")
        r = c.read_response(interim=True)
        assert r.status == 200, "HTTP/1.0 got a 100 (Continue)"
        assert r.body == b"hello"


# -- responses without a body, HEAD, chunked -------------------------------------------------------


def _fields(resp, drop=("date",)):
    return sorted((n, v) for n, v in resp.headers if n not in drop)


def test_head_has_the_headers_of_get_and_no_body(asgi):
    get = exchange(asgi, request("GET", "/fixed"))
    with asgi.raw() as c:
        c.send(request("HEAD", "/fixed") + GOOD)
        head = c.read_response(head=True)
        assert head.status == get.status
        assert _fields(head) == _fields(get)
        # No body byte was sent: the next bytes are the next response.
        assert c.read_response().body == GOOD_BODY


def test_head_of_a_streamed_response_has_no_body(asgi):
    with asgi.raw() as c:
        c.send(request("HEAD", "/stream") + GOOD)
        head = c.read_response(head=True)
        assert head.status == 200
        assert head.header("x-stream") == "1"
        assert c.read_response().body == GOOD_BODY


@pytest.mark.parametrize("code", [204, 304])
def test_no_body_statuses(asgi, code):
    with asgi.raw() as c:
        c.send(request("GET", f"/status?code={code}") + GOOD)
        r = c.read_response()
        assert r.status == code
        assert r.header("transfer-encoding") is None
        assert c.read_response().body == GOOD_BODY


@pytest.mark.reference_lax("uvicorn sends `content-length: 0` with a 204 (RFC 9110 §8.6: MUST NOT)")
def test_204_never_carries_content_length(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/status?code=204&length=1") + GOOD)
        r = c.read_response()
        assert r.status == 204
        assert r.header("content-length") is None
        assert r.header("transfer-encoding") is None
        assert c.read_response().body == GOOD_BODY


@pytest.mark.parametrize("code", [204, 304])
def test_body_an_app_gives_a_no_body_status_never_reaches_the_wire(asgi, code):
    with asgi.raw() as c:
        c.send(request("GET", f"/status?code={code}&body=1") + GOOD)
        r = c.read_response()
        assert r.status == code
        rest = c.rest(timeout=1)
        assert b"must not be sent" not in rest
        # Either the connection closed, or what follows is exactly the next response.
        if rest:
            assert rest.startswith(b"HTTP/1.1 200"), rest[:100]


def test_response_without_length_is_chunked(asgi):
    r = exchange(asgi, request("GET", "/stream?n=7&size=1000"))
    assert r.status == 200
    assert r.chunked
    assert r.body == b"".join(bytes([97 + i]) * 1000 for i in range(7))


def test_response_with_length_is_not_chunked(asgi):
    r = exchange(asgi, request("GET", "/download?size=300000"))
    assert r.header("content-length") == "300000"
    assert not r.chunked
    assert len(r.body) == 300000


def test_date_and_server_headers(asgi):
    from email.utils import parsedate_to_datetime

    r = exchange(asgi, request("GET", "/fixed"))
    date = r.header("date")
    assert date and date.endswith(" GMT")
    assert parsedate_to_datetime(date).tzinfo is not None  # an IMF-fixdate
    assert r.header("server")
    assert len(r.all("date")) == 1 and len(r.all("server")) == 1


def test_no_server_and_date_headers_and_extra_headers(asgi_kind, pool):
    server = pool.get(
        asgi_kind,
        "srv_asgi_app:app",
        server_header=False,
        date_header=False,
        header="X-Deploy:blue",
    )
    r = exchange(server, request("GET", "/fixed"))
    assert r.header("server") is None
    assert r.header("date") is None
    assert r.header("x-deploy") == "blue"
    assert r.header("x-fixed") == "yes"


# -- HTTP/1.0 --------------------------------------------------------------------------------------


def test_http10_closes_by_default(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/fixed", version="HTTP/1.0", host=None))
        r = c.read_response()
        assert r.status == 200 and len(r.body) == 100
        assert c.closed()


@pytest.mark.reference_lax(
    "uvicorn-httptools sends `transfer-encoding: chunked` to an HTTP/1.0 client "
    "(RFC 9112 §6.1: MUST NOT)",
    kinds=("uvicorn-httptools",),
)
def test_http10_streamed_response_is_delimited_by_close(asgi):
    with asgi.raw() as c:
        c.send(request("GET", "/stream?n=3&size=5", version="HTTP/1.0", host=None))
        r = c.read_response()
        assert r.header("transfer-encoding") is None
        assert r.body == b"aaaaabbbbbccccc"
        assert c.closed()


@pytest.mark.reference_lax(
    "uvicorn closes HTTP/1.0 connections even when asked to keep them (optional per RFC 9112 "
    "§9.3; ringloop supports it)"
)
def test_http10_keep_alive_on_request(asgi):
    with asgi.raw() as c:
        for i in range(3):
            c.send(
                request(
                    "GET",
                    f"/path?i={i}",
                    version="HTTP/1.0",
                    host=None,
                    headers=[("Connection", "keep-alive")],
                )
            )
            r = c.read_response()
            expect_path(r, "GET", "/path", f"i={i}")
            assert r.version in ("HTTP/1.0", "HTTP/1.1")
            assert "keep-alive" in (r.header("connection") or "").lower()
        assert not c.closed(0.2)


def test_http10_without_host_is_fine(asgi):
    r = exchange(asgi, request("GET", "/path", version="HTTP/1.0", host=None))
    expect_path(r, "GET", "/path")


# -- request targets and Host ----------------------------------------------------------------------


@pytest.mark.reference_lax("h11 hands the app the whole absolute URI as `path`", kinds=H11)
def test_absolute_form_target(asgi):
    r = exchange(asgi, b"GET http://example.test/path?q=1 HTTP/1.1\r\nHost: example.test\r\n\r\n")
    expect_path(r, "GET", "/path", "q=1")


@pytest.mark.reference_lax(
    "uvicorn keeps the Host field when the target is absolute-form", kinds=BOTH
)
def test_absolute_form_target_overrides_host(asgi):
    r = exchange(asgi, b"GET http://other.test:81/scope HTTP/1.1\r\nHost: example.test\r\n\r\n")
    hosts = [v["bytes"] for (n, v) in r.json()["headers"] if n["bytes"] == "host"]
    assert hosts == ["other.test:81"]


def test_options_asterisk_reaches_the_app(asgi):
    r = exchange(asgi, b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n")
    assert r.status == 404 and r.body == b"no route *"


def test_unknown_but_valid_method_reaches_the_app(asgi):
    r = exchange(asgi, request("PURGE", "/path"))
    expect_path(r, "PURGE", "/path")


@pytest.mark.reference_lax(
    "httptools (llhttp) knows a fixed list of methods and answers 400 to other tokens",
    kinds=HTTPTOOLS,
)
def test_lowercase_method_is_case_sensitive(asgi):
    # Methods are case-sensitive (RFC 9110 §9.1): `get` is a different, valid token.
    r = exchange(asgi, request("get", "/path"))
    expect_path(r, "get", "/path")
