//! The connection's host task: one asyncio `Task` per connection runs its requests'
//! application coroutines, instead of one `Task` per request.
//!
//! Why: a `Task` costs about a third of an ASGI "hello world" request here (its constructor
//! schedules a step and registers the task in asyncio's `WeakSet`, its deallocation unregisters
//! it; ~8,000 instructions of ~30,000). What an application can see of its task stays true:
//! `asyncio.current_task()` is a real `Task` (the connection's) while its code runs, so
//! `task.cancel()`, `asyncio.timeout`, anyio's cancel scopes and task groups work; each
//! request runs in a fresh copy of the context, as a new task's would, so a `ContextVar` set by
//! one request is never seen by the next on the same connection.
//!
//! How: `Host` is the coroutine the connection's task runs. Its first step of a request is
//! taken directly, outside the task's machinery (`run_first_step`): the task is *entered*
//! (as `asyncio.tasks._enter_task` does: `enter`) while it waits, idle, on its `park` future, and the coroutine
//! is sent `None` in the request's context. Most requests end there. One that awaits a future
//! hands it over: `park` is resolved, the task wakes, and its step (`__next__`) yields that
//! future as if the task itself had awaited it; from then on the task's own machinery drives
//! the coroutine (wake-ups, cancellation) until it returns, and the task parks again.
//!
//! Where it differs from a task per request, and what is done about it:
//! - a request whose coroutine is still running when the next one starts (background work
//!   after its response) leaves the next one to a `Task` of its own (`busy`);
//! - `task.cancel()` from a first step cancels `park`: the task wakes with `CancelledError`,
//!   thrown here into the coroutine at the future it was suspended on (that future is
//!   cancelled too, as a task cancels the future it waits on), or, if the coroutine already
//!   returned, absorbed (`uncancel`) like the end of a cancelled task;
//! - a cancel the coroutine did not absorb is reset at its end (`uncancel` until
//!   `cancelling()` is 0), so it does not leak into the next request's `asyncio.timeout`;
//! - `asyncio.all_tasks()` lists one task per connection, named after the request it runs or
//!   ran last (`GET /path`, what `python -m asyncio ps`/`pstree` show on 3.14; `ringloop.http`
//!   before the first). The name is set when a request starts, unless the method and path equal
//!   the last one's (compared, not rebuilt): a connection that repeats a request pays a compare.

use pyo3::exceptions::asyncio::CancelledError as PyCancelledError;
use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyDict, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::asgi::Send;
use crate::eventloop::gil_cell::GilCell;

/// An application coroutine running for a request.
struct Running {
    /// What is stepped: the coroutine itself, or the iterator of another awaitable's `__await__`.
    coro: Py<PyAny>,
    /// The request's context (a copy of the one its request started in).
    ctx: Py<PyAny>,
    /// Told how the coroutine ended (ASGI); `None`: the coroutine reports itself.
    send: Option<Py<Send>>,
}

#[derive(Default)]
struct HostState {
    loop_: Option<Py<PyAny>>,
    /// The connection's task, made on its first request.
    task: Option<Py<PyAny>>,
    /// The future the task waits on while no coroutine needs it.
    park: Option<Py<PyAny>>,
    running: Option<Running>,
    /// What a first step yielded, for the task to wait on (`Some(None)`: a bare `yield`).
    handoff: Option<Option<Py<PyAny>>>,
    /// The connection is gone: the task ends once idle.
    closing: bool,
    /// The method and path the task is named after (compared by identity).
    named: Option<(Py<PyString>, Py<PyString>)>,
}

/// The request a first step starts: its method and decoded path, to name the task after.
pub(crate) type RequestName<'a, 'py> = Option<(&'a Bound<'py, PyString>, &'a Bound<'py, PyString>)>;

/// The coroutine of a connection's task (see the module docs).
#[pyclass(module = "ringloop._core", frozen)]
pub struct Host {
    st: GilCell<HostState>,
}

/// How one step of an application coroutine ended.
enum Stepped {
    Yielded(Py<PyAny>),
    Returned(Py<PyAny>),
    Raised(PyErr),
}

fn enter_task(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static F: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    F.import(py, "asyncio.tasks", "_enter_task")
}

fn leave_task(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static F: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    F.import(py, "asyncio.tasks", "_leave_task")
}

