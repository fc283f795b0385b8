//! The reactor's own tests: the contract of `mod.rs` on both backends, and the io_uring
//! operations (multishot recv, recvmsg, byte limits, cancels) against the real kernel.

use super::*;

#[test]
fn choice_parses_known_names() {
    assert_eq!(Choice::parse("auto"), Some(Choice::Auto));
    assert_eq!(Choice::parse(""), Some(Choice::Auto));
    assert_eq!(Choice::parse("IO_URING"), Some(Choice::IoUring));
    assert_eq!(Choice::parse("epoll"), Some(Choice::Epoll));
    assert_eq!(Choice::parse("kqueue"), None);
}

#[test]
fn epoll_timeout_rounds_up() {
    assert_eq!(timeout_ms_ceil(None), -1);
    assert_eq!(timeout_ms_ceil(Some(Duration::ZERO)), 0);
    assert_eq!(timeout_ms_ceil(Some(Duration::from_nanos(1))), 1);
    assert_eq!(timeout_ms_ceil(Some(Duration::from_micros(1500))), 2);
    assert_eq!(timeout_ms_ceil(Some(Duration::from_secs(86400 * 365 * 100))), i32::MAX);
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    sys::syscall!(pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC)).unwrap();
    (fds[0], fds[1])
}

fn level_triggered(choice: Choice) {
    let (mut r, _) = Reactor::new(choice, false).unwrap();
    let (rd, wr) = pipe();
    r.set_interest(rd, true, false).unwrap();
    let mut ev = Vec::new();
    r.poll(Some(Duration::ZERO), &mut ev, &mut Vec::new()).unwrap();
    assert!(ev.is_empty(), "nothing written yet: {ev:?}");
    sys::syscall!(write(wr, b"ab".as_ptr().cast(), 2)).unwrap();
    // Data left unread must be reported again on every poll (level-triggered).
    for _ in 0..3 {
        ev.clear();
        r.poll(Some(Duration::from_secs(1)), &mut ev, &mut Vec::new()).unwrap();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert!(ev[0].readable && ev[0].fd == rd);
    }
    let mut buf = [0u8; 2];
    sys::syscall!(read(rd, buf.as_mut_ptr().cast(), 2)).unwrap();
    ev.clear();
    r.poll(Some(Duration::from_millis(20)), &mut ev, &mut Vec::new()).unwrap();
    assert!(ev.is_empty(), "drained: {ev:?}");
    // Forgetting the fd stops reports even when it is readable again.
    r.set_interest(rd, false, false).unwrap();
    sys::syscall!(write(wr, b"c".as_ptr().cast(), 1)).unwrap();
    ev.clear();
    r.poll(Some(Duration::from_millis(20)), &mut ev, &mut Vec::new()).unwrap();
    assert!(ev.is_empty(), "forgotten: {ev:?}");
    // A writer on a pipe with room fires at once.
    r.set_interest(wr, false, true).unwrap();
    ev.clear();
    r.poll(Some(Duration::from_secs(1)), &mut ev, &mut Vec::new()).unwrap();
    assert!(ev.len() == 1 && ev[0].writable && ev[0].fd == wr, "{ev:?}");
    assert_eq!(r.watched_fds(), 1);
    sys::syscall!(close(rd)).unwrap();
    sys::syscall!(close(wr)).unwrap();
}

fn wakes_from_another_thread(choice: Choice) {
    let (mut r, _) = Reactor::new(choice, false).unwrap();
    let w = r.waker().clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        w.wake();
    });
    let start = std::time::Instant::now();
    let mut ev = Vec::new();
    r.poll(Some(Duration::from_secs(10)), &mut ev, &mut Vec::new()).unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(ev.is_empty(), "the waker is not a user event: {ev:?}");
    t.join().unwrap();
    // The wake-up was consumed: the next wait times out normally and not early.
    let start = std::time::Instant::now();
    r.poll(Some(Duration::from_millis(30)), &mut ev, &mut Vec::new()).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(29), "{:?}", start.elapsed());
}

