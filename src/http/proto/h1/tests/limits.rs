//! Each limit, at its edge: exactly at it passes, one past it gets its status.

use super::*;

fn get_with_target(len: usize) -> Vec<u8> {
    // "GET " + target + " HTTP/1.1" is the request line.
    let mut req = b"GET /".to_vec();
    req.resize(4 + len, b'a');
    req.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    req
}

#[test]
fn request_line() {
    let l = Limits { max_request_line: 64, ..Limits::default() };
    // 4 + target + 9 = 64
    let (evs, _) = serve_limits(&get_with_target(51), l.clone());
    assert!(matches!(evs[0], Ev::Head(_)), "{evs:?}");
    let (evs, out) = serve_limits(&get_with_target(52), l.clone());
    assert_eq!(evs, vec![Ev::Error(Error::RequestLineTooLong)]);
    assert!(out.starts_with(b"HTTP/1.1 414 URI Too Long\r\n"));
    // Refused as soon as the line is past the limit: the rest never has to arrive.
    let mut conn = Conn::new(l);
    conn.feed(&get_with_target(52)[..66]);
    assert_eq!(conn.poll(), Err(Error::RequestLineTooLong));
}

fn get_with_fields(value_len: usize, count: usize) -> Vec<u8> {
    let mut req = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..count {
        req.extend_from_slice(format!("X-{i:03}: ").as_bytes());
        req.extend(std::iter::repeat_n(b'v', value_len));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req
}

#[test]
fn header_section_size() {
    // Host line 9 + one field line (7 + n + 2) + final CRLF 2 = 20 + n bytes.
    let l = Limits { max_header_bytes: 100, ..Limits::default() };
    let (evs, _) = serve_limits(&get_with_fields(80, 1), l.clone());
    assert!(matches!(evs[0], Ev::Head(_)), "{evs:?}");
    let (evs, out) = serve_limits(&get_with_fields(81, 1), l);
    assert_eq!(evs, vec![Ev::Error(Error::HeaderSectionTooLarge)]);
    assert!(out.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"));
}

#[test]
fn header_count() {
    // Host counts: 1 + 9 = 10 fields pass, 11 do not.
    let l = Limits { max_headers: 10, ..Limits::default() };
    let (evs, _) = serve_limits(&get_with_fields(1, 9), l.clone());
    assert!(matches!(evs[0], Ev::Head(_)), "{evs:?}");
    let (evs, out) = serve_limits(&get_with_fields(1, 10), l);
    assert_eq!(evs, vec![Ev::Error(Error::TooManyHeaders)]);
    assert!(out.starts_with(b"HTTP/1.1 431 "));
    // The cap holds whatever the limit says.
    let huge = Limits { max_headers: 100_000, max_header_bytes: 1 << 20, ..Limits::default() };
    let (evs, _) = serve_limits(&get_with_fields(1, head::MAX_HEADERS_CAP), huge);
    assert_eq!(evs, vec![Ev::Error(Error::TooManyHeaders)]);
}

#[test]
fn body_size() {
    let l = Limits { max_body: Some(5), ..Limits::default() };
    let ok = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(serve_limits(ok, l.clone()).0[1], Ev::Data(b"hello".to_vec()));
    // Content-Length past the limit is refused on the head, before any body (or 100) is sent.
    let (evs, out) =
        serve_limits(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nExpect: 100-continue\r\n\r\n", l.clone());
    assert_eq!(evs, vec![Ev::Error(Error::BodyTooLarge)]);
    assert!(out.starts_with(b"HTTP/1.1 413 Content Too Large\r\n"));
    // Chunked: when the sizes add up past it.
    let chunked = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n3\r\nlo!\r\n0\r\n\r\n";
    let (evs, _) = serve_limits(chunked, l);
    assert_eq!(evs.last(), Some(&Ev::Error(Error::BodyTooLarge)));
    // None (the default) is no limit.
    accepted(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"
            .iter()
            .copied()
            .chain(std::iter::repeat_n(b'x', 100000))
            .collect::<Vec<_>>()
            .as_slice(),
        &[b'x'; 100000],
    );
}

#[test]
fn errors_carry_status_and_rule() {
    assert_eq!(Error::ContentLengthAndTransferEncoding.rule(), "content-length-and-transfer-encoding");
    assert_eq!(Error::ContentLengthAndTransferEncoding.status(), 400);
    assert_eq!(Error::RequestLineTooLong.status(), 414);
    assert_eq!(Error::HeaderSectionTooLarge.status(), 431);
    assert_eq!(Error::TooManyHeaders.status(), 431);
    assert_eq!(Error::BodyTooLarge.status(), 413);
    assert_eq!(Error::VersionNotSupported.status(), 505);
    assert_eq!(Error::TransferCodingNotImplemented.status(), 501);
    assert_eq!(Error::BareCr.to_string(), "bare-cr (400)");
    assert_eq!(EncodeError::BodyTooLong.rule(), "body-longer-than-content-length");
}
