//! A watchdog thread that samples the loop thread's Python stack without the GIL.
//!
//! Why without the GIL: a slice that blocks inside a C call holding the GIL (`sum(range(10**8))`,
//! `re` on a pathological pattern, a C extension) cannot be observed by a Python watchdog — it
//! would only get the GIL after the call returned, and sample the wrong line.
//!
//! How: the watchdog thread sends a signal to the loop thread; the handler, running *on the loop
//! thread*, writes that thread's own stack with `_Py_DumpTraceback` (what `faulthandler` uses in
//! its signal handlers: async-signal-safe, no allocation, no GIL) into a pipe, and the watchdog
//! reads and parses it. The thread being sampled is stopped inside the handler while its frames
//! are read, so they cannot change under the reader — reading them from another thread while
//! the loop thread runs Python code is a data race that crashes (seen in testing), which is why
//! this is done with a signal, as vmprof does.
//!
//! OS/CPython facts relied on:
//! - `_Py_DumpTraceback(fd, tstate)` is exported by libpython (PyAPI_FUNC in
//!   `pycore_traceback.h`, 3.8 to 3.13); it is looked up with `dlsym`, so a Python without it
//!   only loses this sampler (the Python sampler still works).
//! - The signal is the first real-time signal from SIGRTMIN+4 up whose disposition is SIG_DFL;
//!   the handler is installed with SA_RESTART and saves/restores errno. A blocked syscall of
//!   the loop thread that the kernel never restarts (nanosleep, select) sees EINTR, which
//!   CPython retries (PEP 475); we only signal a slice that has already blocked longer than the
//!   arm point, and only while the watch is on.
//! - Samples taken across a slice boundary are dropped by comparing the slice sequence before
//!   and after the dump.
//! - Output format: `  File "path", line N in name` per frame, most recent first.
//!
//! A signal wakes a sleeping loop thread, which then waits for a CPU only to run the handler:
//! on a loaded machine that adds run delay that delays nothing (the sleep goes on). The watch
//! counts run delay as starvation (`ringloop.watch.causes`), so for a thread found sleeping the
//! sampler reads its run delay (`schedstat`) before and after the dump and keeps the
//! difference per slice (`signal_delay`), for the watch to take out.
//!
//! Each sample also says whether the loop thread was on (or waiting for) a CPU, read from
//! `/proc/self/task/<tid>/stat` *before* the signal: the thread's own CPU clock cannot tell a
//! wait from work here, because every signal wakes a waiting thread (EINTR, the GIL taken
//! back, the wait restarted) and charges it the sampling's cost.

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::ffi;

use super::slice::SliceClock;
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
    dump_fn().is_some() && sample_signal().is_some()
}

/// One frame: (filename, line, function), as `_Py_DumpTraceback` printed it.
pub type Frame = (String, u32, String);
/// A stack sample: when it was taken (ns), its frames (outermost first), and whether the thread
/// was running or runnable then (`None`: its state could not be read).
pub type Sample = (u64, Vec<Frame>, Option<bool>);

const MAX_SAMPLES_PER_SLICE: usize = 256;

#[derive(Default)]
struct Store {
    current: Option<(u64, Vec<Sample>)>,
    last: Option<(u64, Vec<Sample>)>,
    /// (slice, ns of run delay the signals caused) for the latest two slices signalled.
    delays: [(u64, u64); 2],
}

impl Store {
    fn add_delay(&mut self, seq: u64, ns: u64) {
        if self.delays[0].0 == seq {
            self.delays[0].1 += ns;
        } else {
            self.delays = [(seq, ns), self.delays[0]];
        }
    }

