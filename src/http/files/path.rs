//! From a request path to a file name under a mount: the rules that keep every answer inside
//! the mounted root, with no I/O (the fuzz target `files_path` runs them on any bytes).
//!
//! The rules, in order (each refusal is a 404 to the client; `Reject` names the rule):
//! - the route must match whole segments: `/static` serves `/static/a`, never `/staticx`;
//! - the raw path is split on `/` *before* decoding, so `%2F` inside a segment is a refused
//!   byte, never a separator; an empty segment (`//`, or the trailing `/` of a directory) is
//!   refused (no index files: a directory is never served);
//! - each segment is percent-decoded exactly once: `%252e%252e` becomes the literal name
//!   `%2e%2e`, looked up as such (no second decoding ever turns it into `..`). A `%` not
//!   followed by two hex digits is refused;
//! - a decoded segment that is `.` or `..`, or holds `/`, `\`, or NUL, is refused.
//!
//! What this cannot see — symlinks that lead out of the root — is the opener's job
//! (`fsio::open_beneath`: the kernel's `RESOLVE_BENEATH`).

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Nothing after the route, or a trailing `/`: a directory.
    Directory,
    /// `//` inside the path.
    EmptySegment,
    /// `.` or `..` (raw or percent-encoded).
    DotSegment,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// `/` (as `%2F`), `\` or NUL inside a segment.
    ForbiddenByte,
}

/// The part of `path` after `route` (a normalized route: see `normalize_route`), or `None`
/// if the route does not match whole segments. The result is empty or starts with `/`.
pub fn strip_route<'p>(route: &[u8], path: &'p [u8]) -> Option<&'p [u8]> {
    let rest = path.strip_prefix(route)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

/// A route as given on the command line, in the form `strip_route` takes: a leading `/`, no
/// trailing `/` (so `/` becomes empty and matches every path). `None` if it does not start
/// with `/` or holds a byte a request path cannot (space, `?`, `#`, `%`, controls).
pub fn normalize_route(route: &str) -> Option<Vec<u8>> {
    let b = route.as_bytes();
    if b.first() != Some(&b'/') || b.iter().any(|&c| c <= b' ' || c == 0x7f || matches!(c, b'?' | b'#' | b'%' | b'\\')) {
        return None;
    }
    let mut v = b.to_vec();
    while v.last() == Some(&b'/') {
        v.pop();
    }
    if v.split(|&c| c == b'/').skip(1).any(|s| s.is_empty() || s == b"." || s == b"..") {
        return None;
    }
    Some(v)
}

/// The file name under the root for `rest` (what `strip_route` left): decoded segments joined
/// by `/`, never absolute, never holding `.`/`..` segments, NUL or `\`.
pub fn resolve(rest: &[u8]) -> Result<Vec<u8>, Reject> {
    let Some(rest) = rest.strip_prefix(b"/") else { return Err(Reject::Directory) };
    if rest.is_empty() || rest.last() == Some(&b'/') {
        return Err(Reject::Directory);
    }
    let mut name = Vec::with_capacity(rest.len());
    for raw in rest.split(|&c| c == b'/') {
        if raw.is_empty() {
            return Err(Reject::EmptySegment);
        }
        if !name.is_empty() {
            name.push(b'/');
        }
        let start = name.len();
        decode_into(raw, &mut name)?;
        let seg = &name[start..];
        if seg == b"." || seg == b".." {
            return Err(Reject::DotSegment);
        }
        if seg.iter().any(|&c| c == b'/' || c == b'\\' || c == 0) {
            return Err(Reject::ForbiddenByte);
        }
    }
    Ok(name)
}

