//! Arbitrary bytes as what a WebSocket client sends after the upgrade, read three ways: all at
//! once, one byte at a time, and in pieces a seed chooses. The same messages, the same
//! verdict and the same output (pongs, close frames) every time, and never a panic. The
//! driver (`src/http/proto/ws/testing.rs`, shared with the unit tests) also checks that an error
//! ends the connection and that `NeedData` is never said twice without new bytes.
//!
//! Input layout: byte 0 picks the settings (bit 0: a 64-byte message limit, so the 1009 paths
//! are reached; bit 1: permessage-deflate on; bit 2: with client_no_context_takeover and a
//! 9-bit client window), bytes 1..9 seed the splits, the rest is what the peer sends.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses a part of the codec: the rest is dead code here, not in the server.
#[allow(dead_code, unused_imports)]
// Both cores come in with proto/; this target uses one of them.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::ws;

use ws::testing::{run_with, Splits};
use ws::{Config, Params};

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let config = if data[0] & 1 == 1 { Config { max_message: 64, ..Config::default() } } else { Config::default() };
    let deflate = (data[0] & 2 != 0).then(|| {
        if data[0] & 4 != 0 {
            Params { client_no_context_takeover: true, client_max_window_bits: 9, ..Params::default() }
        } else {
            Params::default()
        }
    });
    let seed = u64::from_le_bytes(data[1..9].try_into().unwrap());
    let input = &data[9..];

    let whole = run_with(input, || usize::MAX, config.clone(), deflate);
    let bytewise = run_with(input, || 1, config.clone(), deflate);
    let mut splits = Splits::new(seed);
    let random = run_with(input, || splits.next(input.len()), config, deflate);

    assert_eq!(bytewise, whole, "byte by byte");
    assert_eq!(random, whole, "random splits");
});
