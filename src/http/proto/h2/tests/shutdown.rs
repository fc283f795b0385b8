//! The connection's end: graceful shutdown (GOAWAY, in-flight streams finish, new ones are
//! refused), abort, the client's own GOAWAY.

use super::*;

#[test]
fn graceful_shutdown_lets_in_flight_streams_finish_and_refuses_new_ones() {
    let mut r = Raw::new(&Settings::default());
    assert_eq!(r.send(&get(1, b"/slow")), [Event::Request { id: 1 }]);
    let before = r.frames().len();
    r.c.graceful_shutdown();
    assert_eq!(r.run(), []);
    // First a GOAWAY with the highest id (requests already on their way still count) and a
    // PING to learn when they have all arrived.
    let new: Vec<Frame> = r.frames().split_off(before);
    assert_eq!(new[0].ty, GOAWAY);
    assert_eq!((new[0].last_id(), new[0].code()), (Some((1 << 31) - 1), Some(0)));
    let ping = new.iter().find(|f| f.ty == PING).expect("a PING after the GOAWAY");
    // A request sent before the client saw the GOAWAY is still served.
    assert_eq!(r.send(&get(3, b"/in-flight")), [Event::Request { id: 3 }]);
    // The PING comes back: the final GOAWAY names the last stream accepted.
    r.send(&frame(PING, ACK, 0, &ping.payload));
    assert_eq!(r.goaway(), Some((3, Reason::NO_ERROR)));
    // A stream opened after that is refused.
    assert_eq!(r.send(&get(5, b"/late")), []);
    assert!(r.c.head(5).is_none());
    // The open ones finish; then the connection closes, cleanly.
    r.answer(3, b"three");
    assert_eq!(r.run(), []);
    assert!(!r.c.is_closed());
    r.answer(1, b"one");
    assert_eq!(r.run(), [Event::Closed { error: None }]);
    let data: Vec<(u32, Vec<u8>)> =
        r.frames().into_iter().filter(|f| f.ty == DATA).map(|f| (f.id, f.payload)).collect();
    assert_eq!(data, [(3, b"three".to_vec()), (1, b"one".to_vec())]);
}

#[test]
fn graceful_shutdown_with_h2s_client() {
    let mut p = Peer::new();
    let mut resp = p.get("/");
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.graceful_shutdown();
    assert_eq!(p.pump(), []);
    p.server.respond(1, 200, [], false).unwrap();
    p.server.send_data(1, b"bye", true).unwrap();
    let got = p.read(&mut resp);
    assert_eq!(got.body, b"bye");
    assert!(p.server.is_closed());
}

#[test]
fn shutdown_before_the_preface_applies_after_it() {
    let mut c = Conn::new(&Settings::default());
    c.graceful_shutdown();
    c.feed(&client_start());
    let mut evs = Vec::new();
    let mut out = Vec::new();
    loop {
        while let Some(e) = c.poll() {
            evs.push(e);
        }
        c.take_output(&mut out);
        if !c.needs_poll() {
            break;
        }
    }
    assert!(frames(&out).iter().any(|f| f.ty == GOAWAY), "{:?}", frames(&out));
}

#[test]
fn abort_resets_every_stream_and_closes() {
    let mut r = Raw::new(&Settings::default());
    r.send(&get(1, b"/"));
    r.send(&get(3, b"/"));
    r.c.abort(Reason::INTERNAL_ERROR);
    let evs = r.run();
    assert_eq!(r.goaway(), Some((3, Reason::INTERNAL_ERROR)));
    let mut resets: Vec<u32> =
        evs.iter().filter_map(|e| if let Event::Reset { id, .. } = e { Some(*id) } else { None }).collect();
    resets.sort();
    assert_eq!(resets, [1, 3]);
    match evs.last() {
        Some(Event::Closed { error: Some(e) }) => {
            assert_eq!((e.reason, e.remote), (Some(Reason::INTERNAL_ERROR), false))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_goaway_lets_open_streams_finish() {
    let mut r = Raw::new(&Settings::default());
    r.send(&get(1, b"/"));
    let mut goaway = 1u32.to_be_bytes().to_vec();
    goaway.extend(0u32.to_be_bytes());
    assert_eq!(r.send(&frame(GOAWAY, 0, 0, &goaway)), []);
    r.answer(1, b"done");
    let evs = r.run();
    assert!(r.frames().iter().any(|f| f.ty == DATA && f.id == 1));
    assert!(matches!(evs.last(), Some(Event::Closed { .. })), "{evs:?}");
}

#[test]
fn keep_alive_ping_and_its_ack() {
    let mut r = Raw::new(&Settings::default());
    let before = r.frames().len();
    assert!(r.c.send_ping());
    assert!(r.c.ping_out());
    // One at a time: a second waits for the first's ACK.
    assert!(!r.c.send_ping());
    assert_eq!(r.run(), []);
    let new: Vec<Frame> = r.frames().split_off(before);
    let pings: Vec<&Frame> = new.iter().filter(|f| f.ty == PING).collect();
    assert_eq!(pings.len(), 1);
    assert_eq!((pings[0].flags, pings[0].id, pings[0].payload.len()), (0, 0, 8));
    // An ACK with another payload is not ours.
    assert_eq!(r.send(&frame(PING, ACK, 0, b"12345678")), []);
    assert!(r.c.ping_out());
    // A client that answers clears it; the next may go.
    assert_eq!(r.send(&frame(PING, ACK, 0, &pings[0].payload)), []);
    assert!(!r.c.ping_out());
    assert!(r.c.send_ping());
    assert!(!r.c.is_closed());
}

#[test]
fn keep_alive_ping_with_h2s_client() {
    // h2's client answers PINGs by itself: the ACK comes back within one pump.
    let mut p = Peer::new();
    assert!(p.server.send_ping());
    assert_eq!(p.pump(), []);
    assert!(!p.server.ping_out());
    // Beside the graceful shutdown's own PING.
    let resp = p.get("/x");
    assert_eq!(p.pump(), [Event::Request { id: 1 }]);
    p.server.graceful_shutdown();
    assert!(p.server.send_ping());
    assert_eq!(p.pump(), []);
    assert!(!p.server.ping_out());
    p.server.respond(1, 200, [], true).unwrap();
    assert_eq!(p.pump(), [Event::Closed { error: None }]);
    drop(resp);
}