/// `asyncio.tasks._current_tasks` (loop → the task running on it) on the versions where it
/// is what `current_task()` reads: 3.11 to 3.13 (checked for each). 3.14 keeps the running
/// task in the thread state instead; there the functions above are called.
fn current_tasks(py: Python<'_>) -> PyResult<Option<&Bound<'_, PyDict>>> {
    static D: PyOnceLock<Option<Py<PyDict>>> = PyOnceLock::new();
    let d = D.get_or_try_init(py, || -> PyResult<_> {
        if py.version_info() >= (3, 14) {
            return Ok(None);
        }
        let d = py.import(intern!(py, "asyncio.tasks"))?.getattr(intern!(py, "_current_tasks"))?;
        Ok(d.cast_into::<PyDict>().ok().map(Bound::unbind))
    })?;
    Ok(d.as_ref().map(|d| d.bind(py)))
}

/// `_enter_task(loop, task)`: `task` is the one running on `loop` (`current_task()`).
///
/// Why not always call `_enter_task` and `_leave_task`: the two calls cost ~830 instructions
/// of an ~18,300-instruction ASGI "hello world" request (callgrind), ~450 more than the two
/// dict operations they make, done here directly on the same dict.
fn enter(py: Python<'_>, loop_: &Bound<'_, PyAny>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let Some(d) = current_tasks(py)? else {
        enter_task(py)?.call1((loop_, task))?;
        return Ok(());
    };
    // SAFETY: `d` is a dict, `loop_` and `task` live objects; the result is borrowed (or NULL
    // with an exception set: the loop's hash failed).
    let current = unsafe { ffi::PyDict_SetDefault(d.as_ptr(), loop_.as_ptr(), task.as_ptr()) };
    if current.is_null() {
        return Err(PyErr::fetch(py));
    }
    if current != task.as_ptr() {
        // Another task runs on the loop: `_enter_task` raises its error.
        enter_task(py)?.call1((loop_, task))?;
    }
    Ok(())
}

/// `_leave_task(loop, task)`.
fn leave(py: Python<'_>, loop_: &Bound<'_, PyAny>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let Some(d) = current_tasks(py)? else {
        leave_task(py)?.call1((loop_, task))?;
        return Ok(());
    };
    // SAFETY: as in `enter`; the item is borrowed, and only compared.
    let current = unsafe { ffi::PyDict_GetItemWithError(d.as_ptr(), loop_.as_ptr()) };
    if current.is_null() {
        if let Some(e) = PyErr::take(py) {
            return Err(e);
        }
    }
    if current != task.as_ptr() {
        // Not the current task (or the lookup failed): `_leave_task` raises its error.
        leave_task(py)?.call1((loop_, task))?;
        return Ok(());
    }
    // SAFETY: as in `enter`; the key is present.
    if unsafe { ffi::PyDict_DelItem(d.as_ptr(), loop_.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}

/// Send `None` into `coro` (or throw `exc`) with `ctx` as the current context.
fn step(
    py: Python<'_>,
    coro: &Bound<'_, PyAny>,
    ctx: &Bound<'_, PyAny>,
    exc: Option<&Bound<'_, PyAny>>,
) -> PyResult<Stepped> {
    // SAFETY: `ctx` is a `contextvars.Context` (made by PyContext_CopyCurrent); entering it
    // fails only if it is already entered, which a request's context never is here (one step
    // at a time per coroutine). It is exited right after the step, whatever the step did.
    if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let stepped = match exc {
        None => {
            let mut out: *mut ffi::PyObject = std::ptr::null_mut();
            // SAFETY: `coro` is a live object and `out` receives a new reference (or NULL with
            // an exception set, for PYGEN_ERROR).
            let r = unsafe { ffi::PyIter_Send(coro.as_ptr(), ffi::Py_None(), &mut out) };
            match r {
                ffi::PySendResult::PYGEN_ERROR => Stepped::Raised(PyErr::fetch(py)),
                done => {
                    // SAFETY: NEXT and RETURN leave a new reference in `out`.
                    let v = unsafe { Bound::from_owned_ptr(py, out) }.unbind();
                    if matches!(done, ffi::PySendResult::PYGEN_NEXT) {
                        Stepped::Yielded(v)
                    } else {
                        Stepped::Returned(v)
                    }
                }
            }
        }
        Some(e) => match coro.call_method1(intern!(py, "throw"), (e,)) {
            Ok(v) => Stepped::Yielded(v.unbind()),
            Err(err) if err.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => {
                let value = err.value(py).getattr(intern!(py, "value"))?;
                Stepped::Returned(value.unbind())
            }
            Err(err) => Stepped::Raised(err),
        },
    };
    // SAFETY: `ctx` was entered above by this thread.
    if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(stepped)
}

/// The iterator to step for an awaitable: a coroutine itself, else what `__await__` returns.
fn awaitable_iter<'py>(aw: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a type check on a live object.
    if unsafe { ffi::PyCoro_CheckExact(aw.as_ptr()) } != 0 {
        return Ok(aw.clone());
    }
    aw.call_method0(intern!(aw.py(), "__await__"))
}

/// Resolve `park` unless it is done already (cancelled: the task wakes with the cancel).
fn wake(py: Python<'_>, park: &Py<PyAny>) -> PyResult<()> {
    if !park.call_method0(py, intern!(py, "done"))?.is_truthy(py)? {
        park.call_method1(py, intern!(py, "set_result"), (py.None(),))?;
    }
    Ok(())
}

/// The same object, or equal text: a repeated request reuses its strings only sometimes, and
/// comparing (a few dozen instructions) is cheaper than naming the task again (~200).
fn same_str(a: &Bound<'_, PyString>, b: &Bound<'_, PyString>) -> bool {
    // SAFETY: both are live `str` objects; PyUnicode_Compare cannot fail for two strs.
    a.is(b) || unsafe { ffi::PyUnicode_Compare(a.as_ptr(), b.as_ptr()) } == 0
}

fn is_fatal(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py)
}

/// Run `coro` as a task of its own whose first step runs now: a request whose connection's
/// host task is busy (`Host::busy`), one of an HTTP/2 connection's concurrent streams, or a
/// static file's sender. Here, beside the host task, so that every driver starts tasks the
/// same way.
pub(crate) fn spawn_task<'py>(loop_: &Bound<'py, PyAny>, coro: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static EAGER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let py = loop_.py();
    // A name given saves the task formatting its own ("Task-N", a printf per request).
    let kw = [(intern!(py, "loop"), loop_.clone()), (intern!(py, "name"), intern!(py, "ringloop.http").clone().into_any())];
    if *EAGER.get_or_init(|| py.version_info() >= (3, 12)) {
        // The task runs its first step in its constructor (3.12's eager start).
        let kw = kw.into_py_dict(py)?;
        kw.set_item(intern!(py, "eager_start"), true)?;
        return crate::py::asyncio_task(py)?.call((coro,), Some(&kw));
    }
    let task = crate::py::asyncio_task(py)?.call((coro,), Some(&kw.into_py_dict(py)?))?;
    crate::eventloop::core::LoopCore::run_task_step_now(loop_.cast::<crate::eventloop::core::LoopCore>()?, &task)?;
    Ok(task)
}

