//! Response fields, as the caller gives them (`(name, value)` byte pairs, the same the h1
//! writer takes), into h2's `HeaderMap`.
//!
//! Names are lowercased (`HeaderName::from_bytes` does it; HTTP/2 sends no other case, RFC 9113
//! §8.2.1) and must be tokens; values must hold no CR, LF, NUL or other control byte but HTAB.
//! The connection-specific fields (RFC 9113 §8.2.2: `connection`, `keep-alive`,
//! `proxy-connection`, `transfer-encoding`, `upgrade`, and `te` in a response) are dropped
//! without a word: applications written for HTTP/1.1 set them, they mean nothing on a stream,
//! and h2 would refuse the whole head for them.

use http::header::{HeaderName, HeaderValue, CONNECTION, TE, TRANSFER_ENCODING, UPGRADE};
use http::HeaderMap;

use super::error::SendError;

pub(super) fn header_map<'f>(fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) -> Result<HeaderMap, SendError> {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        let name = HeaderName::from_bytes(name).map_err(|_| SendError::InvalidFieldName)?;
        let value = HeaderValue::from_bytes(value).map_err(|_| SendError::InvalidFieldValue)?;
        if is_connection_specific(&name) {
            continue;
        }
        map.append(name, value);
    }
    Ok(map)
}

fn is_connection_specific(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name == TE
        || name == "keep-alive"
        || name == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lowercased_hop_by_hop_dropped_bad_bytes_refused() {
        let map = header_map([
            (&b"Content-Type"[..], &b"text/plain"[..]),
            (b"Connection", b"keep-alive"),
            (b"transfer-encoding", b"chunked"),
            (b"Keep-Alive", b"timeout=5"),
            (b"te", b"trailers"),
            (b"x-a", b"1"),
            (b"x-a", b"2"),
        ])
        .unwrap();
        let got: Vec<_> = map.iter().map(|(n, v)| (n.as_str(), v.to_str().unwrap())).collect();
        assert_eq!(got, [("content-type", "text/plain"), ("x-a", "1"), ("x-a", "2")]);
        assert_eq!(header_map([(&b"bad name"[..], &b"v"[..])]), Err(SendError::InvalidFieldName));
        assert_eq!(header_map([(&b":status"[..], &b"200"[..])]), Err(SendError::InvalidFieldName));
        assert_eq!(header_map([(&b"x"[..], &b"a\r\nb: c"[..])]), Err(SendError::InvalidFieldValue));
        assert_eq!(header_map([(&b"x"[..], &b"a\0"[..])]), Err(SendError::InvalidFieldValue));
    }
}
