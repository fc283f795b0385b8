//! The WSGI thread pool, natively: the loop hands requests to worker threads through a queue
//! of its own, and the workers hand finished responses back in batches.
//!
//! Per request, the Python pool this replaces made a `SimpleQueue` entry, a `_Response`
//! object, a bound `start_response`, and scheduled one `call_soon_threadsafe` callback (a
//! handle and a wake-up of the loop) — about 22k instructions of glue around a 6k thread
//! crossing (benchmarks/http_callgrind.py). Here:
//! - `submit` (loop thread) pushes onto a `Mutex<VecDeque>`; no Python object is made for the
//!   queue. It wakes a sleeping worker only when no awake worker can take the job (see "Wake
//!   policy" below);
//! - a worker (`work`, a `threading.Thread`'s target, so the thread is an ordinary Python
//!   thread) waits on the condvar with the GIL released, and takes the next job without
//!   releasing it when one is queued already;
//! - it builds the environ (`wsgi.rs`), calls the application with a native `StartResponse`
//!   (`wsgi_start.rs`), and a response known whole (a list or tuple of `bytes`) is pushed onto
//!   `finished`; only the push that finds `finished` empty schedules `_drain` on the loop, so
//!   under load one wake-up of the loop writes several responses;
//! - anything else (an iterated body, `write()`, `wsgi.file_wrapper`, `wsgi.input` with a
//!   body) is the Python bridge's (`ringloop.server.wsgi`), which talks to the loop with
//!   `call_soon_threadsafe` and `run_coroutine_threadsafe` as before. A response that took
//!   that path reports its failure the same way, so it reaches the loop after its messages.
//!
//! The iterable's `close()` is called however the response ended (PEP 3333); an exact list or
//! tuple has none, so the look-up is skipped for them.
//!
//! Wake policy. Under the GIL a second awake worker can only compete for it: waking a sleeper
//! for every push kept all 32 workers cycling between sleep and the GIL (about 2.4 context
//! switches per request where the Python pool made 0.26). So a worker counts as awake from the
//! moment it is woken (or starts) until it finds the queue empty and waits again, and a push
//! wakes a sleeper only when no awake worker is *available*: none is awake, or every awake one
//! has been inside its current job for `STUCK` or longer (blocked in the application — a
//! sleep, I/O — with the GIL released, or simply slow). A job pushed just before the worker
//! that would take it blocks would still be stranded, so while any worker is awake one sleeper
//! (the watcher) waits with a `STUCK` timeout instead of forever and, finding jobs queued and
//! no awake worker available, takes one. A job therefore waits at most about `2 × STUCK` for
//! a thread while the pool has one asleep.
//!
//! Locks: `jobs` and `finished` are held only for a push or a pop, never while Python code
//! runs or the GIL is awaited, so a thread holding the GIL never waits on a thread that waits
//! for the GIL.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::asgi::{Receive, Send};
use super::native::Request;
use super::wsgi_start::{StartResponse, Whole};
use crate::eventloop::gil_cell::GilCell;

/// A request for the pool.
struct Job {
    app: Py<PyAny>,
    request: Py<Request>,
    receive: Option<Py<Receive>>,
    send: Py<Send>,
}

/// What a worker hands back to the loop.
enum Finished {
    /// A whole response: head and body written in one call (`Send::wsgi_respond`).
    Respond { send: Py<Send>, status: u16, headers: Py<PyAny>, body: Py<PyBytes> },
    /// The application raised before anything was sent (500, logged).
    Failed { send: Py<Send>, exc: Py<PyAny> },
}