impl Host {
    pub(crate) fn new() -> Host {
        Host {
            st: GilCell::new(HostState::default()),
        }
    }

    /// Whether a coroutine still runs here (a new request then gets a task of its own).
    pub(crate) fn busy(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.running.is_some())
    }

    /// Start `aw` for a request: its first step now, in a fresh copy of the current context,
    /// as the connection's task (see the module docs). Called from a loop callback, never from
    /// inside a task's step. `Err` only for what must stop the loop (KeyboardInterrupt,
    /// SystemExit) or when the task cannot be entered.
    pub(crate) fn run_first_step(
        slf: &Bound<'_, Self>,
        loop_: &Bound<'_, PyAny>,
        aw: &Bound<'_, PyAny>,
        send: Option<Py<Send>>,
        request: RequestName<'_, '_>,
    ) -> PyResult<()> {
        let py = slf.py();
        let task = Self::task(slf, loop_)?;
        if let Some((method, path)) = request {
            Self::name(slf, &task, method, path)?;
        }
        let coro = match awaitable_iter(aw) {
            Ok(c) => c,
            Err(e) => return Self::report(py, send.as_ref(), Stepped::Raised(e)),
        };
        // SAFETY: copying the current context has no preconditions; a new reference or NULL.
        let ctx = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyContext_CopyCurrent())? };
        enter(py, loop_, &task)?;
        let stepped = step(py, &coro, &ctx, None);
        leave(py, loop_, &task)?;
        match stepped? {
            Stepped::Yielded(v) => {
                let park = {
                    let mut st = slf.get().st.borrow_mut(py)?;
                    st.running = Some(Running {
                        coro: coro.unbind(),
                        ctx: ctx.unbind(),
                        send,
                    });
                    st.handoff = Some(Some(v));
                    st.park.take()
                };
                // Wake the task to wait on it (a task not started yet finds it at its first step;
                // one cancelled meanwhile is woken already, with the cancel).
                if let Some(p) = park {
                    wake(py, &p)?;
                }
                Ok(())
            }
            ended => Self::report(py, send.as_ref(), ended),
        }
    }

    /// The connection's task, if it has been made (the watch asks which connection a blocked
    /// task belongs to).
    pub(crate) fn current_task(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.st.borrow(py)?.task.as_ref().map(|t| t.clone_ref(py)))
    }

    /// The connection is gone: end the task once no coroutine needs it.
    pub(crate) fn connection_closed(&self, py: Python<'_>) -> PyResult<()> {
        let park = {
            let mut st = self.st.borrow_mut(py)?;
            st.closing = true;
            if st.running.is_some() {
                None
            } else {
                st.park.take()
            }
        };
        if let Some(p) = park {
            wake(py, &p)?;
        }
        Ok(())
    }

    /// The connection's task, made on first use.
    fn task<'py>(slf: &Bound<'py, Self>, loop_: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        if let Some(t) = slf.get().st.borrow(py)?.task.as_ref() {
            return Ok(t.bind(py).clone());
        }
        let kw = [
            (intern!(py, "loop"), loop_.clone()),
            (
                intern!(py, "name"),
                intern!(py, "ringloop.http").clone().into_any(),
            ),
        ]
        .into_py_dict(py)?;
        let task = crate::py::asyncio_task(py)?.call((slf,), Some(&kw))?;
        let mut st = slf.get().st.borrow_mut(py)?;
        st.task = Some(task.clone().unbind());
        st.loop_ = Some(loop_.clone().unbind());
        Ok(task)
    }

    /// Name the task `METHOD path` unless it already is (see the module docs).
    fn name(slf: &Bound<'_, Self>, task: &Bound<'_, PyAny>, method: &Bound<'_, PyString>, path: &Bound<'_, PyString>) -> PyResult<()> {
        let py = slf.py();
        if let Some((m, p)) = slf.get().st.borrow(py)?.named.as_ref() {
            if same_str(m.bind(py), method) && same_str(p.bind(py), path) {
                return Ok(());
            }
        }
        let name = PyString::new(py, &format!("{method} {path}"));
        task.call_method1(intern!(py, "set_name"), (name,))?;
        slf.get().st.borrow_mut(py)?.named = Some((method.clone().unbind(), path.clone().unbind()));
        Ok(())
    }

    /// Tell the request how its coroutine ended (ASGI's `send`); `Err` for what must stop the loop.
    fn report(py: Python<'_>, send: Option<&Py<Send>>, ended: Stepped) -> PyResult<()> {
        match ended {
            Stepped::Yielded(_) => unreachable!("only an ending is reported"),
            Stepped::Returned(v) => match send {
                Some(s) => s.get().returned(py, v.bind(py)),
                None => Ok(()),
            },
            Stepped::Raised(e) => {
                if let Some(s) = send {
                    s.get().failed(py, &e.clone_ref(py).into_value(py).into_bound(py))?;
                }
                if is_fatal(py, &e) {
                    return Err(e);
                }
                Ok(())
            }
        }
    }

    /// The task's step: drive the running coroutine, or park (or end, once closing).
    /// `throw`: an exception the task throws in (a cancellation).
    fn advance(
        slf: &Bound<'_, Self>,
        mut throw: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        loop {
            let (handoff, running) = {
                let mut st = this.st.borrow_mut(py)?;
                let handoff = st.handoff.take();
                let running = st
                    .running
                    .as_ref()
                    .map(|r| (r.coro.clone_ref(py), r.ctx.clone_ref(py)));
                (handoff, running)
            };
            if let Some(yielded) = handoff {
                match throw.take() {
                    // The task never waited on it: hand it over now.
                    None => return Ok(Some(yielded.unwrap_or_else(|| py.None()))),
                    // Cancelled before it was handed over: cancel what the coroutine waits on,
                    // as a task does, and throw the cancellation in (below).
                    Some(exc) => {
                        if let Some(fut) = yielded {
                            let _ = fut.call_method0(py, intern!(py, "cancel"));
                        }
                        throw = Some(exc);
                    }
                }
            }
            let Some((coro, ctx)) = running else {
                if let Some(exc) = throw.take() {
                    // Cancelled while idle (a request cancelled its task and returned, or the
                    // task itself is cancelled, as at the loop's end): the task ends so, and the
                    // next request gets a new one.
                    Self::forget_task(slf)?;
                    return Err(PyErr::from_value(exc));
                }
                if this.st.borrow(py)?.closing {
                    Self::forget_task(slf)?;
                    return Ok(None);
                }
                let loop_ = this.st.borrow(py)?.loop_.as_ref().map(|l| l.clone_ref(py));
                let Some(loop_) = loop_ else { return Ok(None) };
                let park = loop_.call_method0(py, intern!(py, "create_future"))?;
                // What `await park` would set: a task refuses a future yielded without it.
                park.setattr(py, intern!(py, "_asyncio_future_blocking"), true)?;
                this.st.borrow_mut(py)?.park = Some(park.clone_ref(py));
                return Ok(Some(park));
            };
            let stepped = step(py, coro.bind(py), ctx.bind(py), throw.take().as_ref())?;
            if let Stepped::Yielded(v) = stepped {
                return Ok(Some(v));
            }
            let send = this.st.borrow_mut(py)?.running.take().and_then(|r| r.send);
            let cancel = match &stepped {
                Stepped::Raised(e) if e.is_instance_of::<PyCancelledError>(py) => {
                    Some(e.clone_ref(py))
                }
                _ => None,
            };
            Self::report(py, send.as_ref(), stepped)?;
            match cancel {
                // Its task would end cancelled: this one does, and the next request gets a new one.
                Some(e) => {
                    Self::forget_task(slf)?;
                    return Err(e);
                }
                None => Self::reset_cancels(slf)?,
            }
        }
    }

    /// The task is ending: let go of it (it holds us) and of its loop.
    fn forget_task(slf: &Bound<'_, Self>) -> PyResult<()> {
        let mut st = slf.get().st.borrow_mut(slf.py())?;
        st.task = None;
        st.park = None;
        Ok(())
    }

    /// Undo cancels of the connection's task that a request caught without `uncancel` (see
    /// the module docs).
    fn reset_cancels(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let task = slf
            .get()
            .st
            .borrow(py)?
            .task
            .as_ref()
            .map(|t| t.clone_ref(py));
        let Some(task) = task else { return Ok(()) };
        let task = task.bind(py);
        while task
            .call_method0(intern!(py, "cancelling"))?
            .extract::<i64>()?
            > 0
        {
            task.call_method0(intern!(py, "uncancel"))?;
        }
        Ok(())
    }
}

