//! The response writer, through `Conn` so each response answers a real request.

use super::*;

const STAMP: Stamp<'static> = Stamp { date: None, server: None };

/// A connection with one request read (its body too), ready for its response.
fn ready(req: &[u8]) -> Conn {
    let mut conn = Conn::new(Limits::default());
    conn.feed(req);
    assert!(matches!(conn.poll(), Ok(Event::Head(_))));
    while conn.poll() != Ok(Event::End) {}
    conn
}

const GET11: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
const GET10: &[u8] = b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
const HEAD: &[u8] = b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n";

/// Write a response with `fields`, `body_len` known or not, and `chunks` of body.
fn respond_with(
    req: &[u8],
    status: u16,
    fields: &[(&[u8], &[u8])],
    body_len: Option<u64>,
    chunks: &[&[u8]],
) -> Result<(String, After), EncodeError> {
    let mut conn = ready(req);
    let mut out = Vec::new();
    let mut r = conn.response(&mut out, status)?;
    for (n, v) in fields {
        r.header(n, v)?;
    }
    r.end(body_len, &STAMP)?;
    for c in chunks {
        conn.write_body(&mut out, c)?;
    }
    let after = conn.end_response(&mut out)?;
    Ok((String::from_utf8_lossy(&out).into_owned(), after))
}

fn ok(req: &[u8], status: u16, fields: &[(&[u8], &[u8])], body_len: Option<u64>, chunks: &[&[u8]]) -> String {
    respond_with(req, status, fields, body_len, chunks).unwrap().0
}

