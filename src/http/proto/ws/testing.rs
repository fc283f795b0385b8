//! The reference driver the unit tests and the fuzz target share (compiled for `cfg(test)` and
//! `cfg(fuzzing)` only), and a client's frame writer to make their inputs.
//!
//! `run_with` plays the I/O layer: it feeds the input in pieces `split` chooses (EOF after the
//! last), polls until `Closed`, and records owned events and everything written. The invariant
//! both suites check: any split of the same bytes gives the same events and the same output.

use super::conn::{Config, Conn, Event, State};
use super::deflate::Params;
use super::encode;
use super::error::Error;
use super::frame::OpCode;

/// An owned `Event`, or the error that ended the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, String),
    /// The connection ended, with `close_code()`.
    Closed(Option<u16>),
    Error(Error),
}

/// Serve `input` as a server connection; the events and the output.
pub fn run_with(input: &[u8], mut split: impl FnMut() -> usize, config: Config, deflate: Option<Params>) -> (Vec<Ev>, Vec<u8>) {
    let mut conn = Conn::new(config, deflate);
    let mut out = Vec::new();
    let mut evs = Vec::new();
    let mut fed = 0;
    // Polls without progress: a driver bug or a stall in the connection.
    let mut idle = 0;
    loop {
        let ev = match conn.poll(&mut out) {
            Err(e) => {
                evs.push(Ev::Error(e));
                assert_eq!(conn.state(), State::Done, "an error ends the connection");
                continue;
            }
            Ok(ev) => ev,
        };
        idle = if matches!(ev, Event::NeedData) { idle + 1 } else { 0 };
        assert!(idle < 3, "NeedData twice without being fed");
        match ev {
            Event::Text(s) => evs.push(Ev::Text(s.to_owned())),
            Event::Binary(b) => evs.push(Ev::Binary(b.to_vec())),
            Event::Ping(p) => evs.push(Ev::Ping(p.to_vec())),
            Event::Pong(p) => evs.push(Ev::Pong(p.to_vec())),
            Event::Close { code, reason } => evs.push(Ev::Close(code, reason.to_owned())),
            Event::NeedData if fed < input.len() => {
                assert!(conn.wants_read() || fed < input.len(), "NeedData but no reading wanted");
                let n = split().clamp(1, input.len() - fed);
                conn.feed(&input[fed..fed + n]);
                fed += n;
                idle = 0;
            }
            Event::NeedData => conn.feed_eof(),
            Event::Closed => {
                evs.push(Ev::Closed(conn.close_code()));
                assert_eq!(conn.poll(&mut out), Ok(Event::Closed), "Closed stays closed");
                break;
            }
        }
    }
    (evs, out)
}

/// The mask the helpers below use (RFC 6455 §5.7's).
pub const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A client's frame: masked with `MASK`.
pub fn client_frame(fin: bool, rsv1: bool, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode::frame(&mut out, fin, rsv1, opcode, payload, Some(MASK));
    out
}

/// A client's whole text or binary message in frames of `max_frame` bytes.
pub fn client_message(opcode: OpCode, payload: &[u8], max_frame: usize) -> Vec<u8> {
    let mut out = Vec::new();
    encode::message(&mut out, opcode, false, payload, max_frame, Some(MASK));
    out
}

/// A client's close frame (any code, even an invalid one, and any reason bytes).
pub fn client_close(code: Option<u16>, reason: &[u8]) -> Vec<u8> {
    let mut payload = Vec::new();
    if let Some(c) = code {
        payload.extend_from_slice(&c.to_be_bytes());
    }
    payload.extend_from_slice(reason);
    client_frame(true, false, OpCode::Close, &payload)
}

/// A small deterministic generator of piece sizes (xorshift), for splits a seed chooses (h1's,
/// copied: this folder includes nothing from outside it).
pub struct Splits(u64);

impl Splits {
    pub fn new(seed: u64) -> Splits {
        Splits(seed | 1)
    }

    /// 1 to `max` bytes, mostly small.
    pub fn next(&mut self, max: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let r = self.0 as usize;
        if r % 4 == 0 {
            1 + (r >> 8) % max.max(1)
        } else {
            1 + (r >> 8) % 8
        }
    }
}
