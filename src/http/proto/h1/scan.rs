//! Finding where a head (or a trailer section) ends, in bytes that arrive in pieces.
//!
//! Why a scanner before httparse: httparse parses a head from its first byte every time it is
//! called and answers `Partial` until the head is whole, so feeding a head byte by byte would
//! cost O(n²) — a slowloris client could make the loop thread re-parse 16 KiB for every byte it
//! sends. The scanner remembers how far it got (`at`), looks at each byte once, and httparse
//! runs once, on a complete head.
//!
//! It also holds the checks that must see bytes *before* the head is complete:
//! - the limits (414 for the request line, 431 for the field section), so a peer that never
//!   ends its head is refused as soon as it is over the limit, not when the buffer is full;
//! - the line endings: CR must be followed by LF and LF preceded by CR, everywhere (httparse
//!   accepts a bare LF as a line end; RFC 9112 §2.2 allows that but we take the strict side, as
//!   a proxy in front of us may not);
//! - a field line starting with SP/HTAB (obs-fold, or whitespace before the first field: RFC
//!   9112 §2.2 and §5.2 say reject);
//! - the method's bytes, so a peer speaking TLS or garbage to the plaintext port is answered 400
//!   at its first byte instead of at the head timeout.
//!
//! Every check is positional: a verdict depends only on the bytes before the point where it is
//! made, and the limits are checked before a byte is classified. So the same bytes give the same
//! verdict however they are split across reads — the invariant the `h1_request` fuzz target
//! checks.

use super::error::Error;
use super::syntax::is_tchar;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the request line: empty lines (CRLF) are skipped (RFC 9112 §2.2 SHOULD).
    Lead,
    /// In the method: tchar until the first SP.
    Method,
    /// In the rest of the request line, until CRLF.
    RequestLine,
    /// In the field section, until an empty line.
    Fields,
}

/// Where a complete section lies in the bytes scanned (offsets from the first byte given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// First byte of the request line (after skipped empty lines); 0 for trailers.
    pub start: usize,
    /// One past the empty line's LF.
    pub end: usize,
}

#[derive(Debug, Clone)]
pub struct Scan {
    stage: Stage,
    /// Bytes before `at` have been checked.
    at: usize,
    /// First byte of the request line.
    start: usize,
    /// First byte of the current field line.
    line_start: usize,
    /// First byte of the field section.
    fields_start: usize,
}

/// The first CR or LF in `s`.
///
/// Eight bytes at a time: a word with no byte below 0x0E (CR and LF are 0x0D and 0x0A; field
/// content is mostly 0x20 and up) is skipped whole, and only a word that has one is looked at
/// byte by byte. This loop is most of what a small head costs (perf put the byte-at-a-time
/// `position` at a fifth of a parse-and-respond cycle).
#[inline]
fn find_eol(s: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let is_eol = |b: &u8| *b == b'\r' || *b == b'\n';
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let x = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        // "has a byte less than 0x0E" (Bit Twiddling Hacks' hasless, exact for n <= 128).
        if x.wrapping_sub(ONES * 0x0e) & !x & HIGH != 0 {
            if let Some(i) = word.iter().position(is_eol) {
                return Some(at + i);
            }
        }
        at += 8;
    }
    words.remainder().iter().position(is_eol).map(|i| at + i)
}

impl Scan {
    /// A scanner for a request head.
    pub const fn head() -> Scan {
        Scan { stage: Stage::Lead, at: 0, start: 0, line_start: 0, fields_start: 0 }
    }

    /// A scanner for a trailer section (fields only, no request line).
    pub const fn trailers() -> Scan {
        Scan { stage: Stage::Fields, at: 0, start: 0, line_start: 0, fields_start: 0 }
    }

    /// Whether any byte of a head was seen (leading empty lines count).
    pub fn started(&self) -> bool {
        self.at > 0
    }

    /// Whether the request line has begun (past any leading empty lines).
    pub fn in_request(&self) -> bool {
        self.stage != Stage::Lead
    }

