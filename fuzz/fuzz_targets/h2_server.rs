//! Arbitrary bytes after the client preface as an HTTP/2 connection's input, served by the
//! reference driver (`src/http/proto/h2/testing.rs`, shared with the unit tests): an
//! application that asks for every body, releases each chunk and answers every request with
//! 200 and a body, sent as the windows allow. Never a panic; the driver checks the contract as
//! it goes (no event for a stream it does not know, nothing after `Closed`, `send_data` never
//! taking more than it was given, `Closed` once EOF was fed), and the output stays within a
//! bound of the input.
//!
//! Input layout: byte 0: bit 7 small settings (few streams, small windows, tiny header list,
//! output and input bounds, so the limit paths are reached), bits 0..7 the size of each piece
//! fed (1..=128); the rest is what the client sends after its preface.

#![no_main]

use libfuzzer_sys::fuzz_target;

// Every core comes in with proto/; this target uses h2's.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::h2::testing::{serve, PREFACE};
use proto::h2::Settings;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let settings = if first & 0x80 != 0 {
        Settings {
            max_concurrent_streams: 4,
            initial_stream_window: 1024,
            initial_connection_window: 2048,
            max_header_list_size: 1024,
            max_pending_accept_reset_streams: 2,
            max_early_resets: 4,
            max_local_error_reset_streams: 8,
            max_empty_frames: 4,
            max_send_buffer: 16,
            max_buffered_input: 256,
            max_pending_output: 128,
            ..Settings::default()
        }
    } else {
        Settings::default()
    };
    let piece = (first & 0x7f) as usize + 1;
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(rest);
    let served = serve(&input, || piece, &settings);
    // What the server writes of its own (SETTINGS, a WINDOW_UPDATE, the ACK), then at most a
    // few times what it reads: each frame read is answered by a frame of about its size (a
    // PONG, an ACK, a RST_STREAM, a small response to a small request).
    let bound = 1024 + 16 * input.len();
    assert!(served.out.len() <= bound, "{} bytes out for {} in", served.out.len(), input.len());
});
