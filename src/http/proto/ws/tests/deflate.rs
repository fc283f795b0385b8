//! permessage-deflate through `Conn`: RFC 7692 §7.2.3's examples, context takeover, the
//! decompressed size limit, and the RSV1 rules.

use super::super::deflate::Deflater;
use super::*;

fn on() -> Option<Params> {
    Some(Params::default())
}

/// What the client's compressor sends for `msg` under `p` (its side of the parameters).
fn client_deflater(p: &Params) -> Deflater {
    let mine = Params {
        server_no_context_takeover: p.client_no_context_takeover,
        server_max_window_bits: p.client_max_window_bits,
        ..*p
    };
    Deflater::new(&mine, 6)
}

fn compressed(d: &mut Deflater, msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    d.compress(msg, &mut v);
    v
}

#[test]
fn rfc7692_7_2_3_examples_are_read() {
    let hello = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    let cases: [(&str, Vec<u8>); 6] = [
        ("one frame", client_frame(true, true, OpCode::Text, &hello)),
        (
            "fragmented",
            cat(&[&client_frame(false, true, OpCode::Text, &hello[..3]), &client_frame(true, false, OpCode::Continuation, &hello[3..])]),
        ),
        ("stored block", client_frame(true, true, OpCode::Text, &[0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00])),
        ("BFINAL", client_frame(true, true, OpCode::Text, &[0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00])),
        (
            "two blocks",
            client_frame(true, true, OpCode::Text, &[0xf2, 0x48, 0x05, 0x00, 0x00, 0x00, 0xff, 0xff, 0xca, 0xc9, 0xc9, 0x07, 0x00]),
        ),
        // §7.2.3.2: the second "Hello" refers back into the first message's window.
        (
            "context takeover",
            cat(&[&client_frame(true, true, OpCode::Text, &hello), &client_frame(true, true, OpCode::Text, &[0xf2, 0x00, 0x11, 0x00, 0x00])]),
        ),
    ];
    for (name, input) in cases {
        let (evs, _) = run_cfg(&input, Config::default(), on());
        let hellos = if name == "context takeover" { 2 } else { 1 };
        let mut want = vec![text("Hello"); hellos];
        want.push(Ev::Closed(Some(1006)));
        assert_eq!(evs, want, "{name}");
    }
    // §7.2.3.6: an empty message is the single byte 0x00.
    let (evs, _) = run_cfg(&client_frame(true, true, OpCode::Binary, &[0x00]), Config::default(), on());
    assert_eq!(evs, [Ev::Binary(vec![]), Ev::Closed(Some(1006))]);
}

