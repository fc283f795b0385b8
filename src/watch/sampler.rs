//! A watchdog thread that samples the loop thread's Python stack without the GIL.
//!
//! Why without the GIL: a slice that blocks inside a C call holding the GIL (`sum(range(10**8))`,
//! `re` on a pathological pattern, a C extension) cannot be observed by a Python watchdog — it
//! would only get the GIL after the call returned, and sample the wrong line. CPython's own
//! `faulthandler` solves the same problem (dumping a hung process) with `_Py_DumpTraceback`,
//! which walks a thread's frames without the GIL and writes them, async-signal-safely, to a file
//! descriptor. We call it on the loop thread's `PyThreadState` into a pipe and parse the text.
//!
//! OS/CPython facts relied on:
//! - `_Py_DumpTraceback(fd, tstate)` is exported by libpython (PyAPI_FUNC in
//!   `pycore_traceback.h`, 3.8 to 3.13); it is looked up with `dlsym` so a Python without it
//!   only loses this sampler (the Python sampler still works).
//! - It reads frames that the loop thread may be changing at that moment: like faulthandler,
//!   the result is best effort. We only sample after a slice has run longer than the arm point
//!   (the thread is then usually stuck), and samples taken across a slice boundary are dropped
//!   by comparing the slice sequence number before and after the dump.
//! - Output format: `  File "path", line N in name` per frame, most recent first.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::ffi;

use crate::loop_::core::SliceClock;
use crate::reactor::sys::{monotonic_ns, syscall};

type DumpFn = unsafe extern "C" fn(c_int, *mut ffi::PyThreadState);

fn dump_fn() -> Option<DumpFn> {
    static F: OnceLock<Option<DumpFn>> = OnceLock::new();
    *F.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_Py_DumpTraceback".as_ptr()) };
        if p.is_null() {
            None
        } else {
            // SAFETY: the symbol has this signature in every CPython that exports it.
            Some(unsafe { std::mem::transmute::<*mut c_void, DumpFn>(p) })
        }
    })
}

pub fn available() -> bool {
    dump_fn().is_some()
}

/// One frame: (filename, line, function), as `_Py_DumpTraceback` printed it.
pub type Frame = (String, u32, String);
/// A stack sample: when it was taken (ns) and its frames, outermost first.
pub type Sample = (u64, Vec<Frame>);

const MAX_SAMPLES_PER_SLICE: usize = 256;

#[derive(Default)]
struct Store {
    current: Option<(u64, Vec<Sample>)>,
    last: Option<(u64, Vec<Sample>)>,
}

impl Store {
    fn push(&mut self, seq: u64, s: Sample) {
        match &mut self.current {
            Some((cur, v)) if *cur == seq => {
                if v.len() < MAX_SAMPLES_PER_SLICE {
                    v.push(s);
                }
            }
            _ => {
                self.last = self.current.take();
                self.current = Some((seq, vec![s]));
            }
        }
    }

    fn get(&self, seq: u64) -> Vec<Sample> {
        for (s, v) in [&self.current, &self.last].into_iter().flatten() {
            if *s == seq {
                return v.clone();
            }
        }
        Vec::new()
    }
}

/// The loop thread's `PyThreadState`, published by `run_forever` (null when not running).
pub type ThreadStateCell = Arc<AtomicPtr<ffi::PyThreadState>>;

struct Shared {
    slice: Arc<SliceClock>,
    tstate: ThreadStateCell,
    arm_ns: u64,
    interval: Duration,
    stop: AtomicBool,
    store: Mutex<Store>,
}

pub struct Sampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

pub fn parse_dump(text: &str) -> Vec<Frame> {
    let mut frames: Vec<Frame> = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("File \"")?;
            let (file, rest) = rest.split_once("\", line ")?;
            let (line, name) = rest.split_once(" in ")?;
            Some((file.to_owned(), line.trim().parse().unwrap_or(0), name.trim_end().to_owned()))
        })
        .collect();
    frames.reverse();
    frames
}

fn dump(f: DumpFn, rd: RawFd, wr: RawFd, tstate: *mut ffi::PyThreadState) -> String {
    // SAFETY: `wr` is our pipe; `tstate` belongs to a thread that is inside run_forever (see
    // the module docs for why reading its frames concurrently is accepted, as in faulthandler).
    unsafe { f(wr, tstate) };
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = syscall!(read(rd, buf.as_mut_ptr().cast(), buf.len())) {
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn run(sh: Arc<Shared>, f: DumpFn) {
    let mut fds = [0; 2];
    if syscall!(pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC)).is_err() {
        return;
    }
    let (rd, wr) = (fds[0], fds[1]);
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(sh.interval);
        let start = sh.slice.start_ns.load(Ordering::Acquire);
        if start == 0 {
            continue;
        }
        let seq = sh.slice.seq.load(Ordering::Acquire);
        let now = monotonic_ns();
        if now.saturating_sub(start) < sh.arm_ns {
            continue;
        }
        let ts = sh.tstate.load(Ordering::Acquire);
        if ts.is_null() {
            continue;
        }
        let text = dump(f, rd, wr, ts);
        // A sample that straddles the end of the slice describes the next one: drop it.
        if sh.slice.seq.load(Ordering::Acquire) != seq || sh.slice.start_ns.load(Ordering::Acquire) != start {
            continue;
        }
        let frames = parse_dump(&text);
        if !frames.is_empty() {
            if let Ok(mut st) = sh.store.lock() {
                st.push(seq, (now, frames));
            }
        }
    }
    let _ = syscall!(close(rd));
    let _ = syscall!(close(wr));
}

impl Sampler {
    /// Start sampling slices older than `arm_ns`, every `interval_ns`. `None` when this Python
    /// does not export `_Py_DumpTraceback`.
    pub fn start(slice: Arc<SliceClock>, tstate: ThreadStateCell, arm_ns: u64, interval_ns: u64) -> Option<Sampler> {
        let f = dump_fn()?;
        let shared = Arc::new(Shared {
            slice,
            tstate,
            arm_ns,
            interval: Duration::from_nanos(interval_ns.max(100_000)),
            stop: AtomicBool::new(false),
            store: Mutex::new(Store::default()),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new().name("ringloop-watchdog".into()).spawn(move || run(sh, f)).ok()?;
        Some(Sampler { shared, thread: Some(thread) })
    }

    pub fn samples(&self, seq: u64) -> Vec<Sample> {
        self.shared.store.lock().map(|s| s.get(seq)).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faulthandler_format_outermost_first() {
        let text = "Stack (most recent call first):\n  File \"/app/db.py\", line 42 in query\n  File \"/app/main.py\", line 7 in handler\n  File \"<string>\", line 1 in <module>\n";
        let f = parse_dump(text);
        assert_eq!(f.len(), 3);
        assert_eq!(f[0], ("<string>".into(), 1, "<module>".into()));
        assert_eq!(f[2], ("/app/db.py".into(), 42, "query".into()));
    }

    #[test]
    fn store_keeps_current_and_last_slice() {
        let mut s = Store::default();
        s.push(1, (10, vec![]));
        s.push(1, (11, vec![]));
        s.push(2, (20, vec![]));
        assert_eq!(s.get(1).len(), 2);
        assert_eq!(s.get(2).len(), 1);
        s.push(3, (30, vec![]));
        assert!(s.get(1).is_empty(), "only the last finished slice is kept");
    }
}