#[pymethods]
impl Host {
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        Self::advance(slf, None)
    }

    fn send(slf: &Bound<'_, Self>, _value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match Self::advance(slf, None)? {
            Some(v) => Ok(v),
            None => Err(pyo3::exceptions::PyStopIteration::new_err(())),
        }
    }

    #[pyo3(signature = (typ, val=None, _tb=None))]
    fn throw(
        slf: &Bound<'_, Self>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        // throw(exc) or the old throw(type[, value]) form.
        let exc = match val {
            Some(v) if !v.is_none() => v.clone(),
            _ if typ.is_instance_of::<pyo3::types::PyType>() => typ.call0()?,
            _ => typ.clone(),
        };
        let _ = py;
        match Self::advance(slf, Some(exc))? {
            Some(v) => Ok(v),
            None => Err(pyo3::exceptions::PyStopIteration::new_err(())),
        }
    }

    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let running = {
            let mut st = slf.get().st.borrow_mut(py)?;
            st.closing = true;
            st.handoff = None;
            st.running.take()
        };
        if let Some(r) = running {
            r.coro.call_method0(py, intern!(py, "close"))?;
        }
        Ok(())
    }

    fn __repr__(&self) -> &'static str {
        "<ringloop connection host>"
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let Some(st) = self.st.try_borrow_unattached() else {
            return Ok(());
        };
        visit.call(&st.loop_)?;
        visit.call(&st.task)?;
        visit.call(&st.park)?;
        if let Some(r) = &st.running {
            visit.call(&r.coro)?;
            visit.call(&r.ctx)?;
            visit.call(&r.send)?;
        }
        if let Some(Some(h)) = &st.handoff {
            visit.call(h)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Some(mut st) = self.st.try_borrow_mut_unattached() {
            *st = HostState::default();
        }
    }
}
