//! `ringloop._core`: the native module. This file only wires the modules together.

pub mod errors;
pub mod eventloop;
pub mod http;
pub mod py;
pub mod reactor;
pub mod tls;
pub mod transport;
pub mod watch;

#[cfg(test)]
mod module_graph;

use pyo3::prelude::*;

/// `(available, reason)`: whether io_uring can be used here, and if not, why.
#[pyfunction]
fn io_uring_available() -> (bool, String) {
    reactor::io_uring_available()
}

/// Whether this Python lets the watch sample the loop thread's stack without the GIL.
#[pyfunction]
fn native_sampler_available() -> bool {
    watch::sampler::available()
}

// gil_used = true: the loop's state lives in `GilCell`s, which are sound only because the GIL
// serialises every access (eventloop/gil_cell.rs). Since PyO3 0.28 a module declares
// free-threading support unless it says otherwise; this keeps a free-threaded interpreter
// (3.14t) turning the GIL back on when it imports us. docs/free-threading.md is the plan for
// lifting it.
#[pymodule(gil_used = true)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<eventloop::core::LoopCore>()?;
    m.add_class::<eventloop::handle::Handle>()?;
    m.add_class::<eventloop::handle::TimerHandle>()?;
    m.add_class::<transport::stream::StreamIO>()?;
    m.add_class::<transport::stream::TlsConfig>()?;
    m.add_class::<transport::stream::NativeTransport>()?;
    m.add_class::<transport::stream::NativeAccept>()?;
    m.add_class::<transport::registry::TransportMap>()?;
    m.add_class::<transport::datagram::DatagramIO>()?;
    m.add_class::<http::server::ServerState>()?;
    m.add_class::<http::conn::HttpConn>()?;
    m.add_class::<watch::asyncio_slices::AsyncioSlices>()?;
    m.add_class::<http::asgi::Receive>()?;
    m.add_class::<http::asgi::Send>()?;
    m.add_class::<http::stream::message::Done>()?;
    m.add_class::<http::host::Host>()?;
    m.add_class::<http::native::Request>()?;
    m.add_class::<http::native::Response>()?;
    m.add_class::<http::wsgi_pool::WsgiPool>()?;
    m.add_class::<http::wsgi_start::StartResponse>()?;
    m.add_class::<http::websocket::native::WebSocket>()?;
    m.add_function(wrap_pyfunction!(http::websocket::native::broadcast, m)?)?;
    m.add("ClientDisconnected", m.py().get_type::<http::stream::message::ClientDisconnected>())?;
    m.add_function(wrap_pyfunction!(io_uring_available, m)?)?;
    m.add_function(wrap_pyfunction!(watch::audit::audit_hook_install, m)?)?;
    m.add_function(wrap_pyfunction!(watch::sampler::thread_busy_ns, m)?)?;
    m.add_function(wrap_pyfunction!(watch::sampler::thread_schedstat, m)?)?;
    m.add_function(wrap_pyfunction!(watch::sampler::woken_asleep_since, m)?)?;
    m.add_function(wrap_pyfunction!(watch::sampler::asleep_elsewhere, m)?)?;
    watch::audit_fast::install(m)?;
    m.add_function(wrap_pyfunction!(watch::audit::audit_slice_events, m)?)?;
    m.add_function(wrap_pyfunction!(native_sampler_available, m)?)?;
    eventloop::fastcall::install(m.py())?;
    Ok(())
}
