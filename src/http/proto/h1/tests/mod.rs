//! Tests of the whole protocol core through `Conn`, as the I/O layer drives it. The modules'
//! own tests (scan, decode, syntax, date) sit beside their code.
//!
//! `serve` runs the reference driver (`testing::serve_with`, shared with the fuzz targets): a
//! server whose application reads every body and answers every request. It feeds the input
//! whole and in 1, 2 and 5 byte pieces, and wants the same events and output each time.

mod flow;
mod limits;
mod requests;
mod responses;
mod smuggling;

use super::testing::*;
use super::*;

/// `serve_with` at every split in a few sizes; all must agree. The whole-input result.
pub fn serve(input: &[u8]) -> (Vec<Ev>, Vec<u8>) {
    serve_limits(input, Limits::default())
}

pub fn serve_limits(input: &[u8], limits: Limits) -> (Vec<Ev>, Vec<u8>) {
    let whole = serve_with(input, || usize::MAX, limits.clone());
    for split in [1, 2, 5] {
        let (evs, out) = serve_with(input, || split, limits.clone());
        assert_eq!(evs, whole.0, "split {split} of {:?}", String::from_utf8_lossy(input));
        // The output differs only by `100 Continue`s sent while the body had not arrived.
        assert_eq!(without_continues(&out), without_continues(&whole.1), "split {split}");
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
