//! The request line and what a parsed head exposes.

use super::*;

#[test]
fn a_small_get() {
    with_head(b"GET /a/b?x=1&y HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Empty:\r\n\r\n", |h| {
        assert_eq!(h.method(), b"GET");
        assert_eq!(h.method_kind(), Method::Get);
        assert_eq!(h.target(), b"/a/b?x=1&y");
        assert_eq!(h.path(), b"/a/b");
        assert_eq!(h.query(), b"x=1&y");
        assert_eq!(h.version(), Version::Http11);
        assert_eq!(h.version().as_str(), "1.1");
        let fields: Vec<_> = h.headers().collect();
        assert_eq!(fields, vec![(&b"Host"[..], &b"example.com"[..]), (b"Accept", b"*/*"), (b"X-Empty", b"")]);
        assert_eq!(h.header(b"accept"), Some(&b"*/*"[..]));
        assert_eq!(h.header(b"missing"), None);
        assert_eq!(h.framing(), Framing::None);
        assert!(h.keep_alive());
        assert!(!h.expect_continue());
        assert_eq!(h.upgrade(), None);
    });
}

#[test]
fn values_lose_their_ows_and_names_keep_their_case() {
    with_head(b"GET / HTTP/1.1\r\nHost:   a  \r\nX-MiXed:\t v w \t\r\n\r\n", |h| {
        assert_eq!(h.headers().collect::<Vec<_>>(), vec![(&b"Host"[..], &b"a"[..]), (b"X-MiXed", b"v w")]);
    });
}

#[test]
fn leading_empty_lines_are_skipped() {
    // RFC 9112 §2.2: SHOULD ignore at least one empty line before the request line.
    let (evs, _) = serve(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(evs[0], Ev::Head(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec()));
    // ... and an empty line after the last request is not a request.
    let (evs, _) = serve(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\r\n");
    assert_eq!(evs.last(), Some(&Ev::Closed));
}

#[test]
fn methods() {
    accepted(b"PURGE / HTTP/1.1\r\nHost: a\r\n\r\n", b"");
    // Methods are case-sensitive tokens: `get` is a method, only not GET.
    with_head(b"get / HTTP/1.1\r\nHost: a\r\n\r\n", |h| assert_eq!(h.method_kind(), Method::Other));
    refused(b"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidMethod);
    refused(b"GE\x00T / HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidMethod);
    // A TLS ClientHello to the plaintext port: refused at its first byte, not at a timeout.
    let (evs, _) = serve_with(b"\x16\x03\x01\x00\xa5\x01\x00\x00", || 1, Limits::default());
    assert_eq!(evs, vec![Ev::Error(Error::InvalidMethod)]);
}

#[test]
fn request_line_shape() {
    refused(b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidRequestLine);
    refused(b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", Error::InvalidRequestLine);
    refused(b"GET /\r\nHost: a\r\n\r\n", Error::InvalidRequestLine);
    refused(b"GET\r\n\r\n", Error::InvalidRequestLine);
    refused(b"GET / HTTP/1.1 extra\r\nHost: a\r\n\r\n", Error::InvalidRequestLine);
}

#[test]
fn versions() {
    refused(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", Error::VersionNotSupported);
    refused(b"GET / HTTP/0.9\r\nHost: a\r\n\r\n", Error::VersionNotSupported);
    // RFC 9110 §2.5 says SHOULD serve 1.2 as 1.1; we answer 505 (see head::classify_request_line).
    refused(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", Error::VersionNotSupported);
    refused(b"GET / http/1.1\r\nHost: a\r\n\r\n", Error::InvalidVersion);
    refused(b"GET / HTTP/1\r\nHost: a\r\n\r\n", Error::InvalidVersion);
    refused(b"GET / HTTP/1.10\r\nHost: a\r\n\r\n", Error::InvalidVersion);
    refused(b"GET / FOO/1.1\r\nHost: a\r\n\r\n", Error::InvalidVersion);
    with_head(b"GET / HTTP/1.0\r\n\r\n", |h| assert_eq!(h.version(), Version::Http10));
}

#[test]
fn target_bytes() {
    // VCHAR only. httparse and uvicorn pass UTF-8 through; h11 refuses it, as we do.
    refused(b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidTarget);
    refused(b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidTarget);
    refused(b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidTarget);
    refused(b"GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidTarget);
    refused(b"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", Error::InvalidTarget);
    accepted(b"GET /caf%C3%A9?q=%20 HTTP/1.1\r\nHost: a\r\n\r\n", b"");
}

#[test]
fn target_forms() {
    // origin-form
    accepted(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"");
    // asterisk-form: OPTIONS only
    with_head(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", |h| assert_eq!(h.path(), b"*"));
    refused(b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    // absolute-form: any method but CONNECT
    with_head(b"GET http://example.com:8080/p/q?x=1 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", |h| {
        assert_eq!(h.path(), b"/p/q");
        assert_eq!(h.query(), b"x=1");
        assert_eq!(h.authority(), Some(&b"example.com:8080"[..]));
    });
    with_head(b"GET https://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", |h| {
        assert_eq!(h.path(), b"/");
        assert_eq!(h.authority(), Some(&b"example.com"[..]));
    });
    with_head(b"GET http://example.com?x HTTP/1.1\r\nHost: example.com\r\n\r\n", |h| {
        assert_eq!(h.path(), b"/");
        assert_eq!(h.query(), b"x");
        assert_eq!(h.authority(), Some(&b"example.com"[..]));
    });
    // The authority without userinfo; origin-form, `*` and CONNECT have none.
    with_head(b"GET http://u:p@other.test:81/ HTTP/1.1\r\nHost: a\r\n\r\n", |h| assert_eq!(h.authority(), Some(&b"other.test:81"[..])));
    with_head(b"GET /p HTTP/1.1\r\nHost: a\r\n\r\n", |h| assert_eq!(h.authority(), None));
    with_head(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", |h| assert_eq!(h.authority(), None));
    refused(b"GET 1http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"GET mailto:a@b HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    // authority-form: CONNECT only, and CONNECT only that
    with_head(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", |h| {
        assert_eq!(h.path(), b"example.com:443");
        assert_eq!(h.query(), b"");
        assert_eq!(h.authority(), None);
    });
    refused(b"GET example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT example.com: HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT a:1:443 HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT [::1] HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    refused(b"CONNECT :443 HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
    with_head(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", |h| assert_eq!(h.target(), b"[::1]:443"));
    refused(b"CONNECT http://example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n", Error::TargetForm);
}

#[test]
fn framing_seen_on_the_head() {
    with_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", |h| assert_eq!(h.framing(), Framing::None));
    with_head(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n", |h| {
        assert_eq!(h.framing(), Framing::Length(12))
    });
    with_head(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", |h| {
        assert_eq!(h.framing(), Framing::Chunked)
    });
}

#[test]
fn bodies_by_content_length() {
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world", b"hello world");
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", b"");
    // The peer closing inside a body is an error, not a short body.
    let (evs, _) = serve(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello");
    assert_eq!(evs.last(), Some(&Ev::Error(Error::IncompleteBody)));
    let (evs, _) = serve(b"GET / HTTP/1.1\r\nHost: a\r\n");
    assert_eq!(evs, vec![Ev::Error(Error::IncompleteHead)]);
}
