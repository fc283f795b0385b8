//! Flow control both ways, and the bound on the work of one poll.

use std::collections::BTreeMap;

use super::*;

fn small_windows(stream: u32, conn: u32) -> Settings {
    Settings { initial_stream_window: stream, initial_connection_window: conn, ..Settings::default() }
}

#[test]
fn body_credit_only_after_release() {
    const WINDOW: usize = 16 * 1024;
    let mut p = Peer::with(&small_windows(WINDOW as u32, 1 << 20), h2::client::Builder::new());
    let (mut resp, mut send) = p.request(Request::post("https://a.test/up").body(()).unwrap(), false);
    let body: Vec<u8> = (0..4 * WINDOW).map(|i| i as u8).collect();
    send.send_data(Bytes::from(body.clone()), true).unwrap();
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.want_body(1);

    let mut got = Vec::new();
    loop {
        let (chunk, end) = body_of(&p.pump(), 1);
        got.extend_from_slice(&chunk);
        if end {
            break;
        }
        // The client may send one window and no more until the application took it.
        assert_eq!(got.len() % WINDOW, 0, "a window at a time: {}", got.len());
        assert!(!chunk.is_empty());
        assert_eq!(p.pump(), [], "nothing more before release");
        p.server.release(1, chunk.len());
    }
    assert_eq!(got, body);
    p.server.respond(1, 200, [], true).unwrap();
    assert_eq!(p.read(&mut resp).status, 200);
}

