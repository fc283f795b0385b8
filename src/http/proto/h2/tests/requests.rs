//! Requests and responses with h2's client: the head view, bodies, trailers, interim
//! responses, extended CONNECT, many streams at once.

use super::super::head::RequestHead;
use super::*;

#[test]
fn simple_get() {
    let mut p = Peer::new();
    let req = Request::get("https://a.test/hello/w%20rld?x=1&y").header("user-agent", "t/1").body(()).unwrap();
    let (mut resp, _) = p.request(req, true);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);

    let h = p.server.head(1).expect("the head");
    assert_eq!(h.method(), b"GET");
    assert_eq!(h.method_kind(), Method::Get);
    assert_eq!(h.path(), b"/hello/w%20rld");
    assert_eq!(h.query(), b"x=1&y");
    assert_eq!(h.authority(), Some(&b"a.test"[..]));
    assert_eq!(h.scheme(), Some(&b"https"[..]));
    assert_eq!(h.framing(), Framing::None);
    assert_eq!(h.upgrade(), None);
    assert_eq!(h.version(), Version::Http2);
    assert_eq!(h.version().as_str(), "2");
    let fields: Vec<_> = h.headers().collect();
    assert_eq!(fields, [(&b"user-agent"[..], &b"t/1"[..])], "no pseudo-header among the fields");
    assert_eq!(h.header(b"User-Agent"), Some(&b"t/1"[..]));

    p.server.respond(1, 200, [(&b"Content-Type"[..], &b"text/plain"[..])], false).unwrap();
    assert_eq!(p.server.send_data(1, b"hi", true), Ok(2));
    assert_eq!(p.server.open_streams(), 0, "the stream is forgotten once its response ended");
    let got = p.read(&mut resp);
    assert_eq!(got.status, 200);
    assert_eq!(got.headers["content-type"], "text/plain");
    assert_eq!(got.body, b"hi");
    assert_eq!(p.pump(), []);
}

#[test]
fn post_with_body_delivered_once_asked_for() {
    let mut p = Peer::new();
    let req = Request::post("https://a.test/up").header("content-length", "11").body(()).unwrap();
    let (mut resp, mut send) = p.request(req, false);
    send.send_data(Bytes::from_static(b"hello "), false).unwrap();
    send.send_data(Bytes::from_static(b"world"), true).unwrap();
    // The body waits in h2 until the application asks for it.
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    assert_eq!(p.server.head(1).unwrap().framing(), Framing::Length(11));
    assert_eq!(p.pump(), []);

    p.server.want_body(1);
    let evs = p.pump();
    assert_eq!(body_of(&evs, 1), (b"hello world".to_vec(), true));
    p.server.release(1, 11);
    p.server.respond(1, 201, [], true).unwrap();
    assert_eq!(p.read(&mut resp).status, 201);
}

#[test]
fn body_without_content_length_is_of_unknown_length() {
    let mut p = Peer::new();
    let (_resp, mut send) = p.request(Request::post("https://a.test/s").body(()).unwrap(), false);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    // HTTP/2's "length unknown, ends with END_STREAM" is h1's chunked to the layers above.
    assert_eq!(p.server.head(1).unwrap().framing(), Framing::Chunked);
    p.server.want_body(1);
    send.send_data(Bytes::from_static(b"abc"), false).unwrap();
    assert_eq!(p.pump(), [Event::Data { id: 1, data: Bytes::from_static(b"abc"), end: false }]);
    send.send_data(Bytes::new(), true).unwrap();
    // END_STREAM on an empty DATA frame: an empty last event.
    assert_eq!(p.pump(), [Event::Data { id: 1, data: Bytes::new(), end: true }]);
}

#[test]
fn bodiless_request_asked_for_its_body_gets_an_empty_end() {
    let mut p = Peer::new();
    let _resp = p.get("/");
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.want_body(1);
    assert_eq!(p.pump(), [Event::Data { id: 1, data: Bytes::new(), end: true }]);
}

#[test]
fn many_concurrent_streams() {
    let mut p = Peer::new();
    let mut resps = Vec::new();
    for i in 0..60 {
        let req = Request::post(format!("https://a.test/{i}")).body(()).unwrap();
        let (resp, mut send) = p.request(req, false);
        send.send_data(Bytes::from(format!("body {i}")), true).unwrap();
        resps.push(resp);
    }
    let evs = p.pump();
    let ids: Vec<u32> = (0..60).map(|i| 1 + 2 * i).collect();
    assert_eq!(evs, ids.iter().map(|&id| Event::Request { id }).collect::<Vec<_>>());
    assert_eq!(p.server.open_streams(), 60);
    for &id in &ids {
        p.server.want_body(id);
    }
    let evs = p.pump();
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(body_of(&evs, id), (format!("body {i}").into_bytes(), true));
    }
    // Answered in reverse order, each its own path back.
    for &id in ids.iter().rev() {
        let path = p.server.head(id).unwrap().path().to_vec();
        p.server.respond(id, 200, [], false).unwrap();
        assert_eq!(p.server.send_data(id, &path, true), Ok(path.len()));
    }
    for (i, mut resp) in resps.into_iter().enumerate() {
        assert_eq!(p.read(&mut resp).body, format!("/{i}").into_bytes());
    }
}

