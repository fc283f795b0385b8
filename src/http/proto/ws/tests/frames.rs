//! Reading frames and messages: RFC 6455 §5.7's examples, lengths, fragmentation with control
//! frames between the fragments, the size limit.

use super::decode::{Message, Reader};
use super::*;

/// What a client reader (unmasked frames allowed) makes of `input` in one call per message.
fn client_read(input: &[u8]) -> Vec<String> {
    let mut r = Reader::new(false, 1 << 20, None);
    let mut buf = input.to_vec();
    let mut pos = 0;
    let mut got = Vec::new();
    loop {
        let (n, msg) = r.decode(&mut buf[pos..]).unwrap();
        pos += n;
        match msg {
            Some(m) => got.push(format!("{m:?}")),
            None => return got,
        }
    }
}

#[test]
fn rfc6455_5_7_unmasked_examples_for_a_client_reader_and_from_the_writer() {
    let hello = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    assert_eq!(client_read(&hello), [r#"Text("Hello")"#]);
    let mut out = Vec::new();
    encode::message(&mut out, OpCode::Text, false, b"Hello", usize::MAX, None);
    assert_eq!(out, hello);

    let fragmented = [0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f];
    assert_eq!(client_read(&fragmented), [r#"Text("Hello")"#]);
    out.clear();
    encode::message(&mut out, OpCode::Text, false, b"Hello", 3, None);
    assert_eq!(out, fragmented);

    let ping = [0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    assert_eq!(client_read(&ping), [format!("{:?}", Message::Ping(b"Hello"))]);

    // 256 bytes and 65536 bytes of binary: 16-bit and 64-bit lengths.
    let mut out = Vec::new();
    encode::head(&mut out, true, false, OpCode::Binary, 256, None);
    assert_eq!(out, [0x82, 0x7e, 0x01, 0x00]);
    out.clear();
    encode::head(&mut out, true, false, OpCode::Binary, 65536, None);
    assert_eq!(out, [0x82, 0x7f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00]);
}

#[test]
fn rfc6455_5_7_masked_examples_for_the_server() {
    let hello = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    assert_eq!(client_frame(true, false, OpCode::Text, b"Hello"), hello);
    let pong = [0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    let (evs, out) = run(&cat(&[&hello, &pong]));
    assert_eq!(evs, [text("Hello"), Ev::Pong(b"Hello".to_vec()), Ev::Closed(Some(code::ABNORMAL))]);
    assert!(out.is_empty());
}

#[test]
fn the_unmasked_examples_are_refused_by_the_server() {
    fails(&[0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], Error::UnmaskedFrame);
}

#[test]
fn lengths_7_16_and_64_bit() {
    for len in [0, 1, 125, 126, 127, 65535, 65536, 70000] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let (evs, _) = run_with(&client_frame(true, false, OpCode::Binary, &payload), || usize::MAX, Config::default(), None);
        assert_eq!(evs, [Ev::Binary(payload.clone()), Ev::Closed(Some(1006))], "{len}");
    }
    // A 5-byte payload with a 64-bit length (not minimal: allowed).
    let mut f = vec![0x82, 0xff, 0, 0, 0, 0, 0, 0, 0, 5];
    f.extend_from_slice(&MASK);
    let mut p = *b"abcde";
    frame::apply_mask(&mut p, MASK, 0);
    f.extend_from_slice(&p);
    assert_eq!(run(&f).0, [Ev::Binary(b"abcde".to_vec()), Ev::Closed(Some(1006))]);
}

#[test]
fn every_split_of_a_mixed_stream_gives_the_same_events() {
    let long: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let long = String::from_utf8(long).unwrap();
    let input = cat(&[
        &client_message(OpCode::Text, "héllo wörld ✓ 𝄞".as_bytes(), 3),
        &client_frame(true, false, OpCode::Ping, b"p1"),
        &client_message(OpCode::Binary, b"", usize::MAX),
        &client_message(OpCode::Text, b"", usize::MAX),
        &client_message(OpCode::Text, long.as_bytes(), 1000),
        &client_message(OpCode::Binary, &[0, 1, 2, 255], usize::MAX),
        &client_close(Some(1000), b"bye"),
        b"ignored after the close",
    ]);
    let (evs, out) = run(&input);
    assert_eq!(
        evs,
        [
            text("héllo wörld ✓ 𝄞"),
            Ev::Ping(b"p1".to_vec()),
            Ev::Binary(vec![]),
            text(""),
            text(&long),
            Ev::Binary(vec![0, 1, 2, 255]),
            Ev::Close(Some(1000), "bye".into()),
            Ev::Closed(Some(1000)),
        ]
    );
    assert_eq!(out, cat(&[&[0x8a, 0x02], b"p1", &server_close(1000)]));
}

#[test]
fn control_frames_between_fragments() {
    let input = cat(&[
        &client_frame(false, false, OpCode::Text, b"Hel"),
        &client_frame(true, false, OpCode::Ping, b"x"),
        &client_frame(false, false, OpCode::Continuation, b""),
        &client_frame(true, false, OpCode::Pong, b"y"),
        &client_frame(true, false, OpCode::Continuation, b"lo"),
    ]);
    let (evs, out) = run(&input);
    assert_eq!(evs, [Ev::Ping(b"x".to_vec()), Ev::Pong(b"y".to_vec()), text("Hello"), Ev::Closed(Some(1006))]);
    assert_eq!(out, [0x8a, 0x01, b'x']);
}

#[test]
fn the_size_limit_counts_the_whole_message_and_is_inclusive() {
    let config = Config { max_message: 10, ..Config::default() };
    let ok = client_message(OpCode::Binary, &[7; 10], 4);
    assert_eq!(run_cfg(&ok, config.clone(), None).0, [Ev::Binary(vec![7; 10]), Ev::Closed(Some(1006))]);
    let one = client_message(OpCode::Binary, &[7; 11], usize::MAX);
    fails_cfg(&one, config.clone(), None, &[], Error::MessageTooBig);
    let fragmented = client_message(OpCode::Text, b"abcdefghijk", 4);
    fails_cfg(&fragmented, config.clone(), None, &[], Error::MessageTooBig);
    // Judged on the head: a frame announcing 1 GiB fails before any of its payload.
    let mut head = Vec::new();
    encode::head(&mut head, true, false, OpCode::Binary, 1 << 30, Some(MASK));
    fails_cfg(&head, config, None, &[], Error::MessageTooBig);
}

#[test]
fn data_that_arrives_slowly_is_not_waited_for_in_the_receive_buffer() {
    // A 1 MiB frame fed in 64 KiB reads: the receive buffer never holds more than one read.
    let payload = vec![b'x'; 1 << 20];
    let input = client_frame(true, false, OpCode::Text, &payload);
    let mut conn = Conn::new(Config::default(), None);
    let mut out = Vec::new();
    for chunk in input.chunks(64 * 1024) {
        assert!(conn.wants_read());
        conn.feed(chunk);
        match conn.poll(&mut out).unwrap() {
            Event::NeedData => {}
            Event::Text(s) => assert_eq!(s.len(), 1 << 20),
            other => panic!("{other:?}"),
        }
    }
}
