//! Body framing: how many of the next bytes are body (hyper's `decode.rs` shape).
//!
//! `Decoder` is a small state enum, and chunked framing is a byte-level state machine whose
//! every state is one step of RFC 9112 §7.1's grammar:
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! chunk-ext-val  = token / quoted-string
//! ```
//! Why byte-level: a state holds everything needed to resume, so a size line split across
//! reads is never re-scanned and never buffered, and the same bytes give the same verdict
//! however they are split. Whitespace is accepted exactly where the grammar puts BWS (before
//! `;` and around `=`) and nowhere else: `5 \r\n` and `5\t\r\n` are refused, as h11 does and
//! hyper does not — a size line two parsers read differently is a smuggling vector. Extensions
//! are checked and dropped (no registered extension means anything to a server).
//!
//! Data is never copied here: `decode` says which range of the bytes given is body, and the
//! caller hands that range on (a zero-copy slice of the receive buffer).

use std::ops::Range;

use super::error::Error;
use super::head::check_trailers;
use super::scan::Scan;
use super::syntax::{is_ows, is_qdtext, is_quoted_pair_char, is_tchar};
use super::Limits;

/// The longest chunk-size line (size, extensions, CRLF) accepted; extensions carry nothing we
/// use, so anything this long is an attempt to make us buffer or scan.
pub const MAX_CHUNK_LINE: usize = 4096;

/// What the next bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// This range of the given bytes is body; everything before its end is consumed.
    Data(Range<usize>),
    /// The body is complete (trailers, if any, were checked and dropped).
    End,
    /// More bytes are needed.
    NeedData,
}

#[derive(Debug, Clone)]
pub enum Decoder {
    /// Content-Length: body bytes still to come (0 for a request without body).
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked(Chunked),
}

impl Decoder {
    pub fn chunked() -> Decoder {
        Decoder::Chunked(Chunked { state: State::SizeStart, size: 0, line: 0, total: 0, trailers: Scan::trailers() })
    }

    /// Whether the body is known to be complete without looking at more bytes.
    pub fn is_done(&self) -> bool {
        match self {
            Decoder::Length(n) => *n == 0,
            Decoder::Chunked(c) => c.state == State::Done,
        }
    }

    /// Body bytes still expected, when the framing tells (`None` for chunked).
    pub fn remaining(&self) -> Option<u64> {
        match self {
            Decoder::Length(n) => Some(*n),
            Decoder::Chunked(c) if c.state == State::Done => Some(0),
            Decoder::Chunked(_) => None,
        }
    }

    /// Read framing from `buf` (the unconsumed bytes). Returns how many bytes are consumed and
    /// what comes next. Never returns an empty `Data`.
    pub fn decode(&mut self, buf: &[u8], limits: &Limits) -> Result<(usize, Step), Error> {
        match self {
            Decoder::Length(0) => Ok((0, Step::End)),
            Decoder::Length(rem) => {
                let n = buf.len().min(usize::try_from(*rem).unwrap_or(usize::MAX));
                if n == 0 {
                    return Ok((0, Step::NeedData));
                }
                *rem -= n as u64;
                Ok((n, Step::Data(0..n)))
            }
            Decoder::Chunked(c) => c.decode(buf, limits),
        }
    }
}

/// Where in the chunked grammar the next byte falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first hex digit of a chunk size.
    SizeStart,
    /// More hex digits, or what may follow them: BWS, `;`, CR.
    Size,
    /// BWS after the size: only `;` (or more BWS) may follow.
    SizeWs,
    /// After `;` (and BWS): an extension name.
    ExtStart,
    /// In an extension name.
    ExtName,
    /// BWS after a name: `=` or `;` only.
    ExtNameWs,
    /// After `=` (and BWS): a token or a quoted string.
    ExtValueStart,
    /// In a token value.
    ExtToken,
    /// Inside a quoted-string value.
    ExtQuoted,
    /// After a backslash inside a quoted string.
    ExtQuotedEscape,
    /// Right after the closing quote.
    ExtQuotedEnd,
    /// BWS after a value: `;` only.
    ExtValueWs,
    /// CR of the size line seen; LF must follow.
    SizeLf,
    /// Chunk data, bytes left in this chunk.
    Data(u64),
    /// CR after chunk data.
    DataCr,
    /// LF after chunk data.
    DataLf,
    /// After the last chunk's line: the trailer section.
    Trailers,
    Done,
}

