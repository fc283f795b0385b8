//! Arbitrary bytes as the header blocks of HTTP/2 requests, so that h2's HPACK decoder (and
//! our request rules after it, `head.rs`) meet them rather than the frame layer's checks,
//! which reject most of `h2_server`'s random frames before any header block is decoded.
//! Served by the reference driver (`src/http/proto/h2/testing.rs`) as `h2_server` is: never a
//! panic, the driver's contract checked as it goes, the output within a bound of the input.
//!
//! Input layout: byte 0: bit 7 small settings (a 1 KiB header list, so the limit paths are
//! reached), bits 0..7 the most bytes of a header block per frame
//! (1..=128: the rest goes in CONTINUATION frames); then blocks, each a 2-byte big-endian
//! length and that many bytes, one request each on streams 1, 3, 5... (the decoder's dynamic
//! table carries over from one to the next, as on a real connection).

#![no_main]

use libfuzzer_sys::fuzz_target;

// Every core comes in with proto/; this target uses h2's.
#[allow(dead_code, unused_imports)]
#[path = "../../src/http/proto/mod.rs"]
mod proto;

use proto::h2::testing::{client_start, frame, serve, CONTINUATION, END_HEADERS, END_STREAM, HEADERS};
use proto::h2::Settings;

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else { return };
    let settings = if first & 0x80 != 0 {
        Settings { max_header_list_size: 1024, ..Settings::default() }
    } else {
        Settings::default()
    };
    let piece = (first & 0x7f) as usize + 1;
    let mut input = client_start();
    let mut id = 1u32;
    while rest.len() >= 2 && id < 200 {
        let n = (usize::from(rest[0]) << 8 | usize::from(rest[1])).min(rest.len() - 2);
        let block = &rest[2..2 + n];
        rest = &rest[2 + n..];
        let mut pieces = block.chunks(piece).peekable();
        let first_piece = pieces.next().unwrap_or(&[]);
        let last = pieces.peek().is_none();
        input.extend(frame(HEADERS, END_STREAM | if last { END_HEADERS } else { 0 }, id, first_piece));
        while let Some(p) = pieces.next() {
            let end = if pieces.peek().is_none() { END_HEADERS } else { 0 };
            input.extend(frame(CONTINUATION, end, id, p));
        }
        id += 2;
    }
    let served = serve(&input, || 4096, &settings);
    let bound = 1024 + 16 * input.len();
    assert!(served.out.len() <= bound, "{} bytes out for {} in", served.out.len(), input.len());
});
