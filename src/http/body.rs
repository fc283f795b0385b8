//! A synchronous native handler's request body, gathered whole before the handler is called.
//!
//! When the request says its length (and it is not huge), the bytes go straight into the
//! `bytes` object the handler will get: one copy out of the protocol's buffer, no growing
//! buffer reallocated (and copied) as 64 uploads interleave, no final copy. Otherwise they
//! gather in a `Vec` that becomes one `bytes` at the end.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A declared length up to this is allocated at once: the pages of a large allocation are
/// only backed as they are written, so a client that declares 16 MiB and sends nothing costs
/// address space, not memory. Past it the buffer grows with what arrives.
const SIZED_MAX: u64 = 16 << 20;

pub(crate) enum Collected {
    /// The handler's `bytes`, `filled` of its `len` bytes written so far. Nobody else holds
    /// a reference to it until `finish`.
    Sized { obj: Py<PyBytes>, len: usize, filled: usize },
    Growing(Vec<u8>),
}

impl Collected {
    /// Room for a body of `declared` bytes (`None`: chunked, unknown).
    pub(crate) fn new(py: Python<'_>, declared: Option<u64>) -> PyResult<Collected> {
        match declared {
            Some(n) if n <= SIZED_MAX => {
                let len = n as usize;
                // SAFETY: a NULL source asks CPython for an uninitialised bytes object of `len`
                // bytes; it is filled (`push`) before any Python code can see it (`finish`).
                let raw = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), len as ffi::Py_ssize_t) };
                // SAFETY: `raw` is a new reference or NULL with an exception set.
                let obj = unsafe { Bound::from_owned_ptr_or_err(py, raw)? }.cast_into::<PyBytes>()?.unbind();
                Ok(Collected::Sized { obj, len, filled: 0 })
            }
            Some(n) => Ok(Collected::Growing(Vec::with_capacity(SIZED_MAX.min(n) as usize))),
            None => Ok(Collected::Growing(Vec::new())),
        }
    }

    /// Append bytes that arrived.
    pub(crate) fn push(&mut self, py: Python<'_>, data: &[u8]) {
        match self {
            Collected::Sized { obj, len, filled } if *filled + data.len() <= *len => {
                // SAFETY: the object is ours alone (see the variant) and `filled + data.len()`
                // is within its `len` bytes.
                unsafe {
                    let at = ffi::PyBytes_AsString(obj.as_ptr()).cast::<u8>().add(*filled);
                    std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len());
                }
                *filled += data.len();
            }
            Collected::Sized { obj, filled, .. } => {
                // More than declared: h1's framing never lets this happen; keep every byte.
                let mut v = obj.bind(py).as_bytes()[..*filled].to_vec();
                v.extend_from_slice(data);
                *self = Collected::Growing(v);
            }
            Collected::Growing(v) => v.extend_from_slice(data),
        }
    }

    /// The whole body, as the handler gets it.
    pub(crate) fn finish(self, py: Python<'_>) -> Py<PyBytes> {
        match self {
            Collected::Sized { obj, len, filled } if filled == len => obj,
            // Fewer bytes than declared (h1 would have refused the message): what came.
            Collected::Sized { obj, filled, .. } => PyBytes::new(py, &obj.bind(py).as_bytes()[..filled]).unbind(),
            Collected::Growing(v) => PyBytes::new(py, &v).unbind(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_and_growing_bodies_come_out_whole() {
        Python::initialize();
        Python::attach(|py| {
            let mut c = Collected::new(py, Some(6)).unwrap();
            c.push(py, b"abc");
            c.push(py, b"def");
            assert_eq!(c.finish(py).bind(py).as_bytes(), b"abcdef");

            let mut c = Collected::new(py, None).unwrap();
            c.push(py, b"ab");
            c.push(py, b"c");
            assert_eq!(c.finish(py).bind(py).as_bytes(), b"abc");

            let mut c = Collected::new(py, Some(2)).unwrap();
            c.push(py, b"abc");
            assert_eq!(c.finish(py).bind(py).as_bytes(), b"abc", "never loses a byte");

            let mut c = Collected::new(py, Some(4)).unwrap();
            c.push(py, b"ab");
            assert_eq!(c.finish(py).bind(py).as_bytes(), b"ab");

            assert!(matches!(Collected::new(py, Some(SIZED_MAX + 1)).unwrap(), Collected::Growing(_)));
        });
    }
}
