//! A C-level audit hook for the watch.
//!
//! Two delivery modes, per slice: *eager* (strict mode: every I/O event goes to the Python sink
//! as it happens, because even a short slice must be flagged) and *buffered* (the default:
//! the hook keeps a reference to the event's arguments and the calling frame in a thread-local
//! buffer, and Python classifies them only if the slice turns out to be slow; events of short
//! slices are dropped unread, which keeps an audited `open()` under a microsecond).
//!
//! Python audit hooks cannot be removed, and a Python-level one (`sys.addaudithook`) runs Python
//! code for every audited operation in the process — including `object.__getattr__` on frames
//! and `sys._getframe`, which debuggers and loggers trigger constantly. This hook is C: outside a
//! watched slice it returns after one thread-local read; inside one it compares the event name
//! against a short list of I/O prefixes in C and only then calls the Python sink
//! (`sink(event: str, args: tuple)`), guarded against re-entry (the sink's own audited calls).

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

use super::slice::in_slice;

type AuditHook = unsafe extern "C" fn(*const c_char, *mut ffi::PyObject, *mut c_void) -> c_int;

extern "C" {
    // Public since 3.8 (Include/cpython/sysmodule.h); not declared by pyo3-ffi.
    fn PySys_AddAuditHook(hook: AuditHook, user_data: *mut c_void) -> c_int;
}

/// Audit events that mean blocking I/O or process work when raised on the loop thread.
/// Prefixes, matched in C; everything else (imports, exec, `sys._getframe`, attribute hooks)
/// never reaches Python.
const IO_PREFIXES: &[&[u8]] = &[
    b"open",
    b"os.",
    b"socket.",
    b"subprocess.",
    b"sqlite3.",
    b"time.sleep",
    b"shutil.",
    b"glob.",
    b"urllib.",
    b"http.client.",
    b"ftplib.",
    b"smtplib.",
    b"poplib.",
    b"imaplib.",
    b"nntplib.",
    b"telnetlib.",
    b"fcntl.",
    b"select.",
    b"mmap.",
    b"ctypes.dlopen",
    b"webbrowser.open",
    b"pty.",
    b"resource.",
];

static SINK: OnceLock<Py<PyAny>> = OnceLock::new();

/// One audit event kept for later: name, arguments, the Python frame that raised it, time.
pub struct Recorded {
    /// The event name, inline: every name this hook keeps is short, and an allocation per
    /// audited call is what this buffer exists to avoid.
    name: [u8; 48],
    name_len: u8,
    pub args: Py<PyAny>,
    pub frame: Option<Py<PyAny>>,
    pub t_ns: u64,
}

/// At most this many events are kept per slice (the report shows the first ones).
const MAX_PER_SLICE: usize = 64;

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static EAGER: Cell<bool> = const { Cell::new(false) };
    static BUF: RefCell<Vec<Recorded>> = const { RefCell::new(Vec::new()) };
}

/// Choose eager or buffered delivery for the slice about to run on this thread.
#[inline]
pub fn set_eager(v: bool) {
    EAGER.with(|c| c.set(v));
}

impl Recorded {
    pub fn event(&self) -> String {
        String::from_utf8_lossy(&self.name[..self.name_len as usize]).into_owned()
    }
}

/// End of a slice on this thread: hand over its buffered events if `keep` (a slow slice), else
/// drop them in place, keeping the buffer's capacity for the next slice.
#[inline]
pub fn end_slice(keep: bool) -> Vec<Recorded> {
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.is_empty() {
            Vec::new()
        } else if keep {
            std::mem::take(&mut *b)
        } else {
            b.clear();
            Vec::new()
        }
    })
}

fn is_io_event(name: &[u8]) -> bool {
    IO_PREFIXES.iter().any(|p| name.starts_with(p))
}

unsafe extern "C" fn hook(event: *const c_char, args: *mut ffi::PyObject, _data: *mut c_void) -> c_int {
    if !in_slice() || IN_HOOK.with(|c| c.get()) {
        return 0;
    }
    // SAFETY: CPython passes a NUL-terminated event name valid for the call.
    let name = unsafe { CStr::from_ptr(event) }.to_bytes();
    if !is_io_event(name) {
        return 0;
    }
    // SAFETY: audit hooks are called with the GIL held.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `args` is a borrowed tuple valid for the duration of the hook.
    let args = unsafe { Bound::from_borrowed_ptr(py, args) };
    if !EAGER.with(|c| c.get()) {
        let full = BUF.with(|b| b.borrow().len() >= MAX_PER_SLICE);
        if !full && name.len() <= 48 {
            // SAFETY: with the GIL held, PyEval_GetFrame returns a borrowed reference to the
            // innermost Python frame of this thread (the caller of the audited operation), or
            // NULL when no Python code is running.
            let frame = unsafe { ffi::PyEval_GetFrame() };
            let frame = (!frame.is_null())
                // SAFETY: non-null borrowed frame object.
                .then(|| unsafe { Bound::from_borrowed_ptr(py, frame.cast()) }.unbind());
            let mut buf = [0u8; 48];
            buf[..name.len()].copy_from_slice(name);
            let rec = Recorded {
                name: buf,
                name_len: name.len() as u8,
                args: args.clone().unbind(),
                frame,
                t_ns: crate::reactor::sys::monotonic_ns(),
            };
            BUF.with(|b| b.borrow_mut().push(rec));
        }
        return 0;
    }
    let Some(sink) = SINK.get() else { return 0 };
    IN_HOOK.with(|c| c.set(true));
    let r = std::str::from_utf8(name).map(|n| sink.call1(py, (n, args)));
    if let Ok(Err(e)) = r {
        // Never fail the user's operation because the watch broke.
        e.write_unraisable(py, Some(sink.bind(py)));
    }
    IN_HOOK.with(|c| c.set(false));
    0
}

/// Install the process-wide hook with `sink` (once; a second call with another sink is an
/// error because audit hooks cannot be removed or replaced).
#[pyfunction]
pub fn audit_hook_install(py: Python<'_>, sink: Py<PyAny>) -> PyResult<bool> {
    if let Some(existing) = SINK.get() {
        return if existing.is(&sink) {
            Ok(false)
        } else {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "ringloop: the native audit hook is already installed with another sink (audit hooks cannot be removed)",
            ))
        };
    }
    let _ = SINK.set(sink.clone_ref(py));
    // SAFETY: `hook` is a static function; CPython keeps the pointer for the process lifetime.
    if unsafe { PySys_AddAuditHook(hook, std::ptr::null_mut()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(true)
}

/// One buffered event as Python sees it: `(event, args, frame, t_ns)`.
pub type AuditTuple = (String, Py<PyAny>, Option<Py<PyAny>>, u64);

/// The events buffered during the slow slice that just ended on this thread:
/// `[(event, args, frame, t_ns)]` (taken: a second call returns `[]`).
#[pyfunction]
pub fn audit_slice_events() -> Vec<AuditTuple> {
    end_slice(true).into_iter().map(|r| (r.event(), r.args, r.frame, r.t_ns)).collect()
}

#[cfg(test)]
mod tests {
    use super::is_io_event;

    #[test]
    fn only_io_events_pass() {
        for e in ["open", "os.listdir", "socket.connect", "subprocess.Popen", "sqlite3.connect", "time.sleep"] {
            assert!(is_io_event(e.as_bytes()), "{e}");
        }
        for e in ["import", "exec", "compile", "sys._getframe", "object.__getattr__", "builtins.id"] {
            assert!(!is_io_event(e.as_bytes()), "{e}");
        }
    }
}