#[test]
fn trailers_both_ways() {
    let mut p = Peer::new();
    let req = Request::post("https://a.test/rpc").header("te", "trailers").body(()).unwrap();
    let (mut resp, mut send) = p.request(req, false);
    send.send_data(Bytes::from_static(b"req"), false).unwrap();
    let mut t = HeaderMap::new();
    t.insert("x-checksum", "abc".parse().unwrap());
    send.send_trailers(t).unwrap();
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    assert_eq!(p.server.head(1).unwrap().header(b"te"), Some(&b"trailers"[..]));
    p.server.want_body(1);
    let evs = p.pump();
    assert_eq!(evs, [Event::Data { id: 1, data: Bytes::from_static(b"req"), end: false }, Event::Trailers { id: 1 }]);
    let trailers: Vec<_> = p.server.trailers(1).unwrap().iter().collect();
    assert_eq!(trailers, [(&b"x-checksum"[..], &b"abc"[..])]);

    p.server.respond(1, 200, [(&b"trailer"[..], &b"grpc-status"[..])], false).unwrap();
    assert_eq!(p.server.send_data(1, b"resp", false), Ok(4));
    p.server.send_trailers(1, [(&b"grpc-status"[..], &b"0"[..])]).unwrap();
    assert_eq!(p.server.open_streams(), 0);
    let got = p.read(&mut resp);
    assert_eq!(got.body, b"resp");
    assert_eq!(got.trailers.unwrap()["grpc-status"], "0");
}

#[test]
fn early_hints_before_the_response() {
    let mut p = Peer::new();
    let mut resp = p.get("/page");
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    let link: [(&[u8], &[u8]); 1] = [(b"link", b"</a.css>; rel=preload")];
    p.server.informational(1, 103, link).unwrap();
    assert_eq!(p.server.informational(1, 101, []), Err(SendError::InvalidStatus), "no 101 in HTTP/2");
    assert_eq!(p.server.informational(1, 200, []), Err(SendError::InvalidStatus));
    p.pump();
    let hint = match resp.poll_informational(&mut cx()) {
        Poll::Ready(Some(Ok(r))) => r,
        other => panic!("no 103: {other:?}"),
    };
    assert_eq!(hint.status(), 103);
    assert_eq!(hint.headers()["link"], "</a.css>; rel=preload");
    p.server.respond(1, 200, [], true).unwrap();
    assert_eq!(p.server.informational(1, 103, []), Err(SendError::UnknownStream));
    assert_eq!(p.read(&mut resp).status, 200);
}