    /// Scan `buf` (every byte of the section received so far, from its first) on from where
    /// the last call stopped. `Ok(None)`: incomplete so far, call again with more bytes.
    /// `max_line` bounds the request line (and the empty lines before it), `max_fields` the
    /// field section including its final CRLF.
    pub fn scan(&mut self, buf: &[u8], max_line: usize, max_fields: usize) -> Result<Option<Found>, Error> {
        let len = buf.len();
        loop {
            match self.stage {
                Stage::Lead => {
                    if self.at > max_line {
                        return Err(Error::RequestLineTooLong);
                    }
                    match buf.get(self.at) {
                        None => return Ok(None),
                        Some(b'\r') => match buf.get(self.at + 1) {
                            None => return Ok(None),
                            Some(b'\n') => {
                                self.at += 2;
                                self.start = self.at;
                            }
                            Some(_) => return Err(Error::BareCr),
                        },
                        Some(b'\n') => return Err(Error::BareLf),
                        Some(_) => self.stage = Stage::Method,
                    }
                }
                Stage::Method => loop {
                    if self.at - self.start > max_line {
                        return Err(Error::RequestLineTooLong);
                    }
                    let Some(&b) = buf.get(self.at) else { return Ok(None) };
                    if is_tchar(b) {
                        self.at += 1;
                    } else if b == b' ' && self.at > self.start {
                        self.at += 1;
                        self.stage = Stage::RequestLine;
                        break;
                    } else if b == b'\r' || b == b'\n' {
                        return Err(Error::InvalidRequestLine);
                    } else {
                        return Err(Error::InvalidMethod);
                    }
                },
                Stage::RequestLine => {
                    let j = match find_eol(&buf[self.at..]) {
                        Some(off) => self.at + off,
                        None => len,
                    };
                    if j - self.start > max_line {
                        return Err(Error::RequestLineTooLong);
                    }
                    if !self.line_end(buf, j)? {
                        return Ok(None);
                    }
                    self.fields_start = self.at;
                    self.line_start = self.at;
                    self.stage = Stage::Fields;
                }
                Stage::Fields => {
                    if self.at == self.line_start {
                        if self.at - self.fields_start > max_fields {
                            return Err(Error::HeaderSectionTooLarge);
                        }
                        match buf.get(self.at) {
                            None => return Ok(None),
                            Some(b'\r') => match buf.get(self.at + 1) {
                                None => return Ok(None),
                                Some(b'\n') => {
                                    let end = self.at + 2;
                                    if end - self.fields_start > max_fields {
                                        return Err(Error::HeaderSectionTooLarge);
                                    }
                                    return Ok(Some(Found { start: self.start, end }));
                                }
                                Some(_) => return Err(Error::BareCr),
                            },
                            Some(b'\n') => return Err(Error::BareLf),
                            Some(b' ' | b'\t') => return Err(Error::ObsFold),
                            Some(_) => {}
                        }
                    }
                    let j = match find_eol(&buf[self.at..]) {
                        Some(off) => self.at + off,
                        None => len,
                    };
                    if j - self.fields_start > max_fields {
                        return Err(Error::HeaderSectionTooLarge);
                    }
                    if !self.line_end(buf, j)? {
                        return Ok(None);
                    }
                    self.line_start = self.at;
                }
            }
        }
    }

