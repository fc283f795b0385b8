//! The connection's life: pipelining, keep-alive, 100-continue, upgrades, back-pressure,
//! draining, phases.

use super::*;

const GET: &[u8] = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n";
const POST: &[u8] = b"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
const CHUNKED: &[u8] =
    b"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nhe\r\n3\r\nllo\r\n0\r\nT: 1\r\n\r\n";

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn head_of(req: &[u8]) -> Vec<u8> {
    let end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    req[..end].to_vec()
}

#[test]
fn pipelined_requests_in_one_buffer_any_split() {
    let input = concat(&[GET, POST, CHUNKED, GET]);
    // `serve` also runs every split (1, 2, 5 bytes) and wants the same events and output.
    let (evs, out) = serve(&input);
    assert_eq!(
        evs,
        vec![
            Ev::Head(head_of(GET)),
            Ev::End,
            Ev::Head(head_of(POST)),
            Ev::Data(b"hello".to_vec()),
            Ev::End,
            Ev::Head(head_of(CHUNKED)),
            Ev::Data(b"hello".to_vec()),
            Ev::End,
            Ev::Head(head_of(GET)),
            Ev::End,
            Ev::Closed,
        ]
    );
    let one = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    assert_eq!(out, one.repeat(4));
}

#[test]
fn the_next_head_waits_for_the_response() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(&concat(&[b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n", b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n"]));
    assert!(matches!(conn.poll(), Ok(Event::Head(h)) if h.target() == b"/first"));
    assert_eq!(conn.poll(), Ok(Event::End));
    // However often it is asked, the second head stays buffered until the first response ends.
    for _ in 0..3 {
        assert_eq!(conn.poll(), Ok(Event::Paused));
        assert_eq!(conn.phase(), Phase::Respond);
    }
    assert_eq!(conn.head().unwrap().target(), b"/first");
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    // A second response to the same request is refused.
    assert!(matches!(conn.response(&mut out, 200), Err(EncodeError::NoRequest)));
    assert_eq!(conn.end_response(&mut out), Ok(After::KeepAlive));
    assert!(conn.head().is_none());
    assert!(matches!(conn.poll(), Ok(Event::Head(h)) if h.target() == b"/second"));
}

#[test]
fn heads_stay_readable_while_the_body_streams() {
    let mut conn = Conn::new(Limits { max_buffered: 16, ..Limits::default() });
    conn.feed(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\n\r\n0123456789");
    assert!(matches!(conn.poll(), Ok(Event::Head(_))));
    assert_eq!(conn.poll(), Ok(Event::Data(&b"0123456789"[..])));
    for chunk in [&b"abcdefghij"[..], b"ABCDEFGHIJ"] {
        assert_eq!(conn.poll(), Ok(Event::NeedData));
        conn.feed(chunk); // compacts: the head moves to the front, still whole
        assert_eq!(conn.head().unwrap().target(), b"/up");
        assert_eq!(conn.poll(), Ok(Event::Data(chunk)));
    }
    assert_eq!(conn.poll(), Ok(Event::End));
    assert_eq!(conn.head().unwrap().header(b"content-length"), Some(&b"30"[..]));
}

#[test]
fn back_pressure_stops_reading_until_the_body_is_consumed() {
    let mut conn = Conn::new(Limits { max_buffered: 8, ..Limits::default() });
    conn.feed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n");
    assert!(matches!(conn.poll(), Ok(Event::Head(_))));
    assert_eq!(conn.phase(), Phase::Body);
    assert!(conn.wants_read());
    // The application is not reading: bytes pile up only to the limit.
    conn.feed(b"0123456");
    assert!(conn.wants_read());
    conn.feed(b"7");
    assert!(!conn.wants_read());
    assert_eq!(conn.buffered(), 8);
    // It reads: the buffer drains and reading resumes.
    assert_eq!(conn.poll(), Ok(Event::Data(&b"01234567"[..])));
    assert!(conn.wants_read());
}

#[test]
fn incomplete_framing_past_the_read_limit_still_reads() {
    // Trailers (like a head or a chunk-size line) cannot be consumed piecemeal: a part of them
    // larger than `max_buffered` must not stop reading, or the connection would stall.
    let mut conn = Conn::new(Limits { max_buffered: 8, ..Limits::default() });
    conn.feed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Long-Trailer: 0123");
    assert!(matches!(conn.poll(), Ok(Event::Head(_))));
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    assert!(conn.buffered() > 8);
    assert!(conn.wants_read());
    conn.feed(b"456789\r\n\r\n");
    assert_eq!(conn.poll(), Ok(Event::End));
}

#[test]
fn keep_alive_by_version_and_connection() {
    let cases: &[(&[u8], bool, &str)] = &[
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, ""),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", false, "connection: close\r\n"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n", false, "connection: close\r\n"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", true, ""),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", true, ""),
        (b"GET / HTTP/1.0\r\n\r\n", false, "connection: close\r\n"),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true, "connection: keep-alive\r\n"),
        (b"GET / HTTP/1.0\r\nConnection: foo,  Keep-Alive\r\n\r\n", true, "connection: keep-alive\r\n"),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false, "connection: close\r\n"),
    ];
    for (req, keep, field) in cases {
        let mut conn = Conn::new(Limits::default());
        let mut out = Vec::new();
        conn.feed(req);
        let Ok(Event::Head(h)) = conn.poll() else { panic!() };
        assert_eq!(h.keep_alive(), *keep, "{}", String::from_utf8_lossy(req));
        conn.response(&mut out, 204).unwrap().end(None, &Stamp::default()).unwrap();
        let after = conn.end_response(&mut out).unwrap();
        assert_eq!(after, if *keep { After::KeepAlive } else { After::Close });
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("HTTP/1.1 204 No Content\r\n{field}\r\n"),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
}