    fn delay(&self, seq: u64) -> u64 {
        self.delays.iter().find(|d| d.0 == seq && seq != 0).map_or(0, |d| d.1)
    }

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

/// The loop thread, published by `run_forever` while it runs: its `PyThreadState` (null when
/// not running) and its pthread id (the signal's target).
#[derive(Default)]
pub struct LoopThread {
    pub tstate: AtomicPtr<ffi::PyThreadState>,
    pub pthread: AtomicU64,
    /// The kernel's id of the thread (for its `/proc` state).
    pub tid: AtomicI32,
}

pub type ThreadStateCell = Arc<LoopThread>;

/// What the signal handler dumps: one request at a time, process-wide.
static REQ_FD: AtomicI32 = AtomicI32::new(-1);
static REQ_TSTATE: AtomicPtr<ffi::PyThreadState> = AtomicPtr::new(std::ptr::null_mut());
static REQ_LOCK: Mutex<()> = Mutex::new(());
const END_MARK: &[u8] = b"\n<ringloop-end>\n";

extern "C" fn on_sample_signal(_sig: c_int) {
    // SAFETY: async-signal-safe work only: atomics, errno save/restore, write(2) and
    // _Py_DumpTraceback (designed for signal handlers). We run on the loop thread itself.
    unsafe {
        let saved = *libc::__errno_location();
        let fd = REQ_FD.load(Ordering::Acquire);
        let ts = REQ_TSTATE.load(Ordering::Acquire);
        if fd >= 0 {
            if let (false, Some(f)) = (ts.is_null(), dump_fn()) {
                f(fd, ts);
            }
            libc::write(fd, END_MARK.as_ptr().cast(), END_MARK.len());
        }
        *libc::__errno_location() = saved;
    }
}

/// The signal used to sample, installed once; `None` if every candidate is taken.
fn sample_signal() -> Option<c_int> {
    static SIG: OnceLock<Option<c_int>> = OnceLock::new();
    *SIG.get_or_init(|| {
        let (lo, hi) = (libc::SIGRTMIN() + 4, libc::SIGRTMAX());
        (lo..=hi).find(|&sig| {
            // SAFETY: zeroed sigaction structs are valid; querying and setting a real-time
            // signal's disposition has no other precondition.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                    return false;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_sample_signal as extern "C" fn(c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0
            }
        })
    })
}

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

/// Have the loop thread dump its own stack (see the module docs) and return the text.
fn dump(sig: c_int, rd: RawFd, wr: RawFd, thread: &LoopThread) -> Option<String> {
    let _one_at_a_time = REQ_LOCK.lock().ok()?;
    let ts = thread.tstate.load(Ordering::Acquire);
    let pt = thread.pthread.load(Ordering::Acquire);
    if ts.is_null() || pt == 0 {
        return None;
    }
    REQ_TSTATE.store(ts, Ordering::Release);
    REQ_FD.store(wr, Ordering::Release);
    // SAFETY: `pt` is the pthread id of the loop thread, published while it is inside
    // run_forever (and a slice is running, checked by the caller), so the thread is alive.
    let sent = unsafe { libc::pthread_kill(pt as libc::pthread_t, sig) } == 0;
    let mut out = Vec::new();
    if sent {
        let deadline = monotonic_ns() + 200_000_000;
        let mut buf = [0u8; 8192];
        while !out.ends_with(END_MARK) && monotonic_ns() < deadline {
            let mut pfd = libc::pollfd { fd: rd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 50) } <= 0 {
                continue;
            }
            while let Ok(n) = syscall!(read(rd, buf.as_mut_ptr().cast(), buf.len())) {
                if n <= 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n as usize]);
            }
        }
    }
    REQ_FD.store(-1, Ordering::Release);
    REQ_TSTATE.store(std::ptr::null_mut(), Ordering::Release);
    // A handler that ran late (after the deadline) may still write: drain before the next use.
    let mut buf = [0u8; 8192];
    while let Ok(n) = syscall!(read(rd, buf.as_mut_ptr().cast(), buf.len())) {
        if n <= 0 {
            break;
        }
    }
    if !out.ends_with(END_MARK) {
        return None;
    }
    Some(String::from_utf8_lossy(&out[..out.len() - END_MARK.len()]).into_owned())
}

/// Whether thread `tid` of this process is running or runnable (state `R` in its `stat`).
fn running(tid: i32) -> Option<bool> {
    if tid <= 0 {
        return None;
    }
    let stat = std::fs::read(format!("/proc/self/task/{tid}/stat")).ok()?;
    state_is_running(&stat)
}

/// Time thread `tid` of this process has spent on a CPU plus waiting for one, in ns; `None`
/// where the kernel does not keep `schedstat`. Read natively so that a watch reading it on the
/// loop thread raises no audit event (an `open` would look like the slice's own I/O).
///
/// The time on a CPU is the thread's CPU clock, not `schedstat`'s first field: the kernel
/// updates that sum only when the thread is descheduled or a tick lands on its CPU, and a
/// thread read from another one while it ran a 300 ms C call was seen 70 ms behind.
#[pyo3::pyfunction]
pub fn thread_busy_ns(tid: i32) -> Option<u64> {
    thread_schedstat(tid).map(|(cpu, delay)| cpu + delay)
}