    /// At `j` (the first CR/LF from `at`, or the end of `buf`): step over a CRLF and say true,
    /// or remember where to resume and say false, or refuse a bare CR/LF.
    #[inline]
    fn line_end(&mut self, buf: &[u8], j: usize) -> Result<bool, Error> {
        match buf.get(j) {
            None => {
                self.at = j;
                Ok(false)
            }
            Some(b'\n') => Err(Error::BareLf),
            _ => match buf.get(j + 1) {
                None => {
                    self.at = j;
                    Ok(false)
                }
                Some(b'\n') => {
                    self.at = j + 2;
                    Ok(true)
                }
                Some(_) => Err(Error::BareCr),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(b: &[u8]) -> Result<Option<Found>, Error> {
        Scan::head().scan(b, 100, 200)
    }

    /// Feed one more byte per call: the verdict must be the one `whole` gives.
    fn bytewise(b: &[u8]) -> Result<Option<Found>, Error> {
        let mut s = Scan::head();
        for n in 0..=b.len() {
            if let Some(f) = s.scan(&b[..n], 100, 200)? {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    #[test]
    fn finds_the_end_of_a_head() {
        let h = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
        let f = Found { start: 0, end: h.len() - 4 };
        assert_eq!(whole(h), Ok(Some(f)));
        assert_eq!(bytewise(h), Ok(Some(f)));
        let h = b"\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        assert_eq!(whole(h), Ok(Some(Found { start: 4, end: h.len() })));
        assert_eq!(bytewise(h), Ok(Some(Found { start: 4, end: h.len() })));
    }

    #[test]
    fn verdicts_do_not_depend_on_splits() {
        let cases: &[(&[u8], Error)] = &[
            (b"GET / HTTP/1.1\nHost: a\r\n\r\n", Error::BareLf),
            (b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", Error::BareCr),
            (b"\n", Error::BareLf),
            (b"\rX", Error::BareCr),
            (b"GET / HTTP/1.1\r\n folded: x\r\n\r\n", Error::ObsFold),
            (b"GET / HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n", Error::ObsFold),
            (b"\x16\x03\x01\x02\x00", Error::InvalidMethod),
            (b" GET / HTTP/1.1\r\n\r\n", Error::InvalidMethod),
            (b"GET\r\n\r\n", Error::InvalidRequestLine),
        ];
        for (bytes, err) in cases {
            assert_eq!(whole(bytes), Err(*err), "{:?}", String::from_utf8_lossy(bytes));
            assert_eq!(bytewise(bytes), Err(*err), "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn limits_are_checked_before_the_end_arrives() {
        let mut long = b"GET /".to_vec();
        long.resize(101, b'a');
        assert_eq!(whole(&long), Err(Error::RequestLineTooLong));
        // ... and before a later bare LF is classified.
        long.extend_from_slice(b"\n");
        assert_eq!(whole(&long), Err(Error::RequestLineTooLong));
        assert_eq!(bytewise(&long), Err(Error::RequestLineTooLong));
        let mut fields = b"GET / HTTP/1.1\r\nX: ".to_vec();
        fields.resize(16 + 201, b'a');
        assert_eq!(whole(&fields), Err(Error::HeaderSectionTooLarge));
        assert_eq!(bytewise(&fields), Err(Error::HeaderSectionTooLarge));
        // Exactly at the limit (final CRLF included) passes; one more byte does not.
        let mut exact = b"GET / HTTP/1.1\r\nX: ".to_vec();
        exact.resize(16 + 196, b'a');
        exact.extend_from_slice(b"\r\n");
        let mut over = exact.clone();
        over.insert(20, b'a');
        exact.extend_from_slice(b"\r\n");
        over.extend_from_slice(b"\r\n");
        assert!(matches!(whole(&exact), Ok(Some(_))));
        assert_eq!(whole(&over), Err(Error::HeaderSectionTooLarge));
        assert_eq!(bytewise(&over), Err(Error::HeaderSectionTooLarge));
    }

    #[test]
    fn finds_line_ends_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                for (eol, other) in [(b'\r', b'a'), (b'\n', b'\t'), (b'\r', 0x0e), (b'\n', 0xff)] {
                    let mut s = vec![other; len];
                    s[at] = eol;
                    if at + 1 < len {
                        s[at + 1] = eol;
                    }
                    assert_eq!(find_eol(&s), Some(at), "{s:?}");
                }
            }
            assert_eq!(find_eol(&vec![b'\t'; len]), None);
        }
    }

    #[test]
    fn trailers() {
        let mut s = Scan::trailers();
        assert_eq!(s.scan(b"\r\n", 0, 100), Ok(Some(Found { start: 0, end: 2 })));
        let mut s = Scan::trailers();
        assert_eq!(s.scan(b"X: 1\r\n", 0, 100), Ok(None));
        assert_eq!(s.scan(b"X: 1\r\n\r\n", 0, 100), Ok(Some(Found { start: 0, end: 8 })));
        assert_eq!(Scan::trailers().scan(b" X: 1\r\n\r\n", 0, 100), Err(Error::ObsFold));
    }
}
