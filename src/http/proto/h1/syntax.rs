//! Byte classes and list helpers of RFC 9110 §5.6, shared by the reader and the writer.
//!
//! Tables, not `match` chains: a 256-entry lookup is one load per byte and the same cost for
//! every class, which keeps the per-byte loops of the chunk decoder and the writer's checks
//! branch-light.

const fn table(tchar: bool) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if tchar {
            // tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        } else {
            // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
            b == b'\t' || b == b' ' || b == 0x21 || (b >= 0x23 && b <= 0x5b) || (b >= 0x5d && b <= 0x7e) || b >= 0x80
        };
        i += 1;
    }
    t
}

static TCHAR: [bool; 256] = table(true);
static QDTEXT: [bool; 256] = table(false);

#[inline]
pub fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

#[inline]
pub fn is_qdtext(b: u8) -> bool {
    QDTEXT[b as usize]
}

/// quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
#[inline]
pub fn is_quoted_pair_char(b: u8) -> bool {
    b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80
}

/// token = 1*tchar
#[inline]
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

#[inline]
pub fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `s` without leading and trailing SP/HTAB.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// The elements of a `#rule` list (RFC 9110 §5.6.1), OWS trimmed, empty ones included: the
/// caller decides whether an empty element is harmless (Connection) or suspect (Content-Length).
pub fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows)
}

/// 1*DIGIT as u64; `None` for anything else (sign, space, hex, empty) or on overflow.
pub fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// reg-name's bytes (RFC 3986 §3.2.2): unreserved, pct-encoded's `%`, sub-delims.
static REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            );
        i += 1;
    }
    t
};

/// The field value of a host: `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2), checked
/// by byte classes only: enough to refuse what no URI can hold (spaces, `/`, `@`, quotes,
/// non-ASCII) without resolving anything.
pub fn is_host(v: &[u8]) -> bool {
    let reg_name_char = |b: &u8| REG_NAME[*b as usize];
    let (host, port) = if let Some(rest) = v.strip_prefix(b"[") {
        // IP-literal: IPv6address or IPvFuture between brackets.
        let Some(close) = rest.iter().position(|&b| b == b']') else { return false };
        let inner = &rest[..close];
        if inner.is_empty() || !inner.iter().all(|b| reg_name_char(b) || *b == b':') {
            return false;
        }
        match &rest[close + 1..] {
            [] => return true,
            [b':', port @ ..] => (&b""[..], port),
            _ => return false,
        }
    } else {
        match v.iter().position(|&b| b == b':') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &b""[..]),
        }
    };
    host.iter().all(reg_name_char) && port.iter().all(u8::is_ascii_digit)
}

/// Append `n` in decimal, without going through `fmt`.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Append `n` in lowercase hex (chunk sizes).
pub fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; 16];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = DIGITS[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_and_lists() {
        assert!(is_token(b"GET"));
        assert!(is_token(b"x-custom_1.~"));
        assert!(!is_token(b""));
        assert!(!is_token(b"a b"));
        assert!(!is_token(b"a:b"));
        assert_eq!(list(b" close ,\tupgrade,,").collect::<Vec<_>>(), vec![&b"close"[..], b"upgrade", b"", b""]);
        assert_eq!(trim_ows(b" \t "), b"");
    }

    #[test]
    fn decimals() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"007"), Some(7));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b"18446744073709551616", b"+1", b"-1", b"0x10", b"1 2", b" 1", b"1a"] {
            assert_eq!(parse_decimal(bad), None, "{:?}", bad);
        }
        let mut v = vec![];
        push_decimal(&mut v, 0);
        v.push(b' ');
        push_decimal(&mut v, u64::MAX);
        v.push(b' ');
        push_hex(&mut v, 0);
        v.push(b' ');
        push_hex(&mut v, 0x1f2e);
        assert_eq!(v, b"0 18446744073709551615 0 1f2e");
    }

    #[test]
    fn hosts() {
        for ok in [
            &b""[..],
            b"example.com",
            b"example.com:8080",
            b"127.0.0.1:80",
            b"[::1]",
            b"[::1]:443",
            b"a-b_c~d%20",
            b"host:",
        ] {
            assert!(is_host(ok), "{:?}", String::from_utf8_lossy(ok));
        }
        for bad in [&b"a b"[..], b"a/b", b"user@host", b"[::1", b"[::1]x", b"host:8a", b"h\xc3\xa9", b"a:1:2"] {
            assert!(!is_host(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