/// `(ns on a CPU, ns runnable waiting for one)` of thread `tid` of this process (its CPU clock
/// and `schedstat`'s run delay), `None` where the kernel does not keep `schedstat`.
///
/// Read with the GIL held, unlike Python's `os.read`: a watchdog that reads another thread's
/// `schedstat` in Python gives the GIL up in the read, then waits for it as long as that
/// thread's C call lasts (a 800 ms collection), and stamps the reading with a time taken after
/// the wait: a run delay read at the collection's start then stood for its end, and the
/// collection's own wait for a CPU was counted again as starvation after it.
#[pyo3::pyfunction]
pub fn thread_schedstat(tid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    let stale_cpu = fields.next()??;
    let delay = fields.next()??;
    Some((thread_cpu_ns(tid).unwrap_or(stale_cpu), delay))
}

/// The calling thread's `(monotonic ns, CPU-clock ns, run-delay ns)` for a slice that ended at
/// `end_ns` (read by the dispatcher on the loop thread right as the slice ends, so that no
/// reporting work of the watch's lies between the slice and its readings). The CPU clock is
/// read first, next to `end_ns`; the run delay after it (a `/proc` read): a wait for a CPU
/// inside that read (one timeslice at most, a few microseconds' chance) may add to it.
pub fn slice_end_readings(end_ns: u64) -> Option<(u64, u64, u64)> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let cpu = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let delay = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some((end_ns, cpu, delay))
}

