//! Tests of the whole protocol core through `Conn`, as the I/O layer drives it. The modules'
//! own tests (scan, decode, syntax, date) sit beside their code.
//!
//! `serve` is the reference driver: it plays a server whose application reads every body and
//! answers every request, feeding the input in pieces of a given size. Most tests run it twice
//! — all at once and one byte at a time — and want the same events.

mod flow;
mod limits;
mod requests;
mod responses;
mod smuggling;

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

/// Answer the current request: 101 if it asks for an upgrade, else 200 with `BODY`.
pub fn respond(conn: &mut Conn, out: &mut Vec<u8>) -> After {
    let upgrade = conn.head().and_then(|h| h.upgrade()).map(<[u8]>::to_vec);
    let stamp = Stamp::default();
    match upgrade {
        Some(proto) => {
            let mut r = conn.response(out, 101).unwrap();
            r.header(b"upgrade", &proto).unwrap();
            r.header(b"connection", b"upgrade").unwrap();
            r.end(None, &stamp).unwrap();
        }
        None => {
            conn.response(out, 200).unwrap().end(Some(BODY.len() as u64), &stamp).unwrap();
            conn.write_body(out, BODY).unwrap();
        }
    }
    conn.end_response(out).unwrap()
}

/// Serve `input` fed in pieces of `split` bytes (EOF after the last); the events and the output.
pub fn serve_with(input: &[u8], split: usize, limits: Limits) -> (Vec<Ev>, Vec<u8>) {
    let mut conn = Conn::new(limits);
    let mut out = Vec::new();
    let mut evs = Vec::new();
    let mut fed = 0;
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
            Event::Head(h) => evs.push(Ev::Head(h.raw().to_vec())),
            Event::Data(d) => match evs.last_mut() {
                Some(Ev::Data(prev)) => prev.extend_from_slice(d),
                _ => evs.push(Ev::Data(d.to_vec())),
            },
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
                let n = split.min(input.len() - fed);
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

/// `serve_with` at every split in a few sizes; all must agree. The whole-input result.
pub fn serve(input: &[u8]) -> (Vec<Ev>, Vec<u8>) {
    serve_limits(input, Limits::default())
}

pub fn serve_limits(input: &[u8], limits: Limits) -> (Vec<Ev>, Vec<u8>) {
    let whole = serve_with(input, usize::MAX, limits.clone());
    for split in [1, 2, 5] {
        let (evs, out) = serve_with(input, split, limits.clone());
        assert_eq!(evs, whole.0, "split {split} of {:?}", String::from_utf8_lossy(input));
        // The output differs only by `100 Continue`s sent while the body had not arrived.
        let strip = |o: &[u8]| String::from_utf8_lossy(o).replace("HTTP/1.1 100 Continue\r\n\r\n", "");
        assert_eq!(strip(&out), strip(&whole.1), "split {split}");
    }
    whole
}

/// The error a request ends in (after any events before it), or `None`.
pub fn error_of(input: &[u8]) -> Option<Error> {
    match serve(input).0.last() {
        Some(Ev::Error(e)) => Some(*e),
        _ => None,
    }
}

/// Assert that `input` is refused with `err`, the canned answer says so and closes.
#[track_caller]
pub fn refused(input: &[u8], err: Error) {
    let (evs, out) = serve(input);
    assert_eq!(evs.last(), Some(&Ev::Error(err)), "{:?}: {evs:?}", String::from_utf8_lossy(input));
    let out = String::from_utf8_lossy(&out);
    let status_line = format!("HTTP/1.1 {} ", err.status());
    assert!(out.contains(&status_line), "{out}");
    assert!(out.ends_with(&format!("connection: close\r\n\r\n{}", encode::reason(err.status()))), "{out}");
}

/// Assert that `input` is one request, served, with `body` as its body.
#[track_caller]
pub fn accepted(input: &[u8], body: &[u8]) {
    let (evs, _) = serve(input);
    let got_body: Vec<u8> =
        evs.iter().filter_map(|e| if let Ev::Data(d) = e { Some(d.clone()) } else { None }).flatten().collect();
    assert!(
        matches!(evs.first(), Some(Ev::Head(_))) && evs.contains(&Ev::End),
        "{:?}: {evs:?}",
        String::from_utf8_lossy(input)
    );
    assert!(!evs.iter().any(|e| matches!(e, Ev::Error(_))), "{:?}: {evs:?}", String::from_utf8_lossy(input));
    assert_eq!(got_body, body, "{:?}", String::from_utf8_lossy(input));
}

/// Parse one head on a fresh connection and hand it to `f`.
pub fn with_head<R>(input: &[u8], f: impl FnOnce(Head<'_>) -> R) -> R {
    let mut conn = Conn::new(Limits::default());
    conn.feed(input);
    match conn.poll() {
        Ok(Event::Head(h)) => f(h),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
    }
}
