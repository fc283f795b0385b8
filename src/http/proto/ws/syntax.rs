//! The few HTTP grammar pieces the handshake needs (RFC 9110 §5.6). `h1` has its own; this
//! folder names no other, so the fuzz crate can include it alone.

/// `tchar` (RFC 9110 §5.6.2): the bytes of a token.
pub const fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
        | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}

/// Without leading and trailing SP and HTAB (OWS).
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether any comma-separated element of any of `values` is `want` (ASCII case-insensitive).
pub fn list_contains<'a>(values: impl IntoIterator<Item = &'a [u8]>, want: &[u8]) -> bool {
    values.into_iter().any(|v| v.split(|&b| b == b',').any(|item| trim(item).eq_ignore_ascii_case(want)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(trim(b" \t a b\t "), b"a b");
        assert_eq!(trim(b"  "), b"");
        assert!(list_contains([&b"keep-alive, Upgrade"[..]], b"upgrade"));
        assert!(list_contains([&b"x"[..], b"h2c ,WebSocket"], b"websocket"));
        assert!(!list_contains([&b"websockets"[..]], b"websocket"));
    }
}