/// How long a worker may be inside one job before the pool stops counting on it to take the
/// next (a plaintext request takes a few microseconds; an application that blocks, far more).
const STUCK: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Jobs {
    queue: VecDeque<Job>,
    /// Workers waiting on `job_ready` (the watcher among them).
    sleeping: usize,
    /// Workers not waiting: woken (or just started) and not yet back to wait. A woken worker
    /// is counted by whoever woke it, so that the next push does not wake another.
    awake: usize,
    /// Wake-ups given and not yet taken by a sleeper (each already counted in `awake`).
    wakes: usize,
    /// A sleeper asked to become the watcher and not yet woken.
    watch_wake: bool,
    /// A sleeper waits with a timeout, to catch jobs stranded behind blocked workers.
    watching: bool,
    /// Per worker (`work`'s index): when its current job began; `None` while it has none.
    started: Vec<Option<Instant>>,
    stopping: bool,
}

impl Jobs {
    /// Whether some awake worker will take a queued job soon: one woken and not yet at a job,
    /// between jobs, or inside one for less than `STUCK`.
    fn available(&self, now: Instant) -> bool {
        let stuck = self.started.iter().flatten().filter(|&&t| now.saturating_duration_since(t) >= STUCK).count();
        self.awake > stuck
    }

    /// Whether a sleeper, neither given a wake-up nor asked to watch, is left to wake.
    fn can_wake(&self) -> bool {
        self.sleeping > self.wakes + usize::from(self.watch_wake)
    }
}

/// `loop.call_soon_threadsafe` and this pool's `_drain`, looked up once.
struct Wake {
    call_soon_threadsafe: Py<PyAny>,
    drain: Py<PyAny>,
}

/// A bounded pool of threads that run a WSGI application for the loop's connections.
#[pyclass(module = "ringloop._core", frozen)]
pub struct WsgiPool {
    loop_: Py<PyAny>,
    /// The environ keys every request shares (`wsgi.version`, `wsgi.errors`, …).
    template: Py<PyDict>,
    /// `ringloop.server.wsgi.WSGIBridge`: the streaming paths, `wsgi.input`, logging.
    bridge: Py<PyAny>,
    /// `wsgi.input` of a request without a body (one object serves them all).
    no_body: Py<PyAny>,
    jobs: Mutex<Jobs>,
    job_ready: Condvar,
    finished: Mutex<Vec<Finished>>,
    wake: GilCell<Option<Wake>>,
}