#[derive(Debug, Clone)]
pub struct Chunked {
    state: State,
    /// The size of the chunk whose line is being read.
    size: u64,
    /// Bytes of the current size line so far.
    line: usize,
    /// Body bytes declared so far (for `Limits::max_body`).
    total: u64,
    trailers: Scan,
}

impl Chunked {
    fn decode(&mut self, buf: &[u8], limits: &Limits) -> Result<(usize, Step), Error> {
        let mut i = 0;
        loop {
            match self.state {
                State::Data(rem) => {
                    let n = (buf.len() - i).min(usize::try_from(rem).unwrap_or(usize::MAX));
                    if n == 0 {
                        return Ok((i, Step::NeedData));
                    }
                    self.state = if rem == n as u64 { State::DataCr } else { State::Data(rem - n as u64) };
                    return Ok((i + n, Step::Data(i..i + n)));
                }
                State::Trailers => {
                    // Not consumed until whole: the scanner's offsets are from the section's
                    // first byte, which stays at the front of what the caller passes.
                    let section = &buf[i..];
                    let Some(found) = self.trailers.scan(section, 0, limits.max_header_bytes)? else {
                        return Ok((i, Step::NeedData));
                    };
                    // Most bodies have no trailers: skip the parser (and its slots) for those.
                    if found.end > 2 {
                        check_trailers(&section[..found.end], limits)?;
                    }
                    self.state = State::Done;
                    return Ok((i + found.end, Step::End));
                }
                State::Done => return Ok((i, Step::End)),
                _ => {}
            }
            let Some(&b) = buf.get(i) else { return Ok((i, Step::NeedData)) };
            i += 1;
            self.step(b, limits)?;
        }
    }

    /// One byte of framing (a size line, or the CRLF after data).
    fn step(&mut self, b: u8, limits: &Limits) -> Result<(), Error> {
        use State::*;
        match self.state {
            DataCr | DataLf => {
                let want = if self.state == DataCr { b'\r' } else { b'\n' };
                if b != want {
                    return Err(Error::ChunkDataEnding);
                }
                self.state = if self.state == DataCr { DataLf } else { SizeStart };
                return Ok(());
            }
            SizeLf => {
                if b != b'\n' {
                    return Err(Error::BareCr);
                }
                return self.line_done(limits);
            }
            _ => {}
        }
        // In a size line: bound it, refuse a bare LF, then follow the grammar.
        self.line += 1;
        if self.line > MAX_CHUNK_LINE {
            return Err(Error::ChunkLineTooLong);
        }
        if b == b'\n' {
            return Err(Error::BareLf);
        }
        let ext = Error::InvalidChunkExtension;
        self.state = match (self.state, b) {
            (SizeStart | Size, _) if b.is_ascii_hexdigit() => {
                let digit = u64::from((b as char).to_digit(16).unwrap_or(0) as u8);
                self.size =
                    self.size.checked_mul(16).and_then(|s| s.checked_add(digit)).ok_or(Error::ChunkSizeOverflow)?;
                Size
            }
            (SizeStart, _) => return Err(Error::InvalidChunkSize),
            (Size, b';') | (SizeWs, b';') => ExtStart,
            (Size, _) | (SizeWs, _) if is_ows(b) => SizeWs,
            (Size, b'\r') => SizeLf,
            (Size, _) | (SizeWs, _) => return Err(Error::InvalidChunkSize),
            (ExtStart, _) if is_ows(b) => ExtStart,
            (ExtStart, _) if is_tchar(b) => ExtName,
            (ExtName, _) if is_tchar(b) => ExtName,
            (ExtName | ExtNameWs, b'=') => ExtValueStart,
            (ExtName | ExtNameWs | ExtToken | ExtQuotedEnd | ExtValueWs, b';') => ExtStart,
            (ExtName | ExtNameWs, _) if is_ows(b) => ExtNameWs,
            (ExtName | ExtToken | ExtQuotedEnd, b'\r') => SizeLf,
            (ExtValueStart, _) if is_ows(b) => ExtValueStart,
            (ExtValueStart, b'"') => ExtQuoted,
            (ExtValueStart | ExtToken, _) if is_tchar(b) => ExtToken,
            (ExtToken | ExtQuotedEnd | ExtValueWs, _) if is_ows(b) => ExtValueWs,
            (ExtQuoted, b'"') => ExtQuotedEnd,
            (ExtQuoted, b'\\') => ExtQuotedEscape,
            (ExtQuoted, _) if is_qdtext(b) => ExtQuoted,
            (ExtQuotedEscape, _) if is_quoted_pair_char(b) => ExtQuoted,
            _ => return Err(ext),
        };
        Ok(())
    }