fn bad_fds(choice: Choice) {
    let (mut r, _) = Reactor::new(choice, false).unwrap();
    let e = r.set_interest(987_654, true, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    let f = std::fs::File::open("/proc/self/status").unwrap();
    use std::os::fd::AsRawFd;
    let e = r.set_interest(f.as_raw_fd(), true, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    assert_eq!(r.watched_fds(), 0);
}

/// Forgetting an fd must release the kernel's reference to its file at once: closing a
/// listening socket right after must refuse new connections immediately.
fn forget_then_close_releases_the_file(choice: Choice) {
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::IntoRawFd;
    let (mut r, _) = Reactor::new(choice, false).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fd = l.into_raw_fd();
    r.set_interest(fd, true, false).unwrap();
    let mut ev = Vec::new();
    r.poll(Some(Duration::ZERO), &mut ev, &mut Vec::new()).unwrap(); // the poll is now armed in the kernel
    r.set_interest(fd, false, false).unwrap();
    sys::syscall!(close(fd)).unwrap();
    let e = TcpStream::connect(addr).expect_err("the port must be closed");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
}

/// An io_uring reactor with provided-buffer rings, or `None` where the kernel has no
/// io_uring or no multishot recv (< 6.0; the loop then reads on readiness), so the test
/// has nothing to check.
fn uring_with_buffers() -> Option<uring::UringReactor> {
    if !io_uring_available().0 {
        return None;
    }
    let (Reactor::Uring(mut r), _) = Reactor::new(Choice::IoUring, false).unwrap() else { unreachable!() };
    r.recv_multishot_available().then_some(r)
}

fn socketpair() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    sys::syscall!(socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())).unwrap();
    (fds[0], fds[1])
}

/// Poll until `want` bytes arrived on `token` (or a completion without MORE), recycling
/// every buffer as the loop does.
fn recv_ops(r: &mut uring::UringReactor, want: usize) -> (Vec<u8>, Vec<OpCompletion>) {
    let (mut got, mut all) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let mut ops = Vec::new();
        r.poll(Some(Duration::from_millis(50)), &mut Vec::new(), &mut ops).unwrap();
        for op in &ops {
            if let Some(bid) = op.bid {
                let mut read = r.lease(vec![(bid, op.res as usize)]).expect("a stream buffer");
                let mut buf = vec![0; read.len()];
                assert_eq!(read.copy_to(&mut buf), buf.len());
                got.extend_from_slice(&buf);
            }
        }
        let ended = ops.iter().any(|o| !o.more);
        all.extend(ops);
        if got.len() >= want || ended {
            break;
        }
    }
    (got, all)
}

#[test]
fn uring_multishot_recv_fills_provided_buffers_in_order() {
    let Some(mut r) = uring_with_buffers() else { return };
    let (a, b) = socketpair();
    let token = uring::op_token(a, 7);
    r.recv_multishot(a, token).unwrap();
    // More than one buffer's worth, in several writes: every byte arrives once, in order.
    let msg: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in msg.chunks(10_000) {
        sys::syscall!(write(b, chunk.as_ptr().cast(), chunk.len())).unwrap();
    }
    let (got, ops) = recv_ops(&mut r, msg.len());
    assert_eq!(got, msg);
    assert!(ops.iter().all(|o| o.token == token && o.res > 0 && o.more), "{ops:?}");
    assert!(ops.iter().all(|o| o.res as usize <= r.buffer_size()));
    // EOF ends the multishot: res 0, no MORE.
    sys::syscall!(close(b)).unwrap();
    let (_, ops) = recv_ops(&mut r, 1);
    assert!(ops.iter().any(|o| o.res == 0 && !o.more), "{ops:?}");
    sys::syscall!(close(a)).unwrap();
}

/// A multishot recv ends by itself after its byte limit even while the peer keeps the
/// socket full (where ASYNC_CANCEL may not find it): a stopped transport's recv, and the
/// file it holds, never outlive the limit.
#[test]
fn uring_multishot_recv_ends_at_its_byte_limit() {
    let Some(mut r) = uring_with_buffers() else { return };
    let (a, b) = socketpair();
    r.recv_multishot(a, uring::op_token(a, 1)).unwrap();
    let block = vec![1u8; 64 * 1024];
    let mut received = 0usize;
    let mut ended = false;
    for _ in 0..400 {
        // Keep the socket full, as a flooding peer does.
        let _ = sys::syscall!(write(b, block.as_ptr().cast(), block.len()));
        let mut ops = Vec::new();
        r.poll(Some(Duration::from_millis(20)), &mut Vec::new(), &mut ops).unwrap();
        for op in &ops {
            if let Some(bid) = op.bid {
                received += op.res as usize;
                r.recycle(&[bid]);
            }
            ended |= !op.more;
        }
        if ended {
            break;
        }
    }
    if uname_at_least(6, 16) {
        assert!(ended, "the multishot recv never ended by itself");
        assert!(received <= uring::RECV_ARM_LIMIT as usize + r.buffer_size(), "{received}");
    }
    sys::syscall!(close(a)).unwrap();
    sys::syscall!(close(b)).unwrap();
}

fn udp_pair() -> (std::net::UdpSocket, std::net::UdpSocket) {
    let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    (a, b)
}