/// Percent-decode one segment (once), refusing a malformed escape (the crate keeps those as
/// they are, which would let one name have two spellings).
fn decode_into(raw: &[u8], out: &mut Vec<u8>) -> Result<(), Reject> {
    let mut i = 0;
    while let Some(p) = raw[i..].iter().position(|&c| c == b'%') {
        let at = i + p;
        if !(raw.len() > at + 2 && raw[at + 1].is_ascii_hexdigit() && raw[at + 2].is_ascii_hexdigit()) {
            return Err(Reject::BadEscape);
        }
        i = at + 3;
    }
    out.extend(percent_encoding::percent_decode(raw));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(path: &[u8]) -> Result<Vec<u8>, Reject> {
        let route = normalize_route("/static").unwrap();
        resolve(strip_route(&route, path).expect("route matches"))
    }

    #[test]
    fn routes_match_whole_segments() {
        let route = normalize_route("/static/").unwrap();
        assert_eq!(route, b"/static");
        assert_eq!(strip_route(&route, b"/static/a.css"), Some(&b"/a.css"[..]));
        assert_eq!(strip_route(&route, b"/static"), Some(&b""[..]));
        assert_eq!(strip_route(&route, b"/staticx/a"), None);
        assert_eq!(strip_route(&route, b"/other/static/a"), None);
        let root = normalize_route("/").unwrap();
        assert_eq!(strip_route(&root, b"/a"), Some(&b"/a"[..]));
    }

    #[test]
    fn bad_routes_are_refused() {
        for bad in ["static", "", "/a b", "/a?b", "/a%2e", "/a/../b", "/a//b", "/a\\b"] {
            assert_eq!(normalize_route(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn plain_names_resolve() {
        assert_eq!(r(b"/static/a.css").unwrap(), b"a.css");
        assert_eq!(r(b"/static/js/app.js").unwrap(), b"js/app.js");
        assert_eq!(r(b"/static/with%20space.txt").unwrap(), b"with space.txt");
        assert_eq!(r(b"/static/.hidden").unwrap(), b".hidden");
        assert_eq!(r(b"/static/a..b").unwrap(), b"a..b");
    }

    #[test]
    fn directories_are_refused() {
        assert_eq!(r(b"/static"), Err(Reject::Directory));
        assert_eq!(r(b"/static/"), Err(Reject::Directory));
        assert_eq!(r(b"/static/js/"), Err(Reject::Directory));
    }

    #[test]
    fn traversal_is_refused_raw_and_encoded() {
        assert_eq!(r(b"/static/../secret"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/a/../../secret"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/./a"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/%2e%2e/secret"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/%2E%2E/secret"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/.%2e/secret"), Err(Reject::DotSegment));
        assert_eq!(r(b"/static/..%2fsecret"), Err(Reject::ForbiddenByte));
        assert_eq!(r(b"/static/a%2F..%2F..%2Fsecret"), Err(Reject::ForbiddenByte));
        assert_eq!(r(b"/static/..%5csecret"), Err(Reject::ForbiddenByte));
        assert_eq!(r(b"/static/..\\secret"), Err(Reject::ForbiddenByte));
        assert_eq!(r(b"/static/a%00.txt"), Err(Reject::ForbiddenByte));
        assert_eq!(r(b"/static//etc/passwd"), Err(Reject::EmptySegment));
    }

    #[test]
    fn double_encoding_is_decoded_once() {
        // `%252e` is `%2e` after one decoding: a literal name, not a dot.
        assert_eq!(r(b"/static/%252e%252e/secret").unwrap(), b"%2e%2e/secret");
        assert_eq!(r(b"/static/%252e%252e%252fsecret").unwrap(), b"%2e%2e%2fsecret");
    }

    #[test]
    fn malformed_escapes_are_refused() {
        assert_eq!(r(b"/static/a%"), Err(Reject::BadEscape));
        assert_eq!(r(b"/static/a%2"), Err(Reject::BadEscape));
        assert_eq!(r(b"/static/a%zz"), Err(Reject::BadEscape));
    }

    /// Whatever the input, an accepted name never climbs, never is absolute, never holds NUL.
    #[test]
    fn accepted_names_stay_beneath() {
        let alphabet: &[&[u8]] = &[b"/", b".", b"%2e", b"%2f", b"%5c", b"%00", b"a", b"\\", b"%25", b"%"];
        let mut stack = vec![(Vec::new(), 0)];
        while let Some((p, depth)) = stack.pop() {
            let mut full = b"/static/".to_vec();
            full.extend_from_slice(&p);
            if let Ok(name) = r(&full) {
                assert!(!name.starts_with(b"/") && !name.contains(&0) && !name.contains(&b'\\'));
                assert!(name.split(|&c| c == b'/').all(|s| !s.is_empty() && s != b"." && s != b".."), "{name:?}");
            }
            if depth < 5 {
                for a in alphabet {
                    let mut q = p.clone();
                    q.extend_from_slice(a);
                    stack.push((q, depth + 1));
                }
            }
        }
    }
}
