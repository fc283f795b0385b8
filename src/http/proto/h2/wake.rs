//! The wakers `Conn` polls h2 with, and the record of which ones fired.
//!
//! h2 is written for a runtime: each handle (a stream's body, its send side) keeps the waker
//! of the last poll that returned `Pending`, and wakes it when the frame it waits for arrives
//! (DATA, trailers, a WINDOW_UPDATE that grants capacity, RST_STREAM, the connection's end);
//! the connection's own waker is woken when a handle queues something for it to write. There
//! is no runtime here, so the wakers only write down what moved: each stream's waker appends
//! its id to a shared list (once until `Conn` polls the stream again), the connection's sets a
//! flag. `Conn::poll` then polls exactly those, instead of every stream each time.
//!
//! The core runs on one thread, but `Waker` must be `Send + Sync`: hence `std::task::Wake`
//! over `Arc`, an atomic flag, and a mutex that is never contended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Wake, Waker};

/// What fired since `Conn` last looked.
#[derive(Debug, Default)]
pub(super) struct Woken {
    streams: Mutex<Vec<u32>>,
    conn: AtomicBool,
}

impl Woken {
    pub(super) fn new() -> Arc<Woken> {
        Arc::new(Woken::default())
    }

    /// The connection's waker.
    pub(super) fn conn_waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::new(ConnWake(self.clone())))
    }

    /// A new stream's waker (one allocation per stream).
    pub(super) fn stream_waker(self: &Arc<Self>, id: u32) -> StreamWaker {
        let wake = Arc::new(StreamWake { id, queued: AtomicBool::new(false), woken: self.clone() });
        StreamWaker { waker: Waker::from(wake.clone()), wake }
    }

    /// Whether the connection's waker fired since the last call.
    pub(super) fn take_conn(&self) -> bool {
        self.conn.swap(false, Ordering::AcqRel)
    }

    /// Move the ids of the streams woken since the last call into `into` (emptied first).
    /// Their wakers are re-armed by `rearm` just before each is polled.
    pub(super) fn take_streams(&self, into: &mut Vec<u32>) {
        into.clear();
        std::mem::swap(&mut *self.streams.lock().unwrap_or_else(PoisonError::into_inner), into);
    }

    pub(super) fn any(&self) -> bool {
        self.conn.load(Ordering::Acquire) || !self.streams.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }
}

/// A stream's waker, and the means to re-arm it.
pub(super) struct StreamWaker {
    wake: Arc<StreamWake>,
    waker: Waker,
}

impl StreamWaker {
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Let the waker record its stream again the next time it fires. Called just before the
    /// stream is polled, so that a wake during or after the poll is not lost.
    pub(super) fn rearm(&self) {
        self.wake.queued.store(false, Ordering::Release);
    }

    /// Queue the stream for the next poll ourselves (it was just opened, or the caller changed
    /// what it waits for).
    pub(super) fn wake(&self) {
        self.wake.wake_by_ref();
    }
}

struct ConnWake(Arc<Woken>);

impl Wake for ConnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.conn.store(true, Ordering::Release);
    }
}

struct StreamWake {
    id: u32,
    /// The id is in the list and not yet taken: further wakes add nothing.
    queued: AtomicBool,
    woken: Arc<Woken>,
}

impl Wake for StreamWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.woken.streams.lock().unwrap_or_else(PoisonError::into_inner).push(self.id);
        }
    }
}