/// One datagram per completion, with the sender's address, in order.
#[test]
fn uring_multishot_recvmsg_delivers_datagrams_with_their_sender() {
    use std::os::fd::AsRawFd as _;
    let Some(mut r) = uring_with_buffers() else { return };
    let (a, b) = udp_pair();
    let token = uring::op_token(a.as_raw_fd(), 3);
    r.recvmsg_multishot(a.as_raw_fd(), token).unwrap();
    for i in 0..50u8 {
        b.send(&vec![i; 100 + i as usize]).unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..100 {
        let mut ops = Vec::new();
        r.poll(Some(Duration::from_millis(20)), &mut Vec::new(), &mut ops).unwrap();
        for op in &ops {
            assert!(op.more && op.token == token, "{op:?}");
            let bid = op.bid.expect("a buffer");
            let read = r.lease(vec![(bid, op.res as usize)]).expect("a datagram buffer");
            let (sin, payload, trunc) = read.with_single(|buf| {
                let (name, payload, trunc) = recvmsg_parts(buf).expect("parses");
                // SAFETY: the name is a sockaddr_in the kernel wrote, at least 16 bytes.
                let sin: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(name.as_ptr().cast()) };
                (sin, payload.to_vec(), trunc)
            });
            assert!(!trunc);
            assert_eq!(u16::from_be(sin.sin_port), b.local_addr().unwrap().port());
            got.push(payload);
        }
        if got.len() == 50 {
            break;
        }
    }
    let want: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 100 + i as usize]).collect();
    assert_eq!(got, want);
}

/// A multishot recvmsg on a flooded UDP socket can still be cancelled: its last completion
/// (without MORE) arrives, so the file it holds is let go.
#[test]
fn uring_multishot_recvmsg_cancels_under_a_flood() {
    use std::os::fd::AsRawFd as _;
    let Some(mut r) = uring_with_buffers() else { return };
    let (a, b) = udp_pair();
    let token = uring::op_token(a.as_raw_fd(), 5);
    r.recvmsg_multishot(a.as_raw_fd(), token).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let d = [7u8; 1200];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = b.send(&d);
            }
        })
    };
    let (mut ended, mut cancelled, mut rearmed, mut datagrams, mut datagrams_at_cancel) = (false, false, 0, 0, 0);
    for round in 0..4000 {
        // Cancel once the flood is in full swing (every poll returns datagrams).
        if !cancelled && (datagrams >= 20_000 || round == 3000) {
            r.cancel_op(token).unwrap();
            cancelled = true;
            datagrams_at_cancel = datagrams;
        }
        let mut ops = Vec::new();
        r.poll(Some(Duration::from_millis(5)), &mut Vec::new(), &mut ops).unwrap();
        for op in &ops {
            if let Some(bid) = op.bid {
                r.recycle(&[bid]);
                datagrams += 1;
            }
            if op.token == token && !op.more {
                if cancelled {
                    ended = true;
                } else {
                    // Out of buffers (each datagram takes one): re-armed, as the loop does.
                    assert_eq!(op.res, -libc::ENOBUFS, "{op:?}");
                    r.recvmsg_multishot(a.as_raw_fd(), token).unwrap();
                    rearmed += 1;
                }
            }
        }
        if ended {
            break;
        }
    }
    eprintln!("datagrams {datagrams}, re-armed {rearmed}, cancelled after {datagrams_at_cancel}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.join().unwrap();
    assert!(ended, "the cancelled multishot recvmsg never ended under a flood");
}

fn uname_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain data and uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    // SAFETY: uname NUL-terminates `release`.
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned();
    let mut it = rel.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    let (ma, mi) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

#[test]
fn epoll_forget_then_close_releases_the_file() {
    forget_then_close_releases_the_file(Choice::Epoll);
}
#[test]
fn uring_forget_then_close_releases_the_file() {
    if io_uring_available().0 {
        forget_then_close_releases_the_file(Choice::IoUring);
    }
}

#[test]
fn epoll_is_level_triggered() {
    level_triggered(Choice::Epoll);
}
#[test]
fn uring_is_level_triggered() {
    if io_uring_available().0 {
        level_triggered(Choice::IoUring);
    }
}
#[test]
fn epoll_wakes() {
    wakes_from_another_thread(Choice::Epoll);
}
#[test]
fn uring_wakes() {
    if io_uring_available().0 {
        wakes_from_another_thread(Choice::IoUring);
    }
}
#[test]
fn epoll_bad_fds() {
    bad_fds(Choice::Epoll);
}
#[test]
fn uring_bad_fds() {
    if io_uring_available().0 {
        bad_fds(Choice::IoUring);
    }
}