#[test]
fn client_overrunning_the_stream_window_gets_flow_control_error() {
    let mut r = Raw::new(&small_windows(1024, 1 << 20));
    let b = block(&[(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/"), (b":authority", b"a")]);
    assert_eq!(r.send(&frame(HEADERS, END_HEADERS, 1, &b)), [Event::Request { id: 1 }]);
    r.c.want_body(1);
    let evs = r.send(&frame(DATA, 0, 1, &[7; 2000]));
    assert_eq!(evs, [Event::Reset { id: 1, reason: Reason::FLOW_CONTROL_ERROR }]);
    assert_eq!(r.rst(1), Some(Reason::FLOW_CONTROL_ERROR));
    // A stream error: the connection goes on.
    assert_eq!(r.send(&get(3, b"/next")), [Event::Request { id: 3 }]);
    assert_eq!(r.goaway(), None);
}

#[test]
fn client_overrunning_the_connection_window_gets_goaway() {
    let mut r = Raw::new(&small_windows(60_000, 65_535));
    let b = block(&[(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/"), (b":authority", b"a")]);
    r.send(&frame(HEADERS, END_HEADERS, 1, &b));
    r.send(&frame(HEADERS, END_HEADERS, 3, &b));
    r.send(&frame(DATA, 0, 1, &[7; 16_000]));
    r.send(&frame(DATA, 0, 1, &[7; 16_000]));
    r.send(&frame(DATA, 0, 3, &[7; 16_000]));
    r.send(&frame(DATA, 0, 3, &[7; 16_000]));
    // 80 000 bytes unreleased against a connection window of 65 535.
    let evs = r.send(&frame(DATA, 0, 3, &[7; 16_000]));
    assert_eq!(r.goaway().map(|g| g.1), Some(Reason::FLOW_CONTROL_ERROR));
    assert!(
        matches!(evs.last(), Some(Event::Closed { error: Some(e) }) if e.reason == Some(Reason::FLOW_CONTROL_ERROR))
    );
}

#[test]
fn response_larger_than_the_window_waits_for_writable() {
    let mut client = h2::client::Builder::new();
    client.initial_window_size(1000);
    let mut p = Peer::with(&Settings::default(), client);
    let mut resp = p.get("/big");
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.respond(1, 200, [], false).unwrap();
    let body: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
    let mut sent = p.server.send_data(1, &body, true).unwrap();
    assert_eq!(sent, 1000, "no more than the client's stream window");
    assert_eq!(p.pump(), [], "no capacity until the client reads");

    let r = loop {
        if let Some(r) = ready(&mut resp) {
            break r.unwrap();
        }
        p.pump();
    };
    let mut rx = r.into_body();
    let mut got = Vec::new();
    let mut writable = 0;
    while got.len() < body.len() {
        match rx.poll_data(&mut cx()) {
            Poll::Ready(Some(Ok(d))) => {
                rx.flow_control().release_capacity(d.len()).unwrap();
                got.extend_from_slice(&d);
            }
            Poll::Ready(other) => panic!("{other:?}"),
            Poll::Pending => {}
        }
        for ev in p.pump() {
            assert_eq!(ev, Event::Writable { id: 1 });
            writable += 1;
            let n = p.server.send_data(1, &body[sent..], true).unwrap();
            assert!(n > 0 && n <= 1000, "sends never exceed the window: {n}");
            sent += n;
        }
    }
    assert_eq!(got, body);
    assert!(writable >= 4, "{writable}");
    assert_eq!(p.server.open_streams(), 0);
}

#[test]
fn connection_window_is_shared_between_streams() {
    // The client's connection window (65535) is smaller than what two streams want.
    let mut p = Peer::new();
    let (mut a, mut b) = (p.get("/a"), p.get("/b"));
    p.pump();
    let big = vec![1u8; 60_000];
    p.server.respond(1, 200, [], false).unwrap();
    p.server.respond(3, 200, [], false).unwrap();
    let n1 = p.server.send_data(1, &big, true).unwrap();
    let n3 = p.server.send_data(3, &big, true).unwrap();
    assert!(n1 + n3 <= 65_535, "{n1} + {n3}");
    let (mut s1, mut s3) = (n1, n3);
    let mut bodies = [Vec::new(), Vec::new()];
    let (ra, rb) = loop {
        if let (Some(ra), Some(rb)) = (ready(&mut a), ready(&mut b)) {
            break (ra.unwrap(), rb.unwrap());
        }
        p.pump();
    };
    let mut rx = [ra.into_body(), rb.into_body()];
    while bodies[0].len() < big.len() || bodies[1].len() < big.len() {
        for (i, r) in rx.iter_mut().enumerate() {
            while let Poll::Ready(Some(Ok(d))) = r.poll_data(&mut cx()) {
                r.flow_control().release_capacity(d.len()).unwrap();
                bodies[i].extend_from_slice(&d);
            }
        }
        for ev in p.pump() {
            match ev {
                Event::Writable { id: 1 } => s1 += p.server.send_data(1, &big[s1..], true).unwrap(),
                Event::Writable { id: 3 } => s3 += p.server.send_data(3, &big[s3..], true).unwrap(),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!((s1, s3), (big.len(), big.len()));
}

#[test]
fn unread_body_credit_comes_back_when_the_stream_ends() {
    // One stream's unread body fills the connection window; once the stream is answered and
    // forgotten, h2 credits the connection, and the next stream's body can come.
    let mut p = Peer::with(&small_windows(65_535, 65_535), h2::client::Builder::new());
    let (mut r1, mut s1) = p.request(Request::post("https://a.test/1").body(()).unwrap(), false);
    s1.send_data(Bytes::from(vec![0u8; 65_535]), false).unwrap();
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.respond(1, 413, [], true).unwrap();
    assert_eq!(p.read(&mut r1).status, 413);

    let (mut r3, mut s3) = p.request(Request::post("https://a.test/3").body(()).unwrap(), false);
    s3.send_data(Bytes::from(vec![1u8; 30_000]), true).unwrap();
    assert_eq!(p.pump(), [Event::Request { id: 3 }]);
    p.server.want_body(3);
    assert_eq!(body_of(&p.pump(), 3), (vec![1u8; 30_000], true));
    p.server.respond(3, 200, [], true).unwrap();
    assert_eq!(p.read(&mut r3).status, 200);
}

/// A conversation in raw frames: requests with bodies, pings, window updates.
fn conversation() -> Vec<u8> {
    let post = block(&[(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/p"), (b":authority", b"a")]);
    let mut v = client_start();
    v.extend(get(1, b"/one"));
    v.extend(frame(HEADERS, END_HEADERS, 3, &post));
    v.extend(frame(DATA, 0, 3, b"hello "));
    v.extend(frame(PING, 0, 0, b"12345678"));
    v.extend(frame(DATA, END_STREAM, 3, b"world"));
    v.extend(frame(HEADERS, END_HEADERS, 5, &post));
    v.extend(frame(DATA, END_STREAM, 5, b""));
    v.extend(frame(WINDOW_UPDATE, 0, 0, &1000u32.to_be_bytes()));
    v.extend(get(7, b"/seven?q"));
    v
}

#[test]
fn the_work_of_a_poll_is_bounded_by_the_bytes_fed() {
    // Each stream's events, in order (fed whole, h2 reads every frame before the streams are
    // polled, so events of different streams interleave differently).
    fn by_stream(events: &[Event]) -> BTreeMap<u32, Vec<Event>> {
        let mut m = BTreeMap::<u32, Vec<Event>>::new();
        for e in events {
            let id = match *e {
                Event::Request { id } | Event::Refused { id, .. } | Event::Trailers { id } | Event::Writable { id } => {
                    id
                }
                Event::Data { id, .. } | Event::Reset { id, .. } => id,
                Event::Closed { .. } => 0,
            };
            m.entry(id).or_default().push(e.clone());
        }
        m
    }
    let input = conversation();
    let whole = serve(&input, || usize::MAX, &Settings::default());
    for split in [1, 2, 7, 9, 10] {
        let pieces = serve(&input, || split, &Settings::default());
        assert_eq!(by_stream(&pieces.events), by_stream(&whole.events), "split {split}");
        assert_eq!(pieces.events.last(), Some(&Event::Closed { error: None }));
    }
    assert_eq!(body_of(&whole.events, 5), (vec![], true));
    let (body, end) = body_of(&whole.events, 3);
    assert_eq!((&body[..], end), (&b"hello world"[..], true));

    // Fed a frame's bytes but its last, a poll finds nothing; the last byte brings the event.
    let mut r = Raw::new(&Settings::default());
    let g = get(1, b"/");
    for (i, b) in g.iter().enumerate() {
        let evs = r.send(&[*b]);
        assert_eq!(evs.is_empty(), i + 1 < g.len(), "byte {i}");
    }
}

#[test]
fn a_stream_reset_before_its_request_was_polled_is_never_seen() {
    let mut r = Raw::new(&Settings::default());
    let mut v = get(1, b"/");
    v.extend(frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    v.extend(get(3, b"/"));
    // Both reached h2 in one read: stream 1 is accepted and found reset in the same poll.
    assert_eq!(r.send(&v), [Event::Request { id: 3 }]);
    // Seen, then reset: the reset is told.
    let mut v = frame(RST_STREAM, 0, 3, &8u32.to_be_bytes());
    v.extend(get(5, b"/"));
    // (The connection is polled before the streams: new requests come first.)
    assert_eq!(r.send(&v), [Event::Request { id: 5 }, Event::Reset { id: 3, reason: Reason::CANCEL }]);
}

#[test]
fn no_event_names_a_stream_after_the_caller_ended_it() {
    let mut p = Peer::new();
    let (_resp, mut send) = p.request(Request::post("https://a.test/").body(()).unwrap(), false);
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.want_body(1);
    send.send_data(Bytes::from_static(b"a"), false).unwrap();
    send.send_data(Bytes::from_static(b"b"), false).unwrap();
    p.pump_client();
    // One poll reads both DATA frames and queues both events; the caller ends the stream
    // after taking the first: the second goes with the stream.
    assert_eq!(p.server.poll(), Some(Event::Data { id: 1, data: Bytes::from_static(b"a"), end: false }));
    p.server.reset(1, Reason::CANCEL);
    assert_eq!(p.server.poll(), None);
}

#[test]
fn a_poll_polls_only_the_streams_that_moved() {
    let mut p = Peer::new();
    let mut senders = Vec::new();
    for i in 0..50 {
        let (resp, send) = p.request(Request::post(format!("https://a.test/{i}")).body(()).unwrap(), false);
        senders.push((resp, send));
    }
    assert_eq!(p.pump().len(), 50);
    for i in 0..50 {
        p.server.want_body(1 + 2 * i);
    }
    assert_eq!(p.pump(), []);
    let before = p.server.stream_polls;
    senders[20].1.send_data(Bytes::from_static(b"x"), false).unwrap();
    assert_eq!(p.pump(), [Event::Data { id: 41, data: Bytes::from_static(b"x"), end: false }]);
    assert_eq!(p.server.stream_polls - before, 1, "one stream moved, one stream polled");
}

#[test]
fn the_connection_can_move_between_threads() {
    // The driver keeps it in a Python object, which PyO3 wants `Send`.
    fn send<T: Send>() {}
    send::<Conn>();
}