/// Thread `tid`'s CPU clock, in ns: `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, the clock id
/// `pthread_getcpuclockid` returns, built from the kernel's thread id.
fn thread_cpu_ns(tid: i32) -> Option<u64> {
    if tid <= 0 {
        return None;
    }
    let clock = ((!tid) << 3) | 6;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; an unknown
    // clock id is reported as an error, not undefined behaviour.
    if unsafe { libc::clock_gettime(clock as libc::clockid_t, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Thread `tid` is blocked in a system call other than futex(2) (a sleep, a poll, a read): it
/// does not want the GIL now, and a signal makes it take the GIL back (EINTR, PEP 475's retry)
/// before it blocks again. A futex wait may be the GIL's; "running" or -1: on a CPU. The
/// sampler's check, and the Python watchdog's (`os_readings.blocked_elsewhere`): one reading
/// of `/proc/self/task/TID/syscall` for both, with the platform's own futex number.
#[pyo3::pyfunction]
#[pyo3(name = "thread_asleep_elsewhere")]
pub fn asleep_elsewhere(tid: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return false;
    };
    match text.split_ascii_whitespace().next().and_then(|f| f.parse::<i64>().ok()) {
        Some(nr) => nr >= 0 && nr != libc::SYS_futex,
        None => false,
    }
}

/// The latest signal sent to each loop thread (kernel id) found asleep elsewhere: (tid, ns).
static WOKEN_ASLEEP: Mutex<Vec<(i32, u64)>> = Mutex::new(Vec::new());

fn note_woken_asleep(tid: i32, ns: u64) {
    if let Ok(mut v) = WOKEN_ASLEEP.lock() {
        match v.iter().position(|e| e.0 == tid) {
            Some(i) => v[i].1 = ns,
            None if v.len() < 64 => v.push((tid, ns)),
            None => v[0] = (tid, ns),
        }
    }
}

/// Whether the sampler signalled loop thread `tid` at or after `since_ns` (monotonic) while it
/// was asleep elsewhere. Such a signal wakes it into taking the GIL back: if another thread
/// holds the GIL then (the Python watchdog, waiting for a CPU itself), the loop thread waits
/// for it, a wait the sampler made and that does not lengthen the sleep (its deadline stands).
/// The watch leaves the watchdog's stalls of that wake out of the machine's share
/// (`ringloop.watch.causes.watch_stalls`).
#[pyo3::pyfunction]
pub fn woken_asleep_since(tid: i32, since_ns: u64) -> bool {
    WOKEN_ASLEEP.lock().map(|v| v.iter().any(|e| e.0 == tid && e.1 >= since_ns)).unwrap_or(false)
}

/// Thread `tid`'s cumulative run delay (ns runnable but waiting for a CPU), from `schedstat`.
fn run_delay(tid: i32) -> Option<u64> {
    if tid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The state field of a `/proc/.../stat` line: the first one after the `(comm)`, which itself
/// may hold spaces and parentheses, hence the last `)`.
fn state_is_running(stat: &[u8]) -> Option<bool> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).map(|&state| state == b'R')
}

fn run(sh: Arc<Shared>, sig: c_int) {
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
        let tid = sh.tstate.tid.load(Ordering::Acquire);
        let running = running(tid);
        let delay_before = if running == Some(false) { run_delay(tid) } else { None };
        if running == Some(false) && asleep_elsewhere(tid) {
            note_woken_asleep(tid, monotonic_ns());
        }
        let text = dump(sig, rd, wr, &sh.tstate);
        if let Some(d0) = delay_before {
            let added = run_delay(tid).map_or(0, |d1| d1.saturating_sub(d0));
            if let (true, Ok(mut st)) = (added > 0, sh.store.lock()) {
                st.add_delay(seq, added);
            }
        }
        let Some(text) = text else { continue };
        // A sample that straddles the end of the slice describes the next one: drop it.
        if sh.slice.seq.load(Ordering::Acquire) != seq || sh.slice.start_ns.load(Ordering::Acquire) != start {
            continue;
        }
        let frames = parse_dump(&text);
        if !frames.is_empty() {
            if let Ok(mut st) = sh.store.lock() {
                st.push(seq, (now, frames, running));
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
        dump_fn()?;
        let sig = sample_signal()?;
        let shared = Arc::new(Shared {
            slice,
            tstate,
            arm_ns,
            interval: Duration::from_nanos(interval_ns.max(100_000)),
            stop: AtomicBool::new(false),
            store: Mutex::new(Store::default()),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new().name("ringloop-watchdog".into()).spawn(move || run(sh, sig)).ok()?;
        Some(Sampler { shared, thread: Some(thread) })
    }

    pub fn samples(&self, seq: u64) -> Vec<Sample> {
        self.shared.store.lock().map(|s| s.get(seq)).unwrap_or_default()
    }

    /// Run delay (ns) the sampling signals caused the loop thread during slice `seq`.
    pub fn signal_delay(&self, seq: u64) -> u64 {
        self.shared.store.lock().map(|s| s.delay(seq)).unwrap_or(0)
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
        s.push(1, (10, vec![], None));
        s.push(1, (11, vec![], None));
        s.push(2, (20, vec![], None));
        assert_eq!(s.get(1).len(), 2);
        assert_eq!(s.get(2).len(), 1);
        s.push(3, (30, vec![], None));
        assert!(s.get(1).is_empty(), "only the last finished slice is kept");
    }

    #[test]
    fn busy_time_of_this_thread_grows_while_it_works() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let Some(before) = thread_busy_ns(me) else { return }; // no schedstat: nothing to test
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(20) {}
        assert!(thread_busy_ns(me).unwrap() >= before + 10_000_000);
    }

    #[test]
    fn busy_time_of_a_running_thread_read_from_another_is_current() {
        // The spinner never blocks, so `schedstat`'s sum would lag behind it by whatever the
        // kernel has not yet folded in; the reading must count every ns the spinner has seen.
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let spinner = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::gettid() };
            let mut told = false;
            while !stop2.load(Ordering::Relaxed) {
                let own = thread_cpu_ns(me).unwrap();
                if !told && own >= 100_000_000 {
                    tx.send((me, own)).unwrap();
                    told = true;
                }
            }
        });
        let (tid, own) = rx.recv().unwrap();
        let busy = thread_busy_ns(tid);
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        if let Some(busy) = busy {
            assert!(busy >= own, "busy {busy} ns < the {own} ns the spinner had already seen");
        }
    }

    #[test]
    fn signal_delay_is_kept_for_the_latest_two_slices() {
        let mut s = Store::default();
        s.add_delay(5, 10);
        s.add_delay(5, 7);
        s.add_delay(6, 1);
        assert_eq!((s.delay(5), s.delay(6)), (17, 1));
        s.add_delay(7, 2);
        assert_eq!(s.delay(5), 0, "only the latest two slices");
    }

    #[test]
    fn reads_the_state_after_the_command_name() {
        assert_eq!(state_is_running(b"12 (python3) R 1 12 12 0"), Some(true));
        assert_eq!(state_is_running(b"12 (a) b (c)) S 1 12 12 0"), Some(false));
        assert_eq!(state_is_running(b"12 (python3"), None);
    }

    #[test]
    fn a_sleeping_thread_is_not_running_and_this_one_is() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        assert_eq!(running(me), Some(true));
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::gettid() }).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(running(tid), Some(false));
        sleeper.join().unwrap();
    }
}