#[test]
fn the_server_compresses_with_and_without_context_takeover() {
    let mut conn = Conn::new(Config::default(), on());
    let mut out = Vec::new();
    conn.send_text(&mut out, "Hello").unwrap();
    conn.send_text(&mut out, "Hello").unwrap();
    assert_eq!(out, [0xc1, 0x07, 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0xc1, 0x05, 0xf2, 0x00, 0x11, 0x00, 0x00]);

    let p = Params { server_no_context_takeover: true, ..Params::default() };
    let mut conn = Conn::new(Config::default(), Some(p));
    out.clear();
    conn.send_text(&mut out, "Hello").unwrap();
    conn.send_text(&mut out, "Hello").unwrap();
    let one = [0xc1, 0x07, 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    assert_eq!(out, cat(&[&one, &one]));

    // Small messages stay uncompressed below compress_min; fragments carry RSV1 on the first.
    let mut conn = Conn::new(Config { compress_min: 6, max_frame: 4, ..Config::default() }, on());
    out.clear();
    conn.send_text(&mut out, "Hello").unwrap();
    assert_eq!(out, [0x01, 4, b'H', b'e', b'l', b'l', 0x80, 1, b'o']);
    out.clear();
    conn.send_text(&mut out, "Hello!").unwrap();
    assert_eq!(out[0], 0x41);
    assert_eq!(out[6] & 0x4f, 0x00, "a continuation without RSV1");
}

#[test]
fn client_messages_in_every_mode_roundtrip() {
    let long: Vec<u8> = (0..100_000u32).map(|i| b"abcdefgh"[(i.wrapping_mul(i) % 8) as usize]).collect();
    for (cnct, bits) in [(false, 15), (true, 15), (false, 9), (true, 8)] {
        let p = Params { client_no_context_takeover: cnct, client_max_window_bits: bits, ..Params::default() };
        let mut d = client_deflater(&p);
        let mut input = Vec::new();
        for m in [&b"first"[..], &long, b"first", b""] {
            let c = compressed(&mut d, m);
            // Fragmented in 1000-byte frames: RSV1 on the first only.
            let mut f = Vec::new();
            encode::message(&mut f, OpCode::Binary, true, &c, 1000, Some(MASK));
            input.extend_from_slice(&f);
        }
        let (evs, _) = run_cfg(&input, Config::default(), Some(p));
        let want = [Ev::Binary(b"first".to_vec()), Ev::Binary(long.clone()), Ev::Binary(b"first".to_vec()), Ev::Binary(vec![]), Ev::Closed(Some(1006))];
        assert_eq!(evs, want, "{cnct} {bits}");
    }
}

#[test]
fn a_zip_bomb_is_1009_on_the_decompressed_size() {
    let mut d = client_deflater(&Params::default());
    let c = compressed(&mut d, &vec![0; 4 << 20]);
    assert!(c.len() < 8 << 10);
    let config = Config { max_message: 1 << 20, ..Config::default() };
    fails_cfg(&client_frame(true, true, OpCode::Binary, &c), config.clone(), on(), &[], Error::MessageTooBig);
    // Exactly at the limit is fine.
    let c = compressed(&mut client_deflater(&Params::default()), &vec![0; 1 << 20]);
    let (evs, _) = run_with(&client_frame(true, true, OpCode::Binary, &c), || usize::MAX, config, on());
    assert_eq!(evs, [Ev::Binary(vec![0; 1 << 20]), Ev::Closed(Some(1006))]);
}

#[test]
fn compressed_text_is_checked_for_utf8_after_inflating() {
    let mut d = client_deflater(&Params::default());
    let c = compressed(&mut d, b"ok \xff no");
    fails_cfg(&client_frame(true, true, OpCode::Text, &c), Config::default(), on(), &[], Error::InvalidUtf8);
}

#[test]
fn rsv1_rules_with_deflate() {
    let hello = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    // On a continuation frame.
    let input = cat(&[&client_frame(false, true, OpCode::Text, &hello[..3]), &client_frame(true, true, OpCode::Continuation, &hello[3..])]);
    fails_cfg(&input, Config::default(), on(), &[], Error::UnexpectedRsv1);
    // On a control frame.
    fails_cfg(&client_frame(true, true, OpCode::Ping, b""), Config::default(), on(), &[], Error::UnexpectedRsv1);
    // An uncompressed message is still allowed with deflate on.
    let (evs, _) = run_cfg(&client_frame(true, false, OpCode::Text, b"plain"), Config::default(), on());
    assert_eq!(evs, [text("plain"), Ev::Closed(Some(1006))]);
}

#[test]
fn garbage_deflate_is_1007() {
    fails_cfg(&client_frame(true, true, OpCode::Binary, &[0xff, 0xff, 0xff, 0xff]), Config::default(), on(), &[], Error::InvalidDeflate);
}

#[test]
fn the_first_fault_in_the_inflated_bytes_wins_however_split() {
    // Invalid UTF-8 then a corrupt block: inflated in one call the deflate error comes last,
    // byte by byte the UTF-8 error is seen first; the verdict must be the same (found by the
    // fuzz target).
    let mut c = compressed(&mut client_deflater(&Params::default()), b"ok \xff then");
    c.extend_from_slice(&[0xff; 8]);
    fails_cfg(&client_frame(true, true, OpCode::Text, &c), Config::default(), on(), &[], Error::InvalidUtf8);
    // Invalid UTF-8 within the limit, then more than the limit.
    let mut msg = b"ok \xff".to_vec();
    msg.extend_from_slice(&[b'a'; 1000]);
    let c = compressed(&mut client_deflater(&Params::default()), &msg);
    let config = Config { max_message: 100, ..Config::default() };
    fails_cfg(&client_frame(true, true, OpCode::Text, &c), config.clone(), on(), &[], Error::InvalidUtf8);
    // Valid text past the limit is 1009, split or not (a receive buffer kept from a large
    // earlier message must not let one call inflate past the limit).
    let c = compressed(&mut client_deflater(&Params::default()), &[b'a'; 1000]);
    let input = cat(&[&client_message(OpCode::Binary, &[7; 90], 30), &client_frame(true, true, OpCode::Text, &c)]);
    fails_cfg(&input, config, on(), &[Ev::Binary(vec![7; 90])], Error::MessageTooBig);
}
