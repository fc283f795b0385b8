//! One test per smuggling rule, with the exact bytes. Each is a 400 (or the status named) and a
//! closed connection; none is repaired into a second interpretation.

use super::*;

#[test]
fn content_length_with_transfer_encoding() {
    // RFC 9112 §6.3 allows "TE overrides CL"; we refuse, as it "ought to be handled as an
    // error". hyper and h11 drop the Content-Length and read chunked.
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        Error::ContentLengthAndTransferEncoding,
    );
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        Error::ContentLengthAndTransferEncoding,
    );
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n",
        Error::ContentLengthAndTransferEncoding,
    );
}

#[test]
fn transfer_encoding_final_coding_must_be_chunked() {
    for te in
        [&b"chunked, gzip"[..], b"gzip", b"identity", b"xchunked", b"chunked;q=1", b"\"chunked\"", b"chunk", b"", b","]
    {
        let mut req = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ".to_vec();
        req.extend_from_slice(te);
        req.extend_from_slice(b"\r\n\r\n0\r\n\r\n");
        refused(&req, Error::TransferEncodingNotChunked);
    }
    // Two field lines are one list: the last coding decides.
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
        Error::TransferEncodingNotChunked,
    );
}

#[test]
fn transfer_encoding_chunked_is_case_insensitive_and_may_have_empty_elements() {
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ChUnKeD\r\n\r\n2\r\nhi\r\n0\r\n\r\n", b"hi");
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked ,\r\n\r\n2\r\nhi\r\n0\r\n\r\n", b"hi");
}

#[test]
fn chunked_twice_and_unknown_codings() {
    refused(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", Error::ChunkedTwice);
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        Error::ChunkedTwice,
    );
    // RFC 9112 §6.1: a coding we cannot undo is a 501, not a body handed on still encoded.
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        Error::TransferCodingNotImplemented,
    );
}

#[test]
fn transfer_encoding_in_http10() {
    // RFC 9112 §6.1: a server MUST treat it as faulty framing and close. h11 and hyper read it.
    refused(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Error::TransferEncodingHttp10);
}

#[test]
fn content_length_values_that_disagree() {
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        Error::ContentLengthMismatch,
    );
    refused(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello!", Error::ContentLengthMismatch);
    refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5, 6\r\n\r\nhello!",
        Error::ContentLengthMismatch,
    );
}

#[test]
fn identical_content_lengths_are_one() {
    // Our choice (RFC 9110 §8.6 allows it; h11 and hyper agree): see `head::ContentLength`.
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", b"hello");
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", b"hello");
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello", b"hello");
}

