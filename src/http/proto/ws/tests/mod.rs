//! Tests of the WebSocket core through `Conn`, as the I/O layer drives it (and of `handshake`
//! on its own). The modules' own tests (frame, deflate, syntax) sit beside their code.
//!
//! `run` feeds every input whole, one byte at a time, in 2 and 5 byte pieces and in seeded
//! random pieces, and wants the same events and the same output each time.

mod close;
mod deflate;
mod errors;
mod frames;
mod handshake;

use super::frame::OpCode;
use super::testing::*;
use super::*;

/// `run_with` at every split in a few sizes; all must agree. The whole-input result.
pub fn run_cfg(input: &[u8], config: Config, deflate: Option<Params>) -> (Vec<Ev>, Vec<u8>) {
    let whole = run_with(input, || usize::MAX, config.clone(), deflate);
    for split in [1, 2, 5] {
        let got = run_with(input, || split, config.clone(), deflate);
        assert_eq!(got, whole, "split {split}");
    }
    for seed in 1..4 {
        let mut s = Splits::new(0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(seed));
        let got = run_with(input, || s.next(input.len()), config.clone(), deflate);
        assert_eq!(got, whole, "seed {seed}");
    }
    whole
}

pub fn run(input: &[u8]) -> (Vec<Ev>, Vec<u8>) {
    run_cfg(input, Config::default(), None)
}

/// The server's close frame with `code` and no reason.
pub fn server_close(code: u16) -> Vec<u8> {
    let mut v = vec![0x88, 0x02];
    v.extend_from_slice(&code.to_be_bytes());
    v
}

/// Assert that `input` (after the events `before`) fails with `err`: the server sends a close
/// frame with its code last and the connection ends.
#[track_caller]
pub fn fails_cfg(input: &[u8], config: Config, deflate: Option<Params>, before: &[Ev], err: Error) {
    let (evs, out) = run_cfg(input, config, deflate);
    let mut want = before.to_vec();
    want.extend([Ev::Error(err), Ev::Closed(Some(err.code()))]);
    assert_eq!(evs, want);
    assert!(out.ends_with(&server_close(err.code())), "{out:x?}");
}

#[track_caller]
pub fn fails(input: &[u8], err: Error) {
    fails_cfg(input, Config::default(), None, &[], err)
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub fn text(s: &str) -> Ev {
    Ev::Text(s.to_owned())
}
