//! Arbitrary upgrade request fields through the WebSocket handshake: never a panic, and when
//! permessage-deflate is agreed, the answer we write is itself a valid offer that the same
//! settings accept with the same parameters and the same answer (so what we write parses, and
//! every value in it is in range). RFC 8441's extended CONNECT judges the same offers the same
//! way (no key, no `Upgrade`), and its answer carries no HTTP/1.1 field.
//!
//! Input layout: byte 0 picks the server's deflate settings (bits 0-1: the no-context-takeover
//! flags, bits 2-4 and 5-7: server and client window bits 8 + n); the rest is field lines,
//! `name:value` separated by LF, added after a valid set of upgrade fields so that the
//! extension and subprotocol parsers are reached most of the time.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses a part of the codec: the rest is dead code here, not in the server.
#[allow(dead_code, unused_imports)]
// Both cores come in with proto/; this target uses one of them.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::ws;

use ws::extension::{negotiate, parse};
use ws::{check, check_extended_connect, DeflateConfig};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let cfg = DeflateConfig {
        server_no_context_takeover: flags & 1 != 0,
        client_no_context_takeover: flags & 2 != 0,
        server_max_window_bits: 8 + ((flags >> 2) & 7),
        client_max_window_bits: 8 + (flags >> 5),
    };
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b"upgrade", b"websocket"),
        (b"connection", b"upgrade"),
        (b"sec-websocket-version", b"13"),
        (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    for line in rest.split(|&b| b == b'\n') {
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        fields.push((&line[..colon], line.get(colon + 1..).unwrap_or(b"")));
    }
    let Ok(up) = check(b"GET", b"HTTP/1.1", fields.iter().copied()) else {
        return;
    };
    let _ = up.response_headers(up.subprotocols.first().map(Vec::as_slice), None).count();
    let h2 = check_extended_connect(b"CONNECT", fields.iter().copied()).expect("what HTTP/1.1 accepts, HTTP/2 does");
    assert_eq!((&h2.subprotocols, &h2.extensions), (&up.subprotocols, &up.extensions));
    assert_eq!(h2.response_headers(None, None).count(), 0);
    if let Some((params, answer)) = up.negotiate_deflate(&cfg) {
        assert!((8..=15).contains(&params.server_max_window_bits) && (8..=15).contains(&params.client_max_window_bits));
        let again = parse([answer.as_slice()]).expect("our answer parses");
        assert_eq!(again.len(), 1);
        assert_eq!(negotiate(&again, &cfg), Some((params, answer)), "our answer as an offer");
    }
});