/// A lock whose holder never panics while holding it; recovered if one ever did.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WsgiPool {
    /// The next job for worker `id`, waiting for one with the GIL released; `None` when the
    /// pool stops (jobs queued before `shutdown` are run first). The worker is awake (counted
    /// in `awake`) on entry and on return.
    fn next_job(&self, py: Python<'_>, id: usize) -> Option<Job> {
        {
            let mut st = lock(&self.jobs);
            if let Some(job) = st.queue.pop_front() {
                st.started[id] = Some(Instant::now());
                return Some(job);
            }
            if st.stopping {
                st.started[id] = None;
                return None;
            }
        }
        py.detach(|| {
            let mut st = lock(&self.jobs);
            loop {
                if let Some(job) = st.queue.pop_front() {
                    st.started[id] = Some(Instant::now());
                    return Some(job);
                }
                st.started[id] = None;
                if st.stopping {
                    return None;
                }
                st.awake -= 1;
                st = self.sleep(st);
            }
        })
    }

    /// Wait on `job_ready` until this worker is to be awake again (it is then counted in
    /// `awake`): given a wake-up, the pool stopping, or — as the watcher — jobs queued that no
    /// awake worker is available to take.
    fn sleep<'a>(&self, mut st: MutexGuard<'a, Jobs>) -> MutexGuard<'a, Jobs> {
        loop {
            if st.stopping {
                st.awake += 1;
                return st;
            }
            // While a worker is awake it may block inside the application with jobs queued
            // behind it: one sleeper keeps an eye on the queue.
            let watch = !st.watching && st.awake > 0;
            st.watching |= watch;
            st.sleeping += 1;
            st = if watch {
                self.job_ready.wait_timeout(st, STUCK).unwrap_or_else(|e| e.into_inner()).0
            } else {
                self.job_ready.wait(st).unwrap_or_else(|e| e.into_inner())
            };
            st.sleeping -= 1;
            if watch {
                st.watching = false;
            }
            let leave = if st.wakes > 0 {
                st.wakes -= 1;
                true
            } else if st.watch_wake {
                // Asked to watch: the next round of the loop makes this sleeper the watcher.
                st.watch_wake = false;
                false
            } else if watch && !st.queue.is_empty() && !st.available(Instant::now()) {
                st.awake += 1;
                true
            } else {
                false
            };
            if leave {
                if watch && !st.watch_wake && st.can_wake() {
                    // The jobs still queued (or pushed while no push wakes anyone) need a
                    // watcher after this one.
                    st.watch_wake = true;
                    self.job_ready.notify_one();
                }
                return st;
            }
        }
    }

    /// Hand `f` to the loop; the first of a batch schedules the drain.
    fn finish(slf: &Bound<'_, Self>, f: Finished) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let first = {
            let mut done = lock(&this.finished);
            done.push(f);
            done.len() == 1
        };
        if !first {
            return Ok(());
        }
        let cached = this.wake.borrow(py)?.as_ref().map(|w| (w.call_soon_threadsafe.clone_ref(py), w.drain.clone_ref(py)));
        let (schedule, drain) = match cached {
            Some(pair) => pair,
            None => {
                let schedule = this.loop_.bind(py).getattr(intern!(py, "call_soon_threadsafe"))?.unbind();
                let drain = slf.getattr(intern!(py, "_drain"))?.unbind();
                *this.wake.borrow_mut(py)? = Some(Wake { call_soon_threadsafe: schedule.clone_ref(py), drain: drain.clone_ref(py) });
                (schedule, drain)
            }
        };
        schedule.bind(py).call1((drain,))?;
        Ok(())
    }

    /// One request, on a worker thread. `Err` only for what must stop the worker
    /// (`KeyboardInterrupt`, `SystemExit`, the loop gone).
    fn run(slf: &Bound<'_, Self>, job: Job) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Job { app, request, receive, send } = job;
        let start = Bound::new(py, StartResponse::new(this.bridge.clone_ref(py), send.clone_ref(py)))?;
        let mut result: Option<Bound<'_, PyAny>> = None;
        let mut streamed = false;
        let outcome = (|| -> PyResult<()> {
            let req = request.get();
            let input = if req.has_body { this.bridge.bind(py).call_method1(intern!(py, "_input"), (receive,))? } else { this.no_body.bind(py).clone() };
            let env = req.wsgi_environ(py, this.template.bind(py), &input)?;
            let r = result.insert(app.bind(py).call1((env, &start))?);
            if let Some(Whole { status, headers, body }) = start.get().whole(py, r)? {
                return Self::finish(slf, Finished::Respond { send: send.clone_ref(py), status, headers, body: body.unbind() });
            }
            streamed = true;
            this.bridge.bind(py).call_method1(intern!(py, "_finish"), (&start, &*r, send.bind(py)))?;
            Ok(())
        })();
        let mut fatal = None;
        if let Err(e) = outcome {
            // `into_value` attaches the traceback (`value` alone may not, on 3.11).
            let exc = e.clone_ref(py).into_value(py).into_bound(py);
            let reported = if streamed {
                // After the streamed messages, in the order they were scheduled.
                this.loop_.bind(py).call_method1(intern!(py, "call_soon_threadsafe"), (send.bind(py).getattr(intern!(py, "_failed"))?, &exc)).map(drop)
            } else {
                Self::finish(slf, Finished::Failed { send: send.clone_ref(py), exc: exc.clone().into_any().unbind() })
            };
            if e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py) {
                fatal = Some(e);
            } else if let Err(gone) = reported {
                fatal = Some(gone);
            }
        }
        if let Some(r) = result.filter(|r| !r.is_exact_instance_of::<PyList>() && !r.is_exact_instance_of::<PyTuple>()) {
            this.close(&r)?;
        }
        fatal.map_or(Ok(()), Err)
    }

    /// PEP 3333: the iterable's `close()`, if it has one; its error is logged.
    fn close(&self, result: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = result.py();
        let close = match result.getattr_opt(intern!(py, "close")) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => return self.close_failed(py, e),
        };
        match close.call0() {
            Ok(_) => Ok(()),
            Err(e) => self.close_failed(py, e),
        }
    }

    fn close_failed(&self, py: Python<'_>, e: PyErr) -> PyResult<()> {
        if e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py) {
            return Err(e);
        }
        self.bridge.bind(py).call_method1(intern!(py, "_close_failed"), (e.into_value(py),))?;
        Ok(())
    }
}

