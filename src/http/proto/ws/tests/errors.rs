//! Every reading rule, each with the close code it is answered with, and fail-fast UTF-8.

use super::*;

fn raw(b0: u8, b1: u8) -> Vec<u8> {
    cat(&[&[b0, b1], &MASK])
}

#[test]
fn frame_head_rules_are_1002() {
    for (input, err) in [
        (raw(0x81 | 0x20, 0x80), Error::ReservedBits),
        (raw(0x81 | 0x10, 0x80), Error::ReservedBits),
        (raw(0x81 | 0x40, 0x80), Error::UnexpectedRsv1),
        (raw(0x89 | 0x40, 0x80), Error::UnexpectedRsv1),
        (raw(0x83, 0x80), Error::ReservedOpcode),
        (raw(0x87, 0x80), Error::ReservedOpcode),
        (raw(0x8b, 0x80), Error::ReservedOpcode),
        (raw(0x8f, 0x80), Error::ReservedOpcode),
        (vec![0x81, 0x00], Error::UnmaskedFrame),
        (raw(0x09, 0x80), Error::FragmentedControl),
        (raw(0x08, 0x80), Error::FragmentedControl),
        (raw(0x89, 0xfe), Error::ControlTooLong),
        (cat(&[&[0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1], &MASK]), Error::LengthOverflow),
    ] {
        assert_eq!(err.code(), 1002, "{err:?}");
        fails(&input, err);
    }
}

#[test]
fn fragmentation_rules_are_1002() {
    fails(&client_frame(true, false, OpCode::Continuation, b"x"), Error::UnexpectedContinuation);
    let twice = cat(&[&client_frame(false, false, OpCode::Text, b"a"), &client_frame(true, false, OpCode::Text, b"b")]);
    fails(&twice, Error::ExpectedContinuation);
    let after_end = cat(&[&client_frame(true, false, OpCode::Text, b"a"), &client_frame(true, false, OpCode::Continuation, b"b")]);
    fails_cfg(&after_end, Config::default(), None, &[text("a")], Error::UnexpectedContinuation);
}

#[test]
fn close_payload_rules() {
    fails(&client_close(None, b"x"), Error::CloseCodeTruncated);
    for c in [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000] {
        fails(&client_close(Some(c), b""), Error::InvalidCloseCode);
    }
    fails(&client_close(Some(1000), b"\xff"), Error::InvalidCloseReason);
    assert_eq!(Error::InvalidCloseReason.code(), 1007);
}

#[test]
fn invalid_utf8_is_1007_whole_or_fragmented() {
    for bad in [&b"\xff"[..], b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ok\xe2\x82"] {
        fails(&client_frame(true, false, OpCode::Text, bad), Error::InvalidUtf8);
        fails(&client_message(OpCode::Text, bad, 1), Error::InvalidUtf8);
    }
    // A code point cut between fragments is fine.
    let euro = "€".as_bytes();
    let input = cat(&[
        &client_frame(false, false, OpCode::Text, &euro[..1]),
        &client_frame(false, false, OpCode::Continuation, &euro[1..2]),
        &client_frame(true, false, OpCode::Continuation, &euro[2..]),
    ]);
    assert_eq!(run(&input).0, [text("€"), Ev::Closed(Some(1006))]);
}

#[test]
fn invalid_utf8_fails_fast() {
    // Autobahn 6.4.x: the invalid bytes arrive first and the rest of the frame never does;
    // the server must not wait for it. `\xf4\x90` is already beyond U+10FFFF.
    for (good, bad) in [("κόσμε", &b"\xf4\x90\x80\x80"[..]), ("κόσμε", b"\xed\xa0\x80"), ("", b"\xc0\xaf")] {
        let mut payload = good.as_bytes().to_vec();
        payload.extend_from_slice(bad);
        let cut = payload.len() - bad.len() + 2;
        payload.extend_from_slice(b"more text that never arrives");
        let frame = client_frame(true, false, OpCode::Text, &payload);
        let head = frame.len() - payload.len();
        let mut conn = Conn::new(Config::default(), None);
        let mut out = Vec::new();
        conn.feed(&frame[..head + cut]);
        assert_eq!(conn.poll(&mut out), Err(Error::InvalidUtf8));
        assert_eq!(out, server_close(1007));
        // Also in a continuation frame whose message started valid.
        let input = cat(&[&client_frame(false, false, OpCode::Text, good.as_bytes()), &client_frame(true, false, OpCode::Continuation, &payload[good.len()..])]);
        let mut conn = Conn::new(Config::default(), None);
        conn.feed(&input[..input.len() - (payload.len() - cut)]);
        assert_eq!(conn.poll(&mut Vec::new()), Err(Error::InvalidUtf8));
    }
}

#[test]
fn rsv1_without_deflate_is_1002() {
    fails(&client_frame(true, true, OpCode::Text, b"x"), Error::UnexpectedRsv1);
}

#[test]
fn after_an_error_nothing_more_is_read_or_sent() {
    let input = cat(&[&raw(0x83, 0x80), &client_frame(true, false, OpCode::Ping, b"p")]);
    let mut conn = Conn::new(Config::default(), None);
    let mut out = Vec::new();
    conn.feed(&input);
    assert_eq!(conn.poll(&mut out), Err(Error::ReservedOpcode));
    assert_eq!(conn.poll(&mut out), Ok(Event::Closed));
    assert_eq!(out, server_close(1002));
    assert!(!conn.wants_read());
    assert_eq!(conn.send_text(&mut out, "x"), Err(SendError::Closing));
    assert_eq!(conn.close_code(), Some(1002));
}