#[test]
fn framing_by_what_is_known() {
    // The whole body known when the head is written: Content-Length.
    assert_eq!(
        ok(GET11, 200, &[(b"content-type", b"text/plain")], Some(5), &[b"hello"]),
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello"
    );
    // The application's Content-Length.
    assert_eq!(
        ok(GET11, 200, &[(b"Content-Length", b"5")], None, &[b"hel", b"lo"]),
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    );
    // Unknown on 1.1: chunked; empty writes send nothing (an empty chunk would end the body).
    assert_eq!(
        ok(GET11, 200, &[], None, &[b"hel", b"", b"lo"]),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"
    );
    // The application's own `transfer-encoding: chunked` is the same thing.
    assert_eq!(
        ok(GET11, 200, &[(b"transfer-encoding", b"chunked")], None, &[b"hi"]),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    );
    // Unknown on 1.0: close-delimited, and the connection closes.
    let (out, after) = respond_with(GET10, 200, &[], None, &[b"hello"]).unwrap();
    assert_eq!(out, "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhello");
    assert_eq!(after, After::Close);
    // ... even if the application asked for chunked, which a 1.0 client cannot read.
    let (out, _) = respond_with(GET10, 200, &[(b"transfer-encoding", b"chunked")], None, &[b"hi"]).unwrap();
    assert_eq!(out, "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhi");
    // Known on 1.0: kept alive, as the client asked.
    let (out, after) = respond_with(GET10, 200, &[], Some(2), &[b"hi"]).unwrap();
    assert_eq!(out, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nhi");
    assert_eq!(after, After::KeepAlive);
}

#[test]
fn no_body_for_head_1xx_204_304() {
    // HEAD: the body is dropped; the length it would have had is told.
    assert_eq!(ok(HEAD, 200, &[], Some(5), &[b"hello"]), "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n");
    assert_eq!(
        ok(HEAD, 200, &[(b"content-length", b"1234")], None, &[b"hello"]),
        "HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n"
    );
    assert_eq!(
        ok(HEAD, 200, &[(b"transfer-encoding", b"chunked")], None, &[b"x"]),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    assert_eq!(ok(HEAD, 200, &[], None, &[]), "HTTP/1.1 200 OK\r\n\r\n");
    // 304: the application's framing fields stay (RFC 9110 §15.4.5), none is added.
    assert_eq!(
        ok(GET11, 304, &[(b"content-length", b"99"), (b"etag", b"\"x\"")], Some(0), &[]),
        "HTTP/1.1 304 Not Modified\r\ncontent-length: 99\r\netag: \"x\"\r\n\r\n"
    );
    assert_eq!(respond_with(GET11, 304, &[], None, &[b"x"]), Err(EncodeError::BodyNotAllowed));
    // 204: framing fields dropped (RFC 9110 §8.6: MUST NOT), a body refused.
    assert_eq!(
        ok(GET11, 204, &[(b"content-length", b"0"), (b"transfer-encoding", b"chunked")], Some(0), &[b""]),
        "HTTP/1.1 204 No Content\r\n\r\n"
    );
    assert_eq!(respond_with(GET11, 204, &[], None, &[b"x"]), Err(EncodeError::BodyNotAllowed));
}

#[test]
fn interim_responses_come_before_the_final_one() {
    let mut conn = ready(GET11);
    let mut out = Vec::new();
    let mut r = conn.response(&mut out, 103).unwrap();
    r.header(b"link", b"</s.css>; rel=preload").unwrap();
    r.header(b"content-length", b"7").unwrap();
    r.end(None, &Stamp { date: Some(b"D"), server: None }).unwrap();
    conn.response(&mut out, 200).unwrap().end(Some(0), &STAMP).unwrap();
    conn.end_response(&mut out).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn refused_fields_leave_nothing_written() {
    for (name, value, err) in [
        (&b"x-a"[..], &b"a\r\nSet-Cookie: evil"[..], EncodeError::InvalidHeaderValue),
        (b"x-a", b"a\nb", EncodeError::InvalidHeaderValue),
        (b"x-a", b"a\rb", EncodeError::InvalidHeaderValue),
        (b"x-a", b"a\x00b", EncodeError::InvalidHeaderValue),
        (b"x a", b"v", EncodeError::InvalidHeaderName),
        (b"x:a", b"v", EncodeError::InvalidHeaderName),
        (b"", b"v", EncodeError::InvalidHeaderName),
        (b"x\r\ny", b"v", EncodeError::InvalidHeaderName),
        (b"content-length", b"-1", EncodeError::InvalidContentLength),
        (b"content-length", b" 5", EncodeError::InvalidContentLength),
        (b"transfer-encoding", b"gzip", EncodeError::UnsupportedTransferEncoding),
    ] {
        let mut conn = ready(GET11);
        let mut out = b"earlier bytes".to_vec();
        let mut r = conn.response(&mut out, 200).unwrap();
        r.header(b"x-first", b"1").unwrap();
        assert_eq!(r.header(name, value), Err(err));
        // Later calls fail too; nothing is appended.
        assert_eq!(r.header(b"x-ok", b"1"), Err(err));
        assert_eq!(r.end(Some(0), &STAMP), Err(err));
        assert_eq!(out, b"earlier bytes");
        // ... so the server can still answer 500.
        assert!(conn.write_error(&mut out, 500, &STAMP));
        assert!(out.starts_with(b"earlier bytesHTTP/1.1 500 Internal Server Error\r\n"));
    }
    // Other controls in values are written (the rule is about splitting).
    assert_eq!(
        ok(GET11, 200, &[(b"x", b"a\tb\x01")], Some(0), &[]),
        "HTTP/1.1 200 OK\r\nx: a\tb\x01\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn dropping_an_unfinished_head_takes_it_back() {
    let mut conn = ready(GET11);
    let mut out = b"x".to_vec();
    {
        let mut r = conn.response(&mut out, 200).unwrap();
        r.header(b"a", b"b").unwrap();
    }
    assert_eq!(out, b"x");
    // And the response can start again.
    conn.response(&mut out, 200).unwrap().end(Some(0), &STAMP).unwrap();
}

#[test]
fn content_length_is_kept_to() {
    assert_eq!(
        respond_with(GET11, 200, &[(b"content-length", b"3")], None, &[b"hello"]),
        Err(EncodeError::BodyTooLong)
    );
    assert_eq!(respond_with(GET11, 200, &[(b"content-length", b"3")], None, &[b"he"]), Err(EncodeError::BodyTooShort));
    assert_eq!(respond_with(GET11, 200, &[], Some(3), &[b"hell"]), Err(EncodeError::BodyTooLong));
    assert_eq!(
        respond_with(GET11, 200, &[(b"content-length", b"3")], Some(4), &[]),
        Err(EncodeError::ContentLengthMismatch)
    );
    assert_eq!(
        respond_with(GET11, 200, &[(b"content-length", b"3"), (b"content-length", b"3")], None, &[]),
        Err(EncodeError::DuplicateContentLength)
    );
    assert_eq!(
        respond_with(GET11, 200, &[(b"content-length", b"3"), (b"transfer-encoding", b"chunked")], None, &[]),
        Err(EncodeError::UnsupportedTransferEncoding)
    );
    // A refused write leaves nothing behind, and the connection will close.
    let mut conn = ready(GET11);
    let mut out = Vec::new();
    conn.response(&mut out, 200).unwrap().end(Some(2), &STAMP).unwrap();
    let len = out.len();
    assert_eq!(conn.write_body(&mut out, b"abc"), Err(EncodeError::BodyTooLong));
    assert_eq!(out.len(), len);
    assert!(conn.will_close());
}

#[test]
fn date_and_server_unless_given() {
    let mut dates = DateCache::new(std::time::UNIX_EPOCH + std::time::Duration::from_secs(784111777));
    dates.refresh(std::time::UNIX_EPOCH + std::time::Duration::from_secs(784111777));
    let stamp = Stamp { date: Some(dates.value()), server: Some(b"ringloop") };
    let mut conn = ready(GET11);
    let mut out = Vec::new();
    conn.response(&mut out, 200).unwrap().end(Some(0), &stamp).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\ncontent-length: 0\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\nserver: ringloop\r\n\r\n"
    );
    let mut conn = ready(GET11);
    let mut out = Vec::new();
    let mut r = conn.response(&mut out, 200).unwrap();
    r.header(b"Date", b"mine").unwrap();
    r.header(b"Server", b"app").unwrap();
    r.end(Some(0), &stamp).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nDate: mine\r\nServer: app\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn status_lines() {
    assert!(ok(GET11, 404, &[], Some(0), &[]).starts_with("HTTP/1.1 404 Not Found\r\n"));
    // Unknown codes get an empty reason, which the grammar allows.
    assert!(ok(GET11, 299, &[], Some(0), &[]).starts_with("HTTP/1.1 299 \r\n"));
    assert!(matches!(ready(GET11).response(&mut Vec::new(), 99), Err(EncodeError::InvalidStatus)));
    assert!(matches!(ready(GET11).response(&mut Vec::new(), 1000), Err(EncodeError::InvalidStatus)));
    // No request, no response.
    assert!(matches!(Conn::new(Limits::default()).response(&mut Vec::new(), 200), Err(EncodeError::NoRequest)));
    assert_eq!(Conn::new(Limits::default()).write_body(&mut Vec::new(), b"x"), Err(EncodeError::NotResponding));
}

#[test]
fn frame_body_for_bodies_sent_without_a_copy() {
    let mut conn = ready(GET11);
    let mut out = Vec::new();
    conn.response(&mut out, 200).unwrap().end(None, &STAMP).unwrap();
    out.clear();
    let suffix = conn.frame_body(&mut out, 300).unwrap();
    assert_eq!((out.as_slice(), suffix), (&b"12c\r\n"[..], Some(&b"\r\n"[..])));
    let mut conn = ready(HEAD);
    let mut out = Vec::new();
    conn.response(&mut out, 200).unwrap().end(Some(300), &STAMP).unwrap();
    assert_eq!(conn.frame_body(&mut out, 300), Ok(None));
}

#[test]
fn canned_answers() {
    for status in [400, 408, 413, 414, 431, 500, 503, 505] {
        let mut out = Vec::new();
        encode::canned(&mut out, status, &STAMP);
        let text = String::from_utf8_lossy(&out);
        let reason = encode::reason(status);
        assert!(!reason.is_empty());
        assert_eq!(text, format!("HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reason}", reason.len()));
    }
}

/// A chunked response ended with `trailers`.
fn with_trailers(req: &[u8], fields: &[(&[u8], &[u8])], trailers: &[(&[u8], &[u8])]) -> Result<String, EncodeError> {
    let mut conn = ready(req);
    let mut out = Vec::new();
    let mut r = conn.response(&mut out, 200)?;
    for (n, v) in fields {
        r.header(n, v)?;
    }
    r.end(None, &STAMP)?;
    conn.write_body(&mut out, b"hi")?;
    conn.end_response_with_trailers(&mut out, trailers.iter().copied())?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn trailers_follow_the_last_chunk_or_are_dropped() {
    let te = b"GET / HTTP/1.1\r\nHost: a\r\nTE: gzip, trailers\r\n\r\n";
    assert!(ready(te).head().unwrap().te_trailers());
    assert!(!ready(GET11).head().unwrap().te_trailers());
    // HTTP/1.0 cannot read chunked: its `TE: trailers` does not count.
    assert!(!ready(b"GET / HTTP/1.0\r\nTE: trailers\r\n\r\n").head().unwrap().te_trailers());
    assert_eq!(
        with_trailers(te, &[], &[(b"x-checksum", b"abc"), (b"content-length", b"9"), (b"grpc-status", b"0")]).unwrap(),
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nx-checksum: abc\r\ngrpc-status: 0\r\n\r\n"
    );
    // No trailer fields: the plain last chunk.
    assert_eq!(with_trailers(te, &[], &[]).unwrap(), "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
    // A Content-Length the application gave, or an HTTP/1.0 client: nowhere to put them.
    assert_eq!(with_trailers(te, &[(b"content-length", b"2")], &[(b"x", b"1")]).unwrap(), "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
    assert_eq!(with_trailers(GET10, &[], &[(b"x", b"1")]).unwrap(), "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhi");
    // A field a head would refuse fails the response.
    assert_eq!(with_trailers(te, &[], &[(b"x", b"a\r\nb: c")]), Err(EncodeError::InvalidHeaderValue));
    assert_eq!(with_trailers(te, &[], &[(b"bad name", b"1")]), Err(EncodeError::InvalidHeaderName));
}