#[pymethods]
impl WsgiPool {
    #[new]
    fn py_new(loop_: Py<PyAny>, template: Py<PyDict>, bridge: Py<PyAny>, no_body: Py<PyAny>) -> WsgiPool {
        WsgiPool {
            loop_,
            template,
            bridge,
            no_body,
            jobs: Mutex::new(Jobs::default()),
            job_ready: Condvar::new(),
            finished: Mutex::new(Vec::new()),
            wake: GilCell::new(None),
        }
    }

    /// A request for the pool (the connection calls it on the loop thread).
    fn submit(&self, app: Py<PyAny>, request: Py<Request>, receive: Option<Py<Receive>>, send: Py<Send>) {
        let notify = {
            let mut st = lock(&self.jobs);
            st.queue.push_back(Job { app, request, receive, send });
            if !st.can_wake() {
                false
            } else if st.awake == 0 || !st.available(Instant::now()) {
                // Nobody to take it: wake a worker, counted awake now so that the pushes
                // before it runs do not wake more.
                st.awake += 1;
                st.wakes += 1;
                true
            } else if !st.watching && !st.watch_wake {
                // An awake worker takes it, unless it blocks first: have a sleeper watch.
                st.watch_wake = true;
                true
            } else {
                false
            }
        };
        if notify {
            self.job_ready.notify_one();
        }
    }

    /// A worker thread's body: run jobs until `shutdown`.
    fn work(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let id = {
            let mut st = lock(&this.jobs);
            st.started.push(None);
            st.awake += 1;
            st.started.len() - 1
        };
        let outcome = (|| {
            while let Some(job) = this.next_job(slf.py(), id) {
                Self::run(slf, job)?;
            }
            Ok(())
        })();
        // A worker that leaves (the pool stopping, or a fatal error) is no longer awake: the
        // pushes after it must not count on it.
        let notify = {
            let mut st = lock(&this.jobs);
            st.started[id] = None;
            st.awake -= 1;
            // Jobs it leaves queued behind it need a worker still.
            let wake = !st.queue.is_empty() && !st.stopping && st.can_wake() && !st.available(Instant::now());
            if wake {
                st.awake += 1;
                st.wakes += 1;
            }
            wake
        };
        if notify {
            this.job_ready.notify_one();
        }
        outcome
    }

    /// Stop the workers once the jobs already queued are done.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        lock(&self.jobs).stopping = true;
        self.job_ready.notify_all();
        // The cached bound `_drain` refers to the pool: let the pair go.
        let wake = self.wake.borrow_mut(py)?.take();
        drop(wake);
        Ok(())
    }

    /// On the loop thread: write every response the workers finished since the last drain.
    fn _drain(&self, py: Python<'_>) -> PyResult<()> {
        let batch = std::mem::take(&mut *lock(&self.finished));
        let mut first_error = None;
        for f in batch {
            let r = match f {
                Finished::Respond { send, status, headers, body } => send.get().wsgi_respond(py, status, headers.bind(py), body.bind(py)),
                Finished::Failed { send, exc } => send.get().failed(py, exc.bind(py)),
            };
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.loop_)?;
        visit.call(&self.template)?;
        visit.call(&self.bridge)?;
        visit.call(&self.no_body)?;
        if let Some(w) = self.wake.try_borrow_unattached() {
            if let Some(w) = w.as_ref() {
                visit.call(&w.call_soon_threadsafe)?;
                visit.call(&w.drain)?;
            }
        }
        Ok(())
    }
}
