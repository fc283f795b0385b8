//! The decisions of a static response that need no I/O: validators (`ETag`,
//! `Last-Modified`), conditional requests (RFC 9110 §13.2.2's order), `Range`/`If-Range`
//! (§14) and the coding chosen from `Accept-Encoding` (§12.5.3).
//!
//! Choices where the RFC leaves one:
//! - **several ranges** are answered with the whole file (200), which §14.2 allows ("a server
//!   MAY ignore the Range header field"): multipart/byteranges is rare in practice (browsers
//!   and download tools ask for one range) and would need a body built of many parts;
//! - a `Range` that does not parse is ignored (200), as nginx does; one that parses but is
//!   past the end is 416 with `Content-Range: bytes */len`;
//! - `Range` is honoured on GET only (§14.2: range handling is defined for GET); a HEAD gets
//!   the whole file's head;
//! - without `Accept-Encoding` the file is sent as is (identity), as every common server does.

/// A representation's validators, made from its `fstat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// A strong entity-tag, quotes included: `"<mtime>-<size>"` in hex, plus the coding for a
    /// precompressed sibling (its own file, its own tag).
    pub etag: String,
    /// Seconds since the epoch (what `Last-Modified` can say).
    pub modified: u64,
}

impl Validators {
    pub fn new(size: u64, mtime_s: i64, mtime_ns: i64, coding: Coding) -> Validators {
        let suffix = match coding {
            Coding::Identity => "",
            Coding::Br => "-br",
            Coding::Gzip => "-gz",
        };
        Validators { etag: format!("\"{:x}.{:x}-{:x}{suffix}\"", mtime_s, mtime_ns, size), modified: mtime_s.max(0) as u64 }
    }
}

/// The request fields the decision reads (`None`: absent).
#[derive(Debug, Default, Clone, Copy)]
pub struct Conditions<'a> {
    /// GET (ranges apply) rather than HEAD.
    pub get: bool,
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
    pub range: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
}

/// What to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// 200, the whole representation.
    Full,
    /// 206, bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 304.
    NotModified,
    /// 412.
    PreconditionFailed,
    /// 416, `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// RFC 9110 §13.2.2: If-Match, else If-Unmodified-Since (412); If-None-Match, else
/// If-Modified-Since (304); then Range with its If-Range.
pub fn decide(c: &Conditions<'_>, v: &Validators, len: u64) -> Decision {
    if let Some(im) = c.if_match {
        if !matches_list(im, &v.etag, true) {
            return Decision::PreconditionFailed;
        }
    } else if let Some(since) = c.if_unmodified_since.and_then(parse_date) {
        if v.modified > since {
            return Decision::PreconditionFailed;
        }
    }
    if let Some(inm) = c.if_none_match {
        if matches_list(inm, &v.etag, false) {
            return Decision::NotModified; // GET and HEAD are the only methods served
        }
    } else if let Some(since) = c.if_modified_since.and_then(parse_date) {
        if v.modified <= since {
            return Decision::NotModified;
        }
    }
    let Some(range) = c.range.filter(|_| c.get) else { return Decision::Full };
    if let Some(ir) = c.if_range {
        if !if_range_holds(ir, v) {
            return Decision::Full;
        }
    }
    match parse_range(range, len) {
        RangeSpec::One { start, end } => Decision::Partial { start, end },
        RangeSpec::Unsatisfiable => Decision::Unsatisfiable,
        RangeSpec::Ignore => Decision::Full,
    }
}

fn parse_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

/// Whether `list` (`*` or entity-tags separated by commas) holds `etag`. Strong comparison
/// (If-Match, If-Range) refuses weak tags; weak (If-None-Match) ignores the `W/` prefix.
fn matches_list(list: &[u8], etag: &str, strong: bool) -> bool {
    let list = trim(list);
    if list == b"*" {
        return true;
    }
    list.split(|&c| c == b',').map(trim).any(|tag| match tag.strip_prefix(b"W/") {
        Some(weak) => !strong && weak == etag.as_bytes(),
        None => tag == etag.as_bytes(),
    })
}

/// §13.1.5: an entity-tag must match strongly; a date must equal Last-Modified exactly.
fn if_range_holds(v: &[u8], val: &Validators) -> bool {
    let v = trim(v);
    if v.first() == Some(&b'"') {
        return v == val.etag.as_bytes();
    }
    if v.starts_with(b"W/") {
        return false;
    }
    parse_date(v) == Some(val.modified)
}

fn trim(v: &[u8]) -> &[u8] {
    let s = v.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(v.len());
    let e = v.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(s, |i| i + 1);
    &v[s..e]
}

/// A `Range` field read against a representation of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    One { start: u64, end: u64 },
    /// Valid syntax, but no range overlaps the representation (416).
    Unsatisfiable,
    /// Not `bytes=`, malformed, or more than one range: the whole file (200).
    Ignore,
}

