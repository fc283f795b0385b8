//! Streams that end badly: reset by the client, malformed, over the header limit; each ends
//! only its own stream unless the rule is the connection's.

use super::*;

fn fields_with(extra: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut f: Vec<(&[u8], &[u8])> =
        vec![(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/"), (b":authority", b"a.test")];
    f.extend_from_slice(extra);
    block(&f)
}

#[test]
fn client_reset_gives_a_reset_event() {
    let mut p = Peer::new();
    let (_resp, mut send) = p.request(Request::post("https://a.test/").body(()).unwrap(), false);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    send.send_reset(h2::Reason::CANCEL);
    assert_eq!(p.pump(), [Event::Reset { id: 1, reason: Reason::CANCEL }]);
    assert!(p.server.head(1).is_none());
    assert_eq!(p.server.respond(1, 200, [], true), Err(SendError::UnknownStream));
    assert_eq!(p.server.open_streams(), 0);
}

#[test]
fn client_reset_during_the_response_gives_a_reset_event() {
    let mut client = h2::client::Builder::new();
    client.initial_window_size(10);
    let mut p = Peer::with(&Settings::default(), client);
    let mut resp = p.get("/");
    p.pump();
    p.server.respond(1, 200, [], false).unwrap();
    assert_eq!(p.server.send_data(1, &[0; 100], true), Ok(10));
    p.pump();
    let r = ready(&mut resp).unwrap().unwrap();
    // The client drops the response (and its future): h2 resets the stream with CANCEL.
    drop((r, resp));
    assert_eq!(p.pump(), [Event::Reset { id: 1, reason: Reason::CANCEL }]);
    assert_eq!(p.server.send_data(1, &[0; 90], true), Err(SendError::UnknownStream));
}

#[test]
fn malformed_requests_reset_only_their_own_stream() {
    let mut r = Raw::new(&Settings::default());
    let cases: [(u32, Vec<u8>, Option<Malformed>); 10] = [
        // h2's own rules (RFC 9113 §8.2.2, §8.3; a :path `http::Uri` refuses): reset inside
        // h2, never seen.
        (1, fields_with(&[(b"connection", b"keep-alive")]), None),
        (3, fields_with(&[(b"te", b"gzip")]), None),
        (5, block(&[(b":method", b"GET"), (b":path", b"/"), (b":authority", b"a")]), None),
        // Ours: what h2 lets through.
        (7, block(&[(b":method", b"GET"), (b":scheme", b"https")]), Some(Malformed::MissingPath)),
        (9, block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"x")]), None),
        (11, block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"*")]), Some(Malformed::PathForm)),
        (13, fields_with(&[(b"host", b"b.test")]), Some(Malformed::HostMismatch)),
        (15, block(&[(b":method", b"CONNECT")]), Some(Malformed::ConnectWithoutAuthority)),
        (17, fields_with(&[(b"x-a", b" lead")]), Some(Malformed::FieldValueWhitespace)),
        (19, fields_with(&[(b"x-a", b"trail\t")]), Some(Malformed::FieldValueWhitespace)),
    ];
    for (id, b, rule) in cases {
        let evs = r.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &b));
        match rule {
            Some(rule) => assert_eq!(evs, [Event::Refused { id, rule }], "stream {id}"),
            None => assert_eq!(evs, [], "stream {id}"),
        }
        assert_eq!(r.rst(id), Some(Reason::PROTOCOL_ERROR), "stream {id}");
    }
    // A host that agrees with :authority is fine.
    let ok = fields_with(&[(b"host", b"A.test")]);
    assert_eq!(r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 21, &ok)), [Event::Request { id: 21 }]);
    r.answer(21, b"fine");
    assert_eq!(r.run(), []);
    assert_eq!(r.goaway(), None, "the connection lives");
    assert!(r.frames().iter().any(|f| f.ty == DATA && f.id == 21 && f.payload == b"fine"));
}

#[test]
fn uppercase_field_name_ends_the_connection() {
    // RFC 9113 §8.2.1 calls it malformed (a stream error), but h2's HPACK decoder stops in the
    // middle of the block on it, so the connection's decoding state is lost: h2 answers with
    // GOAWAY PROTOCOL_ERROR, as §5.4 allows any stream error to be treated. The same for a
    // value with a control byte.
    for bad in [fields_with(&[(b"X-Upper", b"1")]), fields_with(&[(b"x", b"a\0b")])] {
        let mut r = Raw::new(&Settings::default());
        r.send(&get(1, b"/first"));
        let evs = r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 3, &bad));
        assert_eq!(r.goaway(), Some((1, Reason::PROTOCOL_ERROR)));
        assert!(matches!(evs.last(), Some(Event::Closed { error: Some(_) })), "{evs:?}");
    }
}

#[test]
fn header_list_over_the_limit_is_refused_with_431_and_the_connection_lives() {
    let mut p = Peer::new();
    // 40 fields of 1 KiB: 41 KiB of header list against 32 KiB (h2's client sends it whatever
    // the server announced; it goes in a HEADERS and CONTINUATIONs).
    let mut req = Request::get("https://a.test/big");
    for i in 0..40 {
        req = req.header(format!("x-field-{i}"), "v".repeat(1000));
    }
    let (mut resp, _) = p.request(req.body(()).unwrap(), true);
    assert_eq!(p.pump(), [], "never reaches the application");
    assert_eq!(p.read(&mut resp).status, 431);
    let mut next = p.get("/small");
    assert_eq!(p.pump(), [Event::Request { id: 3 }]);
    p.server.respond(3, 200, [], true).unwrap();
    assert_eq!(p.read(&mut next).status, 200);
}

#[test]
fn content_length_that_the_data_does_not_match_resets_the_stream() {
    let mut r = Raw::new(&Settings::default());
    let post = block(&[
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b":authority", b"a"),
        (b"content-length", b"5"),
    ]);
    assert_eq!(r.send(&frame(HEADERS, END_HEADERS, 1, &post)), [Event::Request { id: 1 }]);
    assert_eq!(r.c.head(1).unwrap().framing(), Framing::Length(5));
    r.c.want_body(1);
    let evs = r.send(&frame(DATA, END_STREAM, 1, b"abc"));
    assert_eq!(evs, [Event::Reset { id: 1, reason: Reason::PROTOCOL_ERROR }]);
    assert_eq!(r.rst(1), Some(Reason::PROTOCOL_ERROR));
    assert_eq!(r.goaway(), None);
}

#[test]
fn eof_resets_the_open_streams_and_closes() {
    let mut r = Raw::new(&Settings::default());
    assert_eq!(r.send(&get(1, b"/")), [Event::Request { id: 1 }]);
    r.c.feed_eof();
    let evs = r.run();
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(matches!(evs[0], Event::Reset { id: 1, .. }));
    assert!(matches!(evs[1], Event::Closed { .. }));
    assert!(r.c.is_closed() && !r.c.wants_read());
    assert_eq!(r.c.poll(), None);
    r.c.feed(&get(3, b"/"));
    assert_eq!(r.run(), [], "nothing is read after Closed");
}

#[test]
fn a_bad_preface_closes_with_an_error() {
    let mut c = Conn::new(&Settings::default());
    c.feed(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut evs = Vec::new();
    while let Some(e) = c.poll() {
        evs.push(e);
    }
    assert!(matches!(&evs[..], [Event::Closed { error: Some(_) }]), "{evs:?}");
}
