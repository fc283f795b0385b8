//! The known attacks on HTTP/2 servers, each met by a bound: Rapid Reset (CVE-2023-44487),
//! the CONTINUATION flood (2024), and a peer that never reads our output.

use super::*;

fn pair(id: u32) -> Vec<u8> {
    let mut v = get(id, b"/");
    // A GET with END_STREAM can still be reset: the server has not answered.
    v.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    v
}

fn calm(evs: &[Event]) -> bool {
    matches!(evs.last(), Some(Event::Closed { error: Some(e) }) if e.reason == Some(Reason::ENHANCE_YOUR_CALM))
}

#[test]
fn rapid_reset_in_one_read_gets_enhance_your_calm() {
    let mut r = Raw::new(&Settings::default());
    let burst: Vec<u8> = (0..200).flat_map(|i| pair(1 + 2 * i)).collect();
    let evs = r.send(&burst);
    assert_eq!(r.goaway().map(|g| g.1), Some(Reason::ENHANCE_YOUR_CALM));
    assert!(calm(&evs), "{evs:?}");
    // h2 stopped at its pending-accept bound: far fewer than 200 streams reached us.
    let requests = evs.iter().filter(|e| matches!(e, Event::Request { .. })).count();
    assert!(requests <= 21, "{requests}");
}

#[test]
fn rapid_reset_spread_over_reads_gets_enhance_your_calm() {
    // Each pair in its own read: every stream is accepted (reaches the application) before its
    // reset, so h2's pending-accept bound never sees it; ours does.
    let mut r = Raw::new(&Settings { max_early_resets: 10, ..Settings::default() });
    let mut all = Vec::new();
    for i in 0..100 {
        let id = 1 + 2 * i;
        all.extend(r.send(&get(id, b"/")));
        all.extend(r.send(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes())));
        if r.c.is_closed() {
            break;
        }
    }
    assert!(calm(&all), "{:?}", all.last());
    let resets = all.iter().filter(|e| matches!(e, Event::Reset { .. })).count();
    assert_eq!(resets, 11, "one past the bound");
    assert_eq!(r.goaway().map(|g| g.1), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn cancels_balanced_by_answered_requests_are_fine() {
    let mut r = Raw::new(&Settings { max_early_resets: 10, ..Settings::default() });
    for i in 0..100 {
        let (a, b) = (1 + 4 * i, 3 + 4 * i);
        r.send(&pair(a));
        assert_eq!(r.send(&get(b, b"/")), [Event::Request { id: b }]);
        r.answer(b, b"ok");
    }
    r.run();
    assert!(!r.c.is_closed());
    assert_eq!(r.goaway(), None);
}

#[test]
fn malformed_requests_count_as_early_resets() {
    let mut r = Raw::new(&Settings { max_early_resets: 5, ..Settings::default() });
    let bad = block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"*")]);
    let mut all = Vec::new();
    for i in 0..10 {
        all.extend(r.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, &bad)));
    }
    assert!(calm(&all), "{all:?}");
}

#[test]
fn continuation_flood_is_bounded() {
    // A HEADERS that never ends, followed by empty CONTINUATION frames: h2 (since 0.4.4) allows
    // the frames a maximal header list needs and a quarter more (at least 5), then GOAWAY.
    let mut r = Raw::new(&Settings::default());
    let b = block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/")]);
    let mut flood = frame(HEADERS, 0, 1, &b);
    for _ in 0..10_000 {
        flood.extend(frame(CONTINUATION, 0, 1, &[]));
    }
    let evs = r.send(&flood);
    assert!(calm(&evs), "{evs:?}");
    assert!(r.out.len() < 1024, "{}", r.out.len());
}