pub fn parse_range(v: &[u8], len: u64) -> RangeSpec {
    let v = trim(v);
    let Some(set) = v.get(..6).filter(|p| p.eq_ignore_ascii_case(b"bytes=")).map(|_| &v[6..]) else { return RangeSpec::Ignore };
    let mut parts = set.split(|&c| c == b',').map(trim).filter(|p| !p.is_empty());
    let (Some(one), None) = (parts.next(), parts.next()) else { return RangeSpec::Ignore };
    let Some(dash) = one.iter().position(|&c| c == b'-') else { return RangeSpec::Ignore };
    let (first, last) = (trim(&one[..dash]), trim(&one[dash + 1..]));
    if first.is_empty() {
        // A suffix: the last N bytes.
        let Some(n) = number(last) else { return RangeSpec::Ignore };
        if n == 0 || len == 0 {
            return RangeSpec::Unsatisfiable;
        }
        return RangeSpec::One { start: len - n.min(len), end: len - 1 };
    }
    let Some(start) = number(first) else { return RangeSpec::Ignore };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match number(last) {
            Some(e) if e >= start => e,
            _ => return RangeSpec::Ignore,
        }
    };
    if start >= len {
        return RangeSpec::Unsatisfiable;
    }
    RangeSpec::One { start, end: end.min(len - 1) }
}

fn number(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A content-coding a precompressed sibling can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Br,
    Gzip,
}

impl Coding {
    /// The sibling's suffix and the `Content-Encoding` value.
    pub fn suffix(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Coding::Identity => (b"", b""),
            Coding::Br => (b".br", b"br"),
            Coding::Gzip => (b".gz", b"gzip"),
        }
    }
}

/// The codings to try, best first (q-value, then br before gzip), each with q > 0; identity is
/// always the last resort and not listed. `*` stands for a coding not named.
pub fn codings(accept: Option<&[u8]>) -> Vec<Coding> {
    let Some(accept) = accept else { return Vec::new() };
    let (mut br, mut gzip, mut star) = (None, None, None);
    for item in accept.split(|&c| c == b',').map(trim).filter(|i| !i.is_empty()) {
        let mut parts = item.split(|&c| c == b';');
        let name = trim(parts.next().unwrap_or_default());
        let mut q = 1000;
        for p in parts {
            let p = trim(p);
            if p.len() > 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                q = qvalue(trim(&p[2..])).unwrap_or(0);
            }
        }
        if name.eq_ignore_ascii_case(b"br") {
            br = Some(q);
        } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
            gzip = Some(q);
        } else if name == b"*" {
            star = Some(q);
        }
    }
    let mut out: Vec<(u16, Coding)> = [(br.or(star), Coding::Br), (gzip.or(star), Coding::Gzip)]
        .into_iter()
        .filter_map(|(q, c)| q.filter(|&q| q > 0).map(|q| (q, c)))
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.0)); // stable: br stays first on a tie
    out.into_iter().map(|(_, c)| c).collect()
}