#[test]
fn set_close_and_the_applications_connection_close() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(GET);
    conn.poll().unwrap();
    conn.set_close();
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::Close));
    assert!(out.ends_with(b"connection: close\r\n\r\n"));
    assert_eq!(conn.poll(), Ok(Event::Closed));
    assert_eq!(conn.phase(), Phase::Closed);

    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(GET);
    conn.poll().unwrap();
    let mut r = conn.response(&mut out, 200).unwrap();
    r.header(b"Connection", b"Close").unwrap();
    r.end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::Close));
    // The application's field is replaced by the server's, never written twice.
    assert_eq!(out, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}

fn expect_continue(body: bool) -> Vec<u8> {
    let mut r = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n".to_vec();
    if body {
        r.extend_from_slice(b"hello");
    }
    r
}

#[test]
fn expect_100_continue_when_the_body_is_first_asked_for() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(&expect_continue(false));
    let Ok(Event::Head(h)) = conn.poll() else { panic!() };
    assert!(h.expect_continue());
    // The I/O layer polls only when the application asks for the body: that is when.
    assert_eq!(conn.poll(), Ok(Event::Continue));
    out.extend_from_slice(CONTINUE);
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    conn.feed(b"hello");
    assert_eq!(conn.poll(), Ok(Event::Data(&b"hello"[..])));
    assert_eq!(conn.poll(), Ok(Event::End));
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::KeepAlive));
    assert_eq!(out, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
}

#[test]
fn no_100_continue_if_the_body_came_anyway_or_for_http10() {
    let mut conn = Conn::new(Limits::default());
    conn.feed(&expect_continue(true));
    conn.poll().unwrap();
    assert_eq!(conn.poll(), Ok(Event::Data(&b"hello"[..])));
    // RFC 9110 §10.1.1: a server MUST ignore 100-continue from HTTP/1.0.
    with_head(b"POST / HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", |h| {
        assert!(!h.expect_continue())
    });
    // Nothing to continue without a body.
    with_head(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", |h| assert!(!h.expect_continue()));
}

#[test]
fn never_100_continue_after_the_response_started() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(&expect_continue(false));
    conn.poll().unwrap();
    // The application answers without reading the body (a 401, say): the client may never send
    // it, so the connection closes rather than guess.
    let r = conn.response(&mut out, 401).unwrap();
    r.end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    assert_eq!(conn.end_response(&mut out), Ok(After::Close));
    assert_eq!(out, b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}

#[test]
fn an_unread_body_is_drained_if_small_else_the_connection_closes() {
    // Small: read and dropped, and the next request is served on the same connection.
    let input = concat(&[POST, GET]);
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(&input[..60]);
    assert!(matches!(conn.poll(), Ok(Event::Head(_))));
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::KeepAlive));
    assert_eq!(conn.phase(), Phase::Body);
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    conn.feed(&input[60..]);
    assert!(matches!(conn.poll(), Ok(Event::Head(h)) if h.target() == b"/1"));

    // Large: closed.
    let mut conn = Conn::new(Limits { max_drain: 4, ..Limits::default() });
    let mut out = Vec::new();
    conn.feed(POST);
    conn.poll().unwrap();
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::Close));

    // Chunked, more than the drain budget: closed when the budget runs out.
    let mut conn = Conn::new(Limits { max_drain: 4, ..Limits::default() });
    let mut out = Vec::new();
    conn.feed(&CHUNKED[..head_of(CHUNKED).len()]);
    conn.poll().unwrap();
    conn.response(&mut out, 200).unwrap().end(Some(0), &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::KeepAlive));
    conn.feed(&CHUNKED[head_of(CHUNKED).len()..]);
    assert_eq!(conn.poll(), Ok(Event::Closed));
}