    /// The size line's CRLF arrived: start the chunk's data, or the trailers after the last.
    fn line_done(&mut self, limits: &Limits) -> Result<(), Error> {
        let size = std::mem::take(&mut self.size);
        self.line = 0;
        if size == 0 {
            self.state = State::Trailers;
            return Ok(());
        }
        self.total = self.total.checked_add(size).ok_or(Error::BodyTooLarge)?;
        if limits.max_body.is_some_and(|max| self.total > max) {
            return Err(Error::BodyTooLarge);
        }
        self.state = State::Data(size);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testing::decode_chunked;

    fn run(input: &[u8], split: usize, limits: &Limits) -> Result<(Vec<u8>, usize), Error> {
        decode_chunked(input, || split, limits)
    }

    fn check(input: &[u8]) -> Result<(Vec<u8>, usize), Error> {
        let l = Limits::default();
        let whole = run(input, usize::MAX, &l);
        for split in [1, 2, 3, 7] {
            assert_eq!(run(input, split, &l), whole, "split {split} of {:?}", String::from_utf8_lossy(input));
        }
        whole
    }

    #[test]
    fn chunks_extensions_and_trailers() {
        let ok = |input: &[u8], body: &[u8]| {
            assert_eq!(check(input), Ok((body.to_vec(), 0)), "{:?}", String::from_utf8_lossy(input))
        };
        ok(b"5\r\nhello\r\n0\r\n\r\n", b"hello");
        ok(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", b"hello world");
        ok(b"00005\r\nhello\r\n000\r\n\r\n", b"hello");
        ok(b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789");
        ok(b"5;name\r\nhello\r\n0\r\n\r\n", b"hello");
        ok(b"5;a=b;c=\"d e\\\"f\"\r\nhello\r\n0;last\r\n\r\n", b"hello");
        // BWS where the grammar has it: before ';', around '='.
        ok(b"5 ;a = b\t;c\r\nhello\r\n0\r\n\r\n", b"hello");
        ok(b"5;a=\"\"\r\nhello\r\n0\r\n\r\n", b"hello");
        ok(b"5\r\nhello\r\n0\r\nExpires: never\r\nX-Sum: 1\r\n\r\n", b"hello");
    }

    #[test]
    fn leaves_the_next_message_alone() {
        assert_eq!(check(b"1\r\na\r\n0\r\n\r\nGET /"), Ok((b"a".to_vec(), 5)));
    }

    #[test]
    fn refuses_bad_sizes() {
        let err = |input: &[u8], e: Error| assert_eq!(check(input), Err(e), "{:?}", String::from_utf8_lossy(input));
        err(b"+5\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"-5\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"0x5\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b";a\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b" 5\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"5 \r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"5 5\r\nhello\r\n0\r\n\r\n", Error::InvalidChunkSize);
        err(b"g\r\n", Error::InvalidChunkSize);
        // 17 hex digits: more than u64 holds.
        err(b"10000000000000000\r\n", Error::ChunkSizeOverflow);
        // ... while leading zeros are only zeros.
        assert!(check(b"00000000000000000001\r\na\r\n0\r\n\r\n").is_ok());
    }

    #[test]
    fn refuses_bad_terminators() {
        let err = |input: &[u8], e: Error| assert_eq!(check(input), Err(e), "{:?}", String::from_utf8_lossy(input));
        err(b"5\nhello\r\n0\r\n\r\n", Error::BareLf);
        err(b"5\rhello\r\n0\r\n\r\n", Error::BareCr);
        err(b"5\r\nhello\n0\r\n\r\n", Error::ChunkDataEnding);
        err(b"5\r\nhelloX\r\n0\r\n\r\n", Error::ChunkDataEnding);
        err(b"5\r\nhello\r0\r\n\r\n", Error::ChunkDataEnding);
        err(b"5\r\nhello\r\n0\r\n\n", Error::BareLf);
        err(b"5\r\nhello\r\n0\r\n\r", Error::IncompleteBody);
        err(b"5\r\nhello\r\n0\r\nX: a\rb\r\n\r\n", Error::BareCr);
        err(b"5\r\nhello\r\n0\r\nX : a\r\n\r\n", Error::InvalidTrailer);
        err(b"5\r\nhello\r\n0\r\nX: \x00\r\n\r\n", Error::InvalidTrailer);
        err(b"5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n", Error::ObsFold);
        err(b"5\r\nhel", Error::IncompleteBody);
    }

    #[test]
    fn refuses_bad_extensions() {
        let err = |input: &[u8]| {
            assert_eq!(check(input), Err(Error::InvalidChunkExtension), "{:?}", String::from_utf8_lossy(input))
        };
        err(b"5;\r\nhello\r\n0\r\n\r\n");
        err(b"5;=b\r\nhello\r\n0\r\n\r\n");
        err(b"5;a=\r\nhello\r\n0\r\n\r\n");
        err(b"5;a \r\nhello\r\n0\r\n\r\n");
        err(b"5;a=b \r\nhello\r\n0\r\n\r\n");
        err(b"5;a=\"b\r\nhello\r\n0\r\n\r\n");
        err(b"5;a=\"b\"c\r\nhello\r\n0\r\n\r\n");
        err(b"5;a=b\"c\"\r\nhello\r\n0\r\n\r\n");
        err(b"5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n");
        err(b"5;a@b\r\nhello\r\n0\r\n\r\n");
        err(b"5;a\x00\r\nhello\r\n0\r\n\r\n");
    }

    #[test]
    fn limits() {
        let mut line = b"5;".to_vec();
        line.resize(MAX_CHUNK_LINE + 1, b'a');
        assert_eq!(check(&line), Err(Error::ChunkLineTooLong));
        let small = Limits { max_body: Some(8), ..Limits::default() };
        assert_eq!(run(b"5\r\nhello\r\n4\r\nabcd\r\n0\r\n\r\n", 1, &small), Err(Error::BodyTooLarge));
        assert_eq!(run(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", 1, &small), Ok((b"helloabc".to_vec(), 0)));
        let few = Limits { max_headers: 1, ..Limits::default() };
        assert_eq!(run(b"0\r\nA: 1\r\nB: 2\r\n\r\n", 1, &few), Err(Error::TooManyHeaders));
        let tight = Limits { max_header_bytes: 8, ..Limits::default() };
        assert_eq!(run(b"0\r\nA: 1\r\nB: 2\r\n\r\n", 1, &tight), Err(Error::HeaderSectionTooLarge));
    }

    #[test]
    fn length() {
        let l = Limits::default();
        let mut d = Decoder::Length(5);
        assert_eq!(d.decode(b"hel", &l), Ok((3, Step::Data(0..3))));
        assert_eq!(d.decode(b"", &l), Ok((0, Step::NeedData)));
        assert_eq!(d.decode(b"loGET", &l), Ok((2, Step::Data(0..2))));
        assert_eq!(d.decode(b"GET", &l), Ok((0, Step::End)));
        assert!(d.is_done());
    }
}