/// `0`, `0.5`, `1.000` → thousandths; `None` if not a qvalue.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&c| c == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut q: u16 = match int[0] {
        b'0' => 0,
        b'1' => 1000,
        _ => return None,
    };
    for (i, d) in frac.iter().enumerate() {
        q += u16::from(d - b'0') * [100, 10, 1][i];
    }
    (q <= 1000).then_some(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> Validators {
        Validators { etag: "\"abc\"".into(), modified: 784111777 } // Sun, 06 Nov 1994 08:49:37 GMT
    }
    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const EARLIER: &[u8] = b"Sat, 05 Nov 1994 08:49:37 GMT";
    const LATER: &[u8] = b"Mon, 07 Nov 1994 08:49:37 GMT";

    fn get() -> Conditions<'static> {
        Conditions { get: true, ..Default::default() }
    }

    #[test]
    fn no_conditions_full() {
        assert_eq!(decide(&get(), &v(), 10), Decision::Full);
    }

    #[test]
    fn if_none_match_is_a_weak_comparison() {
        for inm in [&b"\"abc\""[..], b"W/\"abc\"", b"\"x\", \"abc\"", b"*"] {
            assert_eq!(decide(&Conditions { if_none_match: Some(inm), ..get() }, &v(), 10), Decision::NotModified);
        }
        assert_eq!(decide(&Conditions { if_none_match: Some(b"\"x\""), ..get() }, &v(), 10), Decision::Full);
    }

    #[test]
    fn if_none_match_overrides_if_modified_since() {
        let c = Conditions { if_none_match: Some(b"\"x\""), if_modified_since: Some(LATER), ..get() };
        assert_eq!(decide(&c, &v(), 10), Decision::Full);
    }

    #[test]
    fn if_modified_since() {
        assert_eq!(decide(&Conditions { if_modified_since: Some(DATE), ..get() }, &v(), 10), Decision::NotModified);
        assert_eq!(decide(&Conditions { if_modified_since: Some(LATER), ..get() }, &v(), 10), Decision::NotModified);
        assert_eq!(decide(&Conditions { if_modified_since: Some(EARLIER), ..get() }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_modified_since: Some(b"garbage"), ..get() }, &v(), 10), Decision::Full);
    }

    #[test]
    fn if_match_is_strong_and_first() {
        assert_eq!(decide(&Conditions { if_match: Some(b"\"abc\""), ..get() }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_match: Some(b"*"), ..get() }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_match: Some(b"W/\"abc\""), ..get() }, &v(), 10), Decision::PreconditionFailed);
        let c = Conditions { if_match: Some(b"\"zzz\""), if_none_match: Some(b"\"abc\""), ..get() };
        assert_eq!(decide(&c, &v(), 10), Decision::PreconditionFailed);
    }

    #[test]
    fn if_unmodified_since() {
        assert_eq!(decide(&Conditions { if_unmodified_since: Some(EARLIER), ..get() }, &v(), 10), Decision::PreconditionFailed);
        assert_eq!(decide(&Conditions { if_unmodified_since: Some(DATE), ..get() }, &v(), 10), Decision::Full);
        // If-Match present: If-Unmodified-Since is not evaluated.
        let c = Conditions { if_match: Some(b"\"abc\""), if_unmodified_since: Some(EARLIER), ..get() };
        assert_eq!(decide(&c, &v(), 10), Decision::Full);
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range(b"bytes=0-4", 10), RangeSpec::One { start: 0, end: 4 });
        assert_eq!(parse_range(b"bytes=5-", 10), RangeSpec::One { start: 5, end: 9 });
        assert_eq!(parse_range(b"bytes=5-100", 10), RangeSpec::One { start: 5, end: 9 });
        assert_eq!(parse_range(b"bytes=-3", 10), RangeSpec::One { start: 7, end: 9 });
        assert_eq!(parse_range(b"bytes=-30", 10), RangeSpec::One { start: 0, end: 9 });
        assert_eq!(parse_range(b"BYTES = 1-2", 10), RangeSpec::Ignore);
        assert_eq!(parse_range(b"Bytes=1-2", 10), RangeSpec::One { start: 1, end: 2 });
        assert_eq!(parse_range(b"bytes=10-", 10), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 10), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-0", 0), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-1,3-4", 10), RangeSpec::Ignore);
        assert_eq!(parse_range(b"bytes=4-1", 10), RangeSpec::Ignore);
        assert_eq!(parse_range(b"items=0-1", 10), RangeSpec::Ignore);
        assert_eq!(parse_range(b"bytes=x-1", 10), RangeSpec::Ignore);
        assert_eq!(parse_range(b"bytes=99999999999999999999-", 10), RangeSpec::Ignore);
    }

    #[test]
    fn range_only_on_get_and_if_range() {
        let r = Conditions { range: Some(b"bytes=0-1"), ..get() };
        assert_eq!(decide(&r, &v(), 10), Decision::Partial { start: 0, end: 1 });
        assert_eq!(decide(&Conditions { get: false, ..r }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_range: Some(b"\"abc\""), ..r }, &v(), 10), Decision::Partial { start: 0, end: 1 });
        assert_eq!(decide(&Conditions { if_range: Some(b"\"old\""), ..r }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_range: Some(b"W/\"abc\""), ..r }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { if_range: Some(DATE), ..r }, &v(), 10), Decision::Partial { start: 0, end: 1 });
        assert_eq!(decide(&Conditions { if_range: Some(EARLIER), ..r }, &v(), 10), Decision::Full);
        assert_eq!(decide(&Conditions { range: Some(b"bytes=20-"), ..get() }, &v(), 10), Decision::Unsatisfiable);
    }

    #[test]
    fn accept_encoding() {
        assert_eq!(codings(None), vec![]);
        assert_eq!(codings(Some(b"gzip, deflate, br")), vec![Coding::Br, Coding::Gzip]);
        assert_eq!(codings(Some(b"gzip;q=1.0, br;q=0.5")), vec![Coding::Gzip, Coding::Br]);
        assert_eq!(codings(Some(b"br;q=0, gzip")), vec![Coding::Gzip]);
        assert_eq!(codings(Some(b"identity")), vec![]);
        assert_eq!(codings(Some(b"*")), vec![Coding::Br, Coding::Gzip]);
        assert_eq!(codings(Some(b"*;q=0.1, gzip;q=0.2")), vec![Coding::Gzip, Coding::Br]);
        assert_eq!(codings(Some(b"gzip;q=0, *")), vec![Coding::Br]);
        assert_eq!(codings(Some(b"GZIP; Q=0.3")), vec![Coding::Gzip]);
        assert_eq!(codings(Some(b"br;q=2")), vec![]);
        assert_eq!(codings(Some(b"x-gzip")), vec![Coding::Gzip]);
    }

    #[test]
    fn etags_differ_by_coding() {
        let a = Validators::new(10, 5, 6, Coding::Identity);
        let b = Validators::new(10, 5, 6, Coding::Br);
        assert_ne!(a.etag, b.etag);
        assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
    }
}