#[test]
fn an_application_that_answers_on_the_head_in_any_split() {
    // Bodies the application never reads are drained (they are within `max_drain`), so the
    // pipelined requests behind them are still served, in order.
    let input = concat(&[GET, POST, CHUNKED, GET]);
    let whole = testing::serve_app(&input, || usize::MAX, Limits::default(), true);
    for split in [1, 3] {
        assert_eq!(testing::serve_app(&input, || split, Limits::default(), true), whole);
    }
    let heads = [GET, POST, CHUNKED, GET].map(|r| Ev::Head(head_of(r)));
    assert_eq!(whole.0, [&heads[..], &[Ev::Closed]].concat());
    assert_eq!(whole.1, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".repeat(4));
    // With a drain budget too small for the first body, the connection closes after it.
    let small = Limits { max_drain: 4, ..Limits::default() };
    let (evs, _) = testing::serve_app(&input, || usize::MAX, small, true);
    assert_eq!(evs, vec![heads[0].clone(), heads[1].clone(), Ev::Closed]);
}

#[test]
fn upgrade_hands_over_the_remaining_bytes() {
    let req =
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello";
    let (evs, out) = serve(req);
    assert_eq!(evs, vec![Ev::Head(head_of(req)), Ev::End, Ev::Upgraded(b"\x81\x05hello".to_vec())]);
    assert_eq!(out, b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n");
    // Without `Connection: upgrade`, or in HTTP/1.0, Upgrade means nothing (RFC 9110 §7.8).
    with_head(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", |h| assert_eq!(h.upgrade(), None));
    with_head(b"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", |h| {
        assert_eq!(h.upgrade(), None)
    });
    // ... and a 101 for a request that did not ask is refused.
    let mut conn = Conn::new(Limits::default());
    conn.feed(GET);
    conn.poll().unwrap();
    assert!(matches!(conn.response(&mut Vec::new(), 101), Err(EncodeError::UpgradeNotRequested)));
}

#[test]
fn connect_2xx_is_a_tunnel() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01");
    conn.poll().unwrap();
    let mut r = conn.response(&mut out, 200).unwrap();
    r.header(b"content-length", b"0").unwrap(); // RFC 9110 §9.3.6: MUST NOT be sent; dropped
    r.end(None, &Stamp::default()).unwrap();
    assert_eq!(conn.end_response(&mut out), Ok(After::Upgrade));
    assert_eq!(out, b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(conn.take_upgraded(), b"\x16\x03\x01");
    assert_eq!(conn.phase(), Phase::Closed);
}

#[test]
fn phases() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    assert_eq!(conn.phase(), Phase::Idle);
    conn.feed(b"POST / HTTP/1.1\r\nHo");
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    assert_eq!(conn.phase(), Phase::Head);
    conn.feed(b"st: a\r\nContent-Length: 2\r\n\r\n");
    conn.poll().unwrap();
    assert_eq!(conn.phase(), Phase::Body);
    conn.feed(b"hi");
    conn.poll().unwrap();
    assert_eq!(conn.poll(), Ok(Event::End));
    assert_eq!(conn.phase(), Phase::Respond);
    conn.response(&mut out, 200).unwrap().end(None, &Stamp::default()).unwrap();
    conn.write_body(&mut out, b"x").unwrap();
    conn.end_response(&mut out).unwrap();
    assert_eq!(conn.phase(), Phase::Idle);
    assert_eq!(out, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n");
}

#[test]
fn errors_are_final_and_answered_once() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(conn.poll(), Err(Error::MissingHost));
    assert_eq!(conn.poll(), Err(Error::MissingHost));
    assert!(!conn.wants_read());
    let stamp = Stamp { date: Some(b"Sun, 06 Nov 1994 08:49:37 GMT"), server: Some(b"ringloop") };
    assert!(conn.write_error(&mut out, 400, &stamp));
    assert!(!conn.write_error(&mut out, 400, &stamp));
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 11\r\nconnection: close\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\nserver: ringloop\r\n\r\nBad Request"
    );
    conn.feed(GET);
    assert_eq!(conn.poll(), Err(Error::MissingHost));
}

#[test]
fn an_error_after_the_response_started_is_not_answered() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    conn.poll().unwrap();
    conn.response(&mut out, 200).unwrap().end(None, &Stamp::default()).unwrap();
    conn.feed(b"zz\r\n");
    assert_eq!(conn.poll(), Err(Error::InvalidChunkSize));
    let before = out.len();
    assert!(!conn.write_error(&mut out, 400, &Stamp::default()));
    assert_eq!(out.len(), before);
}

#[test]
fn a_408_on_an_idle_connection() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    conn.feed(b"GET / HT");
    assert_eq!(conn.poll(), Ok(Event::NeedData));
    // The head timeout fired in the I/O layer.
    assert!(conn.write_error(&mut out, 408, &Stamp::default()));
    assert!(out.starts_with(b"HTTP/1.1 408 Request Timeout\r\n"));
    assert_eq!(conn.poll(), Ok(Event::Closed));
}

#[test]
fn the_steady_state_does_not_grow_the_buffer() {
    let mut conn = Conn::new(Limits::default());
    let mut out = Vec::new();
    let mut cap = 0;
    for i in 0..1000 {
        conn.feed(GET);
        assert!(matches!(conn.poll(), Ok(Event::Head(_))));
        assert_eq!(conn.poll(), Ok(Event::End));
        conn.response(&mut out, 200).unwrap().end(Some(2), &Stamp::default()).unwrap();
        conn.write_body(&mut out, b"ok").unwrap();
        assert_eq!(conn.end_response(&mut out), Ok(After::KeepAlive));
        assert_eq!(conn.poll(), Ok(Event::NeedData));
        out.clear();
        if i == 0 {
            cap = conn.capacity();
        }
        assert_eq!(conn.capacity(), cap);
    }
}
