//! Arbitrary request paths through the static-file resolver (`src/http/files/path.rs` and the
//! range/conditional/coding parsers of `decide.rs`): never a panic, and a name the resolver
//! accepts never leaves the root — not absolute, no empty, `.` or `..` segment, no NUL or
//! backslash — and is no longer than the decoded path could be.
//!
//! Input layout: the whole input is the path after the route (as `strip_route` returns it);
//! it is also fed to the `Range` and `Accept-Encoding` parsers, which must not panic and must
//! return a range inside the representation.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/http/files/path.rs"]
mod path;
#[allow(dead_code)]
#[path = "../../src/http/files/decide.rs"]
mod decide;

fuzz_target!(|data: &[u8]| {
    if let Ok(name) = path::resolve(data) {
        assert!(!name.is_empty() && name[0] != b'/', "absolute or empty: {name:?}");
        assert!(!name.contains(&0) && !name.contains(&b'\\'), "NUL or backslash: {name:?}");
        assert!(name.len() <= data.len(), "decoding grew the name");
        for seg in name.split(|&c| c == b'/') {
            assert!(!seg.is_empty() && seg != b"." && seg != b"..", "bad segment in {name:?}");
        }
    }
    let len = data.first().map_or(0, |&b| u64::from(b) * 37);
    if let decide::RangeSpec::One { start, end } = decide::parse_range(data, len) {
        assert!(start <= end && end < len, "range {start}-{end} outside {len}");
    }
    let _ = decide::codings(Some(data));
});
