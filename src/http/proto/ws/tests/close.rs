//! The close handshake, automatic answers, and what the application may send when.

use super::*;

#[test]
fn the_peers_close_is_echoed_and_ends_the_connection() {
    let (evs, out) = run(&client_close(Some(1001), b"going"));
    assert_eq!(evs, [Ev::Close(Some(1001), "going".into()), Ev::Closed(Some(1001))]);
    assert_eq!(out, server_close(1001));
    // Without a code: an empty close back, and 1005 for the application.
    let (evs, out) = run(&client_close(None, b""));
    assert_eq!(evs, [Ev::Close(None, String::new()), Ev::Closed(Some(1005))]);
    assert_eq!(out, [0x88, 0x00]);
}

#[test]
fn eof_without_close_is_1006() {
    let (evs, out) = run(&client_frame(false, false, OpCode::Text, b"half a mess"));
    assert_eq!(evs, [Ev::Closed(Some(1006))]);
    assert!(out.is_empty());
    assert_eq!(run(b"").0, [Ev::Closed(Some(1006))]);
}

#[test]
fn our_close_then_theirs() {
    let mut conn = Conn::new(Config::default(), None);
    let mut out = Vec::new();
    conn.close(&mut out, Some(1000), "done").unwrap();
    assert_eq!(out, cat(&[&[0x88, 0x06, 0x03, 0xe8], b"done"]));
    assert_eq!(conn.state(), State::CloseSent);
    out.clear();
    // Nothing more may be sent; what arrives is still delivered; pings are not answered.
    assert_eq!(conn.send_text(&mut out, "x"), Err(SendError::Closing));
    assert_eq!(conn.ping(&mut out, b""), Err(SendError::Closing));
    assert_eq!(conn.close(&mut out, Some(1000), ""), Err(SendError::Closing));
    conn.feed(&cat(&[
        &client_frame(true, false, OpCode::Text, b"late"),
        &client_frame(true, false, OpCode::Ping, b"p"),
        &client_close(Some(1000), b""),
    ]));
    assert_eq!(conn.poll(&mut out), Ok(Event::Text("late")));
    assert_eq!(conn.poll(&mut out), Ok(Event::Ping(b"p")));
    assert_eq!(conn.poll(&mut out), Ok(Event::Close { code: Some(1000), reason: "" }));
    assert_eq!(conn.state(), State::Done);
    assert_eq!(conn.poll(&mut out), Ok(Event::Closed));
    assert!(out.is_empty(), "{out:x?}");
    assert_eq!(conn.close_code(), Some(1000));
}

#[test]
fn an_error_after_our_close_sends_no_second_close() {
    let mut conn = Conn::new(Config::default(), None);
    let mut out = Vec::new();
    conn.close(&mut out, None, "").unwrap();
    assert_eq!(out, [0x88, 0x00]);
    conn.feed(&[0x83, 0x80]);
    assert_eq!(conn.poll(&mut out), Err(Error::ReservedOpcode));
    assert_eq!(out, [0x88, 0x00]);
}

#[test]
fn pings_are_answered_with_their_payload() {
    let input = cat(&[&client_frame(true, false, OpCode::Ping, b""), &client_frame(true, false, OpCode::Ping, &[9; 125])]);
    let (evs, out) = run(&input);
    assert_eq!(evs, [Ev::Ping(vec![]), Ev::Ping(vec![9; 125]), Ev::Closed(Some(1006))]);
    assert_eq!(out, cat(&[&[0x8a, 0x00, 0x8a, 125], &[9; 125]]));
}

#[test]
fn what_the_writer_refuses() {
    let mut conn = Conn::new(Config::default(), None);
    let mut out = Vec::new();
    assert_eq!(conn.ping(&mut out, &[0; 126]), Err(SendError::ControlTooLong));
    assert_eq!(conn.pong(&mut out, &[0; 126]), Err(SendError::ControlTooLong));
    for c in [1004, 1005, 1006, 1015, 999, 2000] {
        assert_eq!(conn.close(&mut out, Some(c), ""), Err(SendError::InvalidCloseCode));
    }
    assert_eq!(conn.close(&mut out, None, "reason without code"), Err(SendError::InvalidCloseCode));
    assert_eq!(conn.close(&mut out, Some(1000), &"x".repeat(124)), Err(SendError::CloseReasonTooLong));
    assert!(out.is_empty());
    assert_eq!(conn.state(), State::Open);
    conn.close(&mut out, Some(4999), &"x".repeat(123)).unwrap();
    assert_eq!(out.len(), 2 + 125);
}

#[test]
fn sending_messages_fragmented_or_not() {
    let mut conn = Conn::new(Config { max_frame: 2, ..Config::default() }, None);
    let mut out = Vec::new();
    conn.send_text(&mut out, "abc").unwrap();
    conn.send_binary(&mut out, b"").unwrap();
    conn.pong(&mut out, b"hb").unwrap();
    assert_eq!(out, [0x01, 2, b'a', b'b', 0x80, 1, b'c', 0x82, 0, 0x8a, 2, b'h', b'b']);
}