#[test]
fn extended_connect_websocket() {
    let mut p = Peer::new();
    assert!(p.client.is_extended_connect_protocol_enabled(), "SETTINGS_ENABLE_CONNECT_PROTOCOL announced");
    let mut req =
        Request::connect("https://a.test/chat?room=1").header("sec-websocket-version", "13").body(()).unwrap();
    req.extensions_mut().insert(h2::ext::Protocol::from_static("websocket"));
    let (mut resp, mut send) = p.request(req, false);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    let h = p.server.head(1).unwrap();
    assert_eq!(h.method_kind(), Method::Connect);
    assert_eq!(h.upgrade(), Some(&b"websocket"[..]));
    assert_eq!((h.path(), h.query()), (&b"/chat"[..], &b"room=1"[..]));
    assert_eq!(h.authority(), Some(&b"a.test"[..]));
    assert_eq!(h.framing(), Framing::Chunked);

    p.server.respond(1, 200, [], false).unwrap();
    p.server.want_body(1);
    send.send_data(Bytes::from_static(b"\x81\x02hi"), false).unwrap();
    assert_eq!(p.pump(), [Event::Data { id: 1, data: Bytes::from_static(b"\x81\x02hi"), end: false }]);
    assert_eq!(p.server.send_data(1, b"\x81\x02yo", false), Ok(4));
    p.pump();
    let r = ready(&mut resp).expect("the 200").unwrap();
    assert_eq!(r.status(), 200);
    let mut body = r.into_body();
    match body.poll_data(&mut cx()) {
        Poll::Ready(Some(Ok(d))) => assert_eq!(&d[..], b"\x81\x02yo"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn classic_connect_target_is_the_authority() {
    let mut r = Raw::new(&Settings::default());
    let b = block(&[(b":method", b"CONNECT"), (b":authority", b"db.test:5432")]);
    assert_eq!(r.send(&frame(HEADERS, END_HEADERS, 1, &b)), [Event::Request { id: 1 }]);
    let h = r.c.head(1).unwrap();
    assert_eq!((h.path(), h.authority(), h.upgrade()), (&b"db.test:5432"[..], Some(&b"db.test:5432"[..]), None));
    assert_eq!(h.scheme(), None);
}

#[test]
fn cookies_are_joined_into_one_field() {
    let mut p = Peer::new();
    let req = Request::get("https://a.test/")
        .header("cookie", "a=1")
        .header("accept", "*/*")
        .header("cookie", "b=2")
        .header("cookie", "c=3")
        .body(())
        .unwrap();
    let _resp = p.request(req, true);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    let h = p.server.head(1).unwrap();
    let fields: Vec<_> = h.headers().collect();
    assert_eq!(fields, [(&b"cookie"[..], &b"a=1; b=2; c=3"[..]), (b"accept", b"*/*")]);
}

#[test]
fn options_star_and_userinfo() {
    let mut r = Raw::new(&Settings::default());
    let b =
        block(&[(b":method", b"OPTIONS"), (b":scheme", b"https"), (b":path", b"*"), (b":authority", b"u:p@a.test")]);
    assert_eq!(r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &b)), [Event::Request { id: 1 }]);
    let h = r.c.head(1).unwrap();
    assert_eq!((h.path(), h.query(), h.authority()), (&b"*"[..], &b""[..], Some(&b"a.test"[..])));
}

#[test]
fn response_to_head_sends_no_body() {
    let mut p = Peer::new();
    let req = Request::head("https://a.test/f").body(()).unwrap();
    let (mut resp, _) = p.request(req, true);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.respond(1, 200, [(&b"content-length"[..], &b"5"[..])], false).unwrap();
    // Taken whole, sent as nothing: the response to HEAD has no body (RFC 9110 §9.3.2).
    assert_eq!(p.server.send_data(1, b"hello", true), Ok(5));
    let got = p.read(&mut resp);
    assert_eq!((got.status, got.body.len()), (200, 0));
    assert_eq!(got.headers["content-length"], "5");
}

#[test]
fn connection_specific_response_fields_are_dropped() {
    let mut p = Peer::new();
    let mut resp = p.get("/");
    p.pump();
    let fields: [(&[u8], &[u8]); 4] =
        [(b"Connection", b"keep-alive"), (b"Transfer-Encoding", b"chunked"), (b"Keep-Alive", b"5"), (b"X-Ok", b"1")];
    p.server.respond(1, 200, fields, true).unwrap();
    let got = p.read(&mut resp);
    assert_eq!(got.headers.len(), 1);
    assert_eq!(got.headers["x-ok"], "1");
}

#[test]
fn calls_out_of_turn_are_refused() {
    let mut p = Peer::new();
    let _resp = p.get("/");
    p.pump();
    assert_eq!(p.server.send_data(1, b"x", false), Err(SendError::NotResponding));
    assert_eq!(p.server.send_trailers(1, []), Err(SendError::NotResponding));
    assert_eq!(p.server.respond(1, 99, [], true), Err(SendError::InvalidStatus));
    assert_eq!(p.server.respond(1, 1000, [], true), Err(SendError::InvalidStatus));
    assert_eq!(p.server.respond(1, 103, [], true), Err(SendError::InvalidStatus));
    assert_eq!(p.server.respond(1, 200, [(&b"bad name"[..], &b"v"[..])], true), Err(SendError::InvalidFieldName));
    assert_eq!(p.server.respond(1, 200, [(&b"x"[..], &b"a\nb"[..])], true), Err(SendError::InvalidFieldValue));
    assert_eq!(p.server.respond(3, 200, [], true), Err(SendError::UnknownStream));
    p.server.respond(1, 200, [], false).unwrap();
    assert_eq!(p.server.respond(1, 200, [], false), Err(SendError::AlreadyResponded));
    assert_eq!(p.server.send_data(1, b"", true), Ok(0));
    assert_eq!(p.server.send_data(1, b"x", true), Err(SendError::UnknownStream));
}

#[test]
fn extended_connect_refused_where_not_announced() {
    // `--ws off`: no SETTINGS_ENABLE_CONNECT_PROTOCOL, and h2 refuses a `:protocol` (RFC 8441
    // §4: a malformed request) before the application could see the stream.
    let mut r = Raw::new(&Settings { enable_connect_protocol: false, ..Settings::default() });
    let b = block(&[
        (b":method", b"CONNECT"),
        (b":protocol", b"websocket"),
        (b":scheme", b"https"),
        (b":path", b"/chat"),
        (b":authority", b"a.test"),
    ]);
    let events = r.send(&frame(HEADERS, END_HEADERS, 1, &b));
    assert!(!events.iter().any(|e| matches!(e, Event::Request { .. })), "{events:?}");
}
