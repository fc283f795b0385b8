//! The reference drivers the unit tests and the fuzz targets share (compiled for `cfg(test)` and
//! `cfg(fuzzing)` only).
//!
//! `serve` plays a server whose application reads every body and answers every request; the
//! invariant both suites check is that feeding the same bytes in any pieces gives the same
//! events and the same output (but for `100 Continue`, which depends on whether the body had
//! arrived: `without_continues`).

use super::decode::{Decoder, Step};
use super::*;

/// An owned `Event` (or the error that ended the connection), with body data merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Head(Vec<u8>),
    Data(Vec<u8>),
    End,
    Upgraded(Vec<u8>),
    Closed,
    Error(Error),
}

pub const BODY: &[u8] = b"ok";

/// Answer the current request: 101 if it asks for an upgrade, a bodiless 200 (a tunnel) to
/// CONNECT, else 200 with `BODY`.
pub fn respond(conn: &mut Conn, out: &mut Vec<u8>) -> After {
    let upgrade = conn.head().and_then(|h| h.upgrade()).map(<[u8]>::to_vec);
    let connect = conn.head().is_some_and(|h| h.method_kind() == Method::Connect);
    let stamp = Stamp::default();
    match upgrade {
        _ if connect => conn.response(out, 200).expect("a request waits").end(None, &stamp).expect("a tunnel's head"),
        Some(proto) => {
            let mut r = conn.response(out, 101).expect("101 to an upgrade request");
            r.header(b"upgrade", &proto).expect("the request's own value");
            r.header(b"connection", b"upgrade").expect("a token");
            r.end(None, &stamp).expect("a 101 head");
        }
        None => {
            conn.response(out, 200).expect("a request waits").end(Some(BODY.len() as u64), &stamp).expect("a 200 head");
            conn.write_body(out, BODY).expect("the declared length");
        }
    }
    conn.end_response(out).expect("a complete response")
}

/// Touch everything a head exposes (the fuzz targets want no panic anywhere in it).
fn inspect(h: &Head<'_>) {
    let _ = (h.method(), h.method_kind(), h.target(), h.path(), h.query(), h.version().as_str());
    let _ = (h.framing(), h.keep_alive(), h.expect_continue(), h.upgrade(), h.header(b"host"));
    for (name, value) in h.headers() {
        assert!(!name.is_empty() && name.len() + value.len() <= h.raw().len());
    }
}

/// Serve `input`, fed in pieces whose sizes `split` chooses (EOF after the last); the events
/// and the output.
pub fn serve_with(input: &[u8], split: impl FnMut() -> usize, limits: Limits) -> (Vec<Ev>, Vec<u8>) {
    serve_app(input, split, limits, false)
}

/// `serve_with`, and with `eager` an application that answers as soon as it has the head,
/// without reading the body (so the rest of it is drained, or the connection closed).
pub fn serve_app(input: &[u8], mut split: impl FnMut() -> usize, limits: Limits, eager: bool) -> (Vec<Ev>, Vec<u8>) {
    let mut conn = Conn::new(limits);
    let mut out = Vec::new();
    let mut evs = Vec::new();
    let mut fed = 0;
    let mut switching = false;
    loop {
        let peer_closed = conn.peer_closed();
        let ev = match conn.poll() {
            Err(e) => {
                conn.write_error(&mut out, e.status(), &Stamp::default());
                evs.push(Ev::Error(e));
                break;
            }
            Ok(ev) => ev,
        };
        match ev {
            Event::Head(h) => {
                inspect(&h);
                evs.push(Ev::Head(h.raw().to_vec()));
                // Upgrades and tunnels are answered once the (empty) body is read.
                switching = h.upgrade().is_some() || h.method_kind() == Method::Connect;
                if eager && !switching && respond(&mut conn, &mut out) == After::Close {
                    evs.push(Ev::Closed);
                    break;
                }
            }
            Event::Data(d) => match evs.last_mut() {
                Some(Ev::Data(prev)) => prev.extend_from_slice(d),
                _ => evs.push(Ev::Data(d.to_vec())),
            },
            Event::End if eager && !switching => {
                panic!("an eager application's request body is drained, never surfaced")
            }
            Event::End => {
                evs.push(Ev::End);
                match respond(&mut conn, &mut out) {
                    After::KeepAlive => {}
                    After::Close => {
                        evs.push(Ev::Closed);
                        break;
                    }
                    After::Upgrade => {
                        let mut rest = conn.take_upgraded();
                        rest.extend_from_slice(&input[fed..]);
                        evs.push(Ev::Upgraded(rest));
                        break;
                    }
                }
            }
            Event::Continue => out.extend_from_slice(CONTINUE),
            Event::NeedData if fed < input.len() => {
                assert!(conn.wants_read(), "NeedData but no reading wanted");
                let n = split().clamp(1, input.len() - fed);
                conn.feed(&input[fed..fed + n]);
                fed += n;
            }
            Event::NeedData if !peer_closed => conn.feed_eof(),
            Event::NeedData | Event::Paused | Event::Upgraded => panic!("{ev:?} in the reference driver"),
            Event::Closed => {
                evs.push(Ev::Closed);
                break;
            }
        }
    }
    (evs, out)
}

/// The output without the `100 Continue`s, which depend on how the bytes were split.
pub fn without_continues(out: &[u8]) -> Vec<u8> {
    let mut rest = out;
    let mut kept = Vec::with_capacity(out.len());
    while let Some(i) = rest.windows(CONTINUE.len()).position(|w| w == CONTINUE) {
        kept.extend_from_slice(&rest[..i]);
        rest = &rest[i + CONTINUE.len()..];
    }
    kept.extend_from_slice(rest);
    kept
}

/// Decode a chunked body fed in pieces `split` chooses; the body and how many bytes followed
/// it, or the verdict (`IncompleteBody` if the input ran out).
pub fn decode_chunked(
    input: &[u8],
    mut split: impl FnMut() -> usize,
    limits: &Limits,
) -> Result<(Vec<u8>, usize), Error> {
    let mut d = Decoder::chunked();
    let mut buf = Vec::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        let (n, step) = d.decode(&buf, limits)?;
        assert!(n <= buf.len(), "consumed more than given");
        match step {
            Step::Data(r) => {
                assert!(!r.is_empty() && r.end == n, "data must be non-empty and end the consumed bytes");
                body.extend_from_slice(&buf[r]);
            }
            Step::End => {
                assert!(d.is_done());
                return Ok((body, buf.len() - n + input.len() - fed));
            }
            Step::NeedData => {
                if fed == input.len() {
                    return Err(Error::IncompleteBody);
                }
                let more = split().clamp(1, input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + more]);
                fed += more;
            }
        }
        buf.drain(..n);
    }
}

/// A small deterministic generator of piece sizes (xorshift), for splits a seed chooses.
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
