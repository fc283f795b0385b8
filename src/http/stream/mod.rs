//! The per-request stream: what an interface (ASGI, WSGI, native) holds of one request while
//! it runs. Being built up out of `cycle.rs` (issue 20); so far it holds the in-flight guard.
//!
//! `InFlight`: the worker's count of requests in their application (`--limit-concurrency`
//! answers 503 at the limit, a graceful shutdown waits for it to reach zero) goes up when a
//! request's cycle is made and down when the cycle is dropped — however it ends: response
//! complete, WebSocket session over or handed to the connection, connection lost, or the
//! connection collected with a request still open. One place, where there were four decrements
//! (each a path to forget) and one increment before a fallible step that could leak a count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One request counted in flight until this is dropped.
pub(crate) struct InFlight(Arc<AtomicU64>);

impl InFlight {
    pub(crate) fn enter(count: &Arc<AtomicU64>) -> InFlight {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_while_held() {
        let count = Arc::new(AtomicU64::new(0));
        let a = InFlight::enter(&count);
        let b = InFlight::enter(&count);
        assert_eq!(count.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