/// A GET whose block holds one literal of `size` bytes, cut into 16 000-byte frames.
fn huge_literal(id: u32, size: usize) -> Vec<u8> {
    let mut b = block(&[(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/")]);
    literal(&mut b, b"x-big", &vec![b'a'; size]);
    let chunks: Vec<&[u8]> = b.chunks(16_000).collect();
    let mut bytes = frame(HEADERS, END_STREAM, id, chunks[0]);
    for (i, c) in chunks[1..].iter().enumerate() {
        bytes.extend(frame(CONTINUATION, if i + 2 == chunks.len() { END_HEADERS } else { 0 }, id, c));
    }
    bytes
}

#[test]
fn continuation_of_a_huge_literal_is_bounded() {
    // One literal larger than the header list limit can only be decoded whole, so h2 keeps it
    // until the block ends; what bounds that is the count of CONTINUATION frames (6 at 32 KiB
    // and 16 KiB frames: about 100 KiB). Within it: 431, the connection lives.
    let mut r = Raw::new(&Settings::default());
    assert_eq!(r.send(&huge_literal(1, 40_000)), []);
    assert_eq!(r.send(&get(3, b"/")), [Event::Request { id: 3 }]);
    assert_eq!(r.goaway(), None);
    // Past it: GOAWAY, before the block is all buffered.
    let evs = r.send(&huge_literal(5, 1_000_000));
    assert!(calm(&evs), "{evs:?}");
}

#[test]
fn a_peer_that_never_reads_cannot_grow_the_output() {
    // PINGs each ask for a PONG. With the output never taken, h2 stops reading once
    // `max_pending_output` waits, the input stays unread, and reading the socket stops.
    let settings = Settings { max_pending_output: 4096, max_buffered_input: 8192, ..Settings::default() };
    let mut r = Raw::new(&settings);
    let ping = frame(PING, 0, 0, b"abcdefgh");
    let mut fed = 0;
    while r.c.wants_read() && fed < 10_000 {
        r.c.feed(&ping.repeat(100));
        fed += 100;
        while r.c.poll().is_some() {}
    }
    assert!(!r.c.wants_read(), "reading stops");
    assert!(fed < 10_000, "{fed} pings");
    // Everything waits; taking the output lets the rest through, and every PING is answered.
    let mut out = Vec::new();
    let mut polls = 0;
    loop {
        while r.c.poll().is_some() {}
        let before = out.len();
        r.c.take_output(&mut out);
        // Our output's bound, and what h2 had in its own write buffer (16 KiB).
        assert!(out.len() - before <= 4096 + 16 * 1024, "{}", out.len() - before);
        polls += 1;
        if !r.c.needs_poll() && out.len() == before {
            break;
        }
    }
    let pongs = frames(&out).iter().filter(|f| f.ty == PING && f.flags == ACK).count();
    assert_eq!(pongs, fed);
    assert!(polls >= 2, "the input waited behind the output");
    assert!(r.c.wants_read());
}

/// A POST on stream 1 whose body is still to come.
fn open_post() -> Vec<u8> {
    let b = block(&[(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/")]);
    frame(HEADERS, END_HEADERS, 1, &b)
}

#[test]
fn empty_data_flood_gets_enhance_your_calm() {
    // CVE-2019-9518: zero-length DATA frames without END_STREAM, which h2 drops (counting them
    // since 0.4.20: 100 per connection). Past `max_empty_frames` in a row: GOAWAY, and the
    // rest of the flood is not even read.
    let mut r = Raw::new(&Settings { max_empty_frames: 10, ..Settings::default() });
    assert_eq!(r.send(&open_post()), [Event::Request { id: 1 }]);
    let flood = frame(DATA, 0, 1, &[]).repeat(10_000);
    let evs = r.send(&flood);
    assert!(calm(&evs), "{evs:?}");
    assert_eq!(r.goaway(), Some((1, Reason::ENHANCE_YOUR_CALM)));
}

#[test]
fn empty_frames_between_data_are_fine() {
    let mut r = Raw::new(&Settings { max_empty_frames: 10, ..Settings::default() });
    // Ten empty frames at a time (the bound), each run ended by a byte of body: 90 in all, as
    // h2 (0.4.20) ends a connection past 100 empty DATA frames in its life, in a row or not.
    let mut all = r.send(&open_post());
    r.c.want_body(1);
    for _ in 0..9 {
        let mut bytes = frame(DATA, 0, 1, &[]).repeat(10);
        bytes.extend(frame(DATA, 0, 1, b"x"));
        all.extend(r.send(&bytes));
        r.c.release(1, 1);
    }
    all.extend(r.send(&frame(DATA, END_STREAM, 1, &[])));
    assert_eq!(body_of(&all, 1), (vec![b'x'; 9], true), "{:?}", r.goaway());
    assert_eq!(r.goaway(), None);
}

#[test]
fn empty_header_blocks_get_enhance_your_calm() {
    // Empty HEADERS frames on new streams, each its own malformed request: the empty-frame
    // count ends it before the early-reset count would.
    let mut r = Raw::new(&Settings { max_empty_frames: 10, ..Settings::default() });
    let flood: Vec<u8> = (0..1000).flat_map(|i| frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, &[])).collect();
    let evs = r.send(&flood);
    assert!(calm(&evs), "{evs:?}");
}