#[test]
fn content_length_that_is_not_digits() {
    for cl in [
        &b"+5"[..],
        b"-5",
        b"0x5",
        b"5 5",
        b"",
        b"5,",
        b",5",
        b"5,,5",
        b"5a",
        b"five",
        b"5.0",
        b"18446744073709551616",
        b"99999999999999999999999",
    ] {
        let mut req = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: ".to_vec();
        req.extend_from_slice(cl);
        req.extend_from_slice(b"\r\n\r\nhello");
        refused(&req, Error::InvalidContentLength);
    }
    // OWS around a field value is not part of it (RFC 9110 §5.5).
    accepted(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \t5 \r\n\r\nhello", b"hello");
}

fn chunked(body: &[u8]) -> Vec<u8> {
    let mut req = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(body);
    req
}

#[test]
fn chunk_sizes() {
    refused(&chunked(b"+5\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    refused(&chunked(b"-5\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    refused(&chunked(b"0x5\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    refused(&chunked(b"\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    refused(&chunked(b" 5\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    // Whitespace after the size, with no extension: hyper accepts it, the grammar does not.
    refused(&chunked(b"5 \r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkSize);
    refused(&chunked(b"fffffffffffffffff\r\n"), Error::ChunkSizeOverflow);
    // 2^64-1 is a valid size, and fails only as more than the body limit allows.
    let small = Limits { max_body: Some(1 << 20), ..Limits::default() };
    assert_eq!(serve_limits(&chunked(b"ffffffffffffffff\r\n"), small).0.last(), Some(&Ev::Error(Error::BodyTooLarge)));
}

#[test]
fn chunk_terminators() {
    refused(&chunked(b"5\nhello\r\n0\r\n\r\n"), Error::BareLf);
    refused(&chunked(b"5\rhello\r\n0\r\n\r\n"), Error::BareCr);
    refused(&chunked(b"5\r\nhello\n0\r\n\r\n"), Error::ChunkDataEnding);
    refused(&chunked(b"5\r\nhelloXX0\r\n\r\n"), Error::ChunkDataEnding);
    refused(&chunked(b"5\r\nhello\r\n0\r\n\n"), Error::BareLf);
    // A size that undercounts the data: the extra byte is where CRLF must be.
    refused(&chunked(b"4\r\nhello\r\n0\r\n\r\n"), Error::ChunkDataEnding);
}

#[test]
fn chunk_extensions_are_checked_then_ignored() {
    accepted(&chunked(b"5;a=b;c=\"x y\"\r\nhello\r\n0;end\r\n\r\n"), b"hello");
    refused(&chunked(b"5;\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkExtension);
    refused(&chunked(b"5;a=\"b\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkExtension);
    refused(&chunked(b"5;a\x00b\r\nhello\r\n0\r\n\r\n"), Error::InvalidChunkExtension);
    // An extension hiding a line end: the LF is refused, never taken as the line's end.
    refused(&chunked(b"5;a\nhello\r\n0\r\n\r\n"), Error::BareLf);
}

#[test]
fn trailers_follow_the_field_rules() {
    accepted(&chunked(b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"), b"hello");
    refused(&chunked(b"5\r\nhello\r\n0\r\nX-Checksum : abc\r\n\r\n"), Error::InvalidTrailer);
    refused(&chunked(b"5\r\nhello\r\n0\r\nX-Checksum: a\x01c\r\n\r\n"), Error::InvalidTrailer);
    refused(&chunked(b"5\r\nhello\r\n0\r\nX-Checksum: a\r\n bc\r\n\r\n"), Error::ObsFold);
    refused(&chunked(b"5\r\nhello\r\n0\r\nX-Checksum: a\rbc\r\n\r\n"), Error::BareCr);
}

#[test]
fn host() {
    refused(b"GET / HTTP/1.1\r\n\r\n", Error::MissingHost);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", Error::DuplicateHost);
    refused(b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", Error::DuplicateHost);
    refused(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", Error::InvalidHost);
    refused(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", Error::InvalidHost);
    refused(b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", Error::InvalidHost);
    // HTTP/1.0 needs none; an empty one is what RFC 9112 §3.2 asks for a URI with no authority.
    accepted(b"GET / HTTP/1.0\r\n\r\n", b"");
    accepted(b"GET / HTTP/1.1\r\nHost:\r\n\r\n", b"");
    accepted(b"GET / HTTP/1.1\r\nHost: [::1]:8000\r\n\r\n", b"");
}

#[test]
fn line_endings() {
    refused(b"GET / HTTP/1.1\rHost: a\r\n\r\n", Error::BareCr);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r2\r\n\r\n", Error::BareCr);
    refused(b"GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", Error::BareCr);
    // A bare LF: RFC 9112 §2.2 lets a recipient accept it (httparse, h11, uvicorn do); a proxy
    // in front of us may not, so a head it reads differently is refused.
    refused(b"GET / HTTP/1.1\nHost: a\n\n", Error::BareLf);
    refused(b"GET / HTTP/1.1\r\nHost: a\n\r\n", Error::BareLf);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\n\n", Error::BareLf);
}

#[test]
fn obs_fold_and_leading_whitespace() {
    // RFC 9112 §5.2: a server MUST reject obs-fold (or replace it; we never repair).
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", Error::ObsFold);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n", Error::ObsFold);
    // RFC 9112 §2.2: whitespace between the start-line and the first field MUST be rejected.
    refused(b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", Error::ObsFold);
}

#[test]
fn whitespace_before_colon() {
    // RFC 9112 §5.1: MUST respond 400. A proxy that strips it would see a different field.
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\nhello", Error::SpaceBeforeColon);
    refused(b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", Error::SpaceBeforeColon);
}

#[test]
fn field_names_and_values() {
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX@Y: 1\r\n\r\n", Error::InvalidHeaderName);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n", Error::InvalidHeaderName);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX-Y 1\r\n\r\n", Error::InvalidHeaderName);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", Error::InvalidHeaderValue);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", Error::InvalidHeaderValue);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", Error::InvalidHeaderValue);
    refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x1bb\r\n\r\n", Error::InvalidHeaderValue);
    // HTAB and obs-text are field content.
    accepted(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\tb\xffc\r\n\r\n", b"");
}
