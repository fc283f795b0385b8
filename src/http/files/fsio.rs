//! The I/O of static files: a mount's root held open, a name opened beneath it, its `fstat`,
//! reads of a range, and `sendfile(2)` to a socket.
//!
//! OS facts this relies on:
//! - `openat2(2)` with `RESOLVE_BENEATH` (Linux 5.6+) makes the kernel refuse (`EXDEV`) any
//!   resolution that leaves the directory fd — through `..`, an absolute path or a symlink,
//!   absolute or relative — atomically with the open, so no rename or symlink swap between a
//!   check and the open can trick it. `RESOLVE_NO_MAGICLINKS` also refuses `/proc`-style links.
//! - Where `openat2` is missing (`ENOSYS`: older kernels; `EPERM`/`ENOSYS` from a seccomp
//!   filter, as in some container runtimes) the fallback is `openat` and then a check of *what
//!   was opened*: `/proc/self/fd/N` names the file the fd refers to, which must lie under the
//!   root's canonical path. The check is made on the open fd, so it is race-free too (we read
//!   only from the fd we checked); it fails closed when `/proc` is not mounted. It differs in
//!   one way: an absolute symlink that points back inside the root is followed, where
//!   `RESOLVE_BENEATH` refuses it.
//! - Files are opened `O_NONBLOCK` so a FIFO planted under the root cannot block the loop in
//!   `open`; only regular files are served (`fstat`), so the flag never changes a read.
//! - `sendfile(2)` from a regular file to a non-blocking TCP socket moves what the socket buffer
//!   takes and returns; `EAGAIN` means full.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// A mounted directory, held open (`O_PATH`) for the life of the server.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// Its canonical path, for the fallback's check.
    canonical: PathBuf,
}

impl Root {
    pub fn open(dir: &Path) -> io::Result<Root> {
        let canonical = std::fs::canonicalize(dir)?;
        let c = CString::new(canonical.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(Root { fd: unsafe { OwnedFd::from_raw_fd(fd) }, canonical })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Open `name` (relative, from `path::resolve`) for reading, never outside the root.
    pub fn open_beneath(&self, name: &[u8]) -> io::Result<File> {
        let c = CString::new(name)?;
        match OPENAT2.load(Ordering::Relaxed) {
            UNKNOWN | WORKS => match self.openat2(&c) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) && OPENAT2.load(Ordering::Relaxed) == UNKNOWN => {
                    OPENAT2.store(MISSING, Ordering::Relaxed);
                    self.open_checked(&c)
                }
                r => {
                    if r.is_ok() {
                        OPENAT2.store(WORKS, Ordering::Relaxed);
                    }
                    r
                }
            },
            _ => self.open_checked(&c),
        }
    }

    fn openat2(&self, name: &CString) -> io::Result<File> {
        // SAFETY: `open_how` is plain data; zeroed is "no flags".
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: the root fd is open, `name` NUL-terminated, `how` a valid open_how of the
        // size passed; the kernel writes nothing back.
        let fd = unsafe {
            libc::syscall(libc::SYS_openat2, self.fd.as_raw_fd(), name.as_ptr(), &how as *const libc::open_how, std::mem::size_of::<libc::open_how>())
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd that nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd as RawFd) })
    }

    /// The fallback (see the module docs): `openat`, then the opened file's real path must lie
    /// under the root.
    fn open_checked(&self, name: &CString) -> io::Result<File> {
        // SAFETY: as in `openat2`.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd that nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        let real = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
        if real.starts_with(&self.canonical) && real != self.canonical {
            Ok(file)
        } else {
            Err(io::Error::from_raw_os_error(libc::EXDEV))
        }
    }
}

const UNKNOWN: u8 = 0;
const WORKS: u8 = 1;
const MISSING: u8 = 2;
/// Whether `openat2` answered on this system (tried once; a seccomp filter or old kernel is
/// the same for the whole process).
static OPENAT2: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Force the fallback (tests of both paths in one process).
#[cfg(test)]
fn set_openat2(works: bool) {
    OPENAT2.store(if works { UNKNOWN } else { MISSING }, Ordering::Relaxed);
}

/// What a served file's head needs of its `fstat`.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    pub regular: bool,
    pub size: u64,
    pub mtime_s: i64,
    pub mtime_ns: i64,
}

pub fn meta(f: &File) -> io::Result<Meta> {
    let m = f.metadata()?;
    use std::os::unix::fs::MetadataExt;
    Ok(Meta { regular: m.file_type().is_file(), size: m.len(), mtime_s: m.mtime(), mtime_ns: m.mtime_nsec() })
}

/// Append `len` bytes of `f` from `offset` to `out`. A file that shrank meanwhile is an error
/// (the head already promised `len`): the caller closes the connection.
pub fn read_into(f: &File, offset: u64, len: u64, out: &mut Vec<u8>) -> io::Result<()> {
    let start = out.len();
    out.resize(start + len as usize, 0);
    let r = f.read_exact_at(&mut out[start..], offset);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// `sendfile(2)` from `file` at `*offset` to the non-blocking socket `sock` until `*left` is
/// 0 or the socket is full (`Ok(false)`). A file that shrank is `UnexpectedEof`.
pub fn send_file(sock: RawFd, file: &File, offset: &mut u64, left: &mut u64) -> io::Result<bool> {
    while *left > 0 {
        let mut off = *offset as libc::off_t;
        let chunk = (*left).min(0x7fff_f000) as usize;
        // SAFETY: both fds are open for the call; `off` is a valid off_t the kernel updates.
        let n = unsafe { libc::sendfile(sock, file.as_raw_fd(), &mut off, chunk) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(false),
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        *offset += n as u64;
        *left -= n as u64;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("ringloop-files-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(base.join("secret.txt"), b"SECRET").unwrap();
        std::fs::write(root.join("a.txt"), b"hello").unwrap();
        std::fs::write(root.join("sub/b.txt"), b"bee").unwrap();
        symlink("../secret.txt", root.join("out-rel")).unwrap();
        symlink(base.join("secret.txt"), root.join("out-abs")).unwrap();
        symlink("sub/b.txt", root.join("in-rel")).unwrap();
        symlink("..", root.join("sub/up")).unwrap();
        (base, root)
    }

    fn check(root: &Root) {
        let mut s = String::new();
        use std::io::Read;
        root.open_beneath(b"a.txt").unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        assert!(root.open_beneath(b"in-rel").is_ok());
        for escape in [&b"out-rel"[..], b"out-abs", b"../secret.txt", b"sub/up/../secret.txt", b"/etc/passwd"] {
            assert!(root.open_beneath(escape).is_err(), "{:?}", String::from_utf8_lossy(escape));
        }
        // `sub/up` is the root itself (a directory): opens, and `meta` says not regular.
        if let Ok(f) = root.open_beneath(b"sub/up") {
            assert!(!meta(&f).unwrap().regular);
        }
    }

    #[test]
    fn opens_stay_beneath_the_root_both_ways() {
        let (base, root_dir) = tree();
        let root = Root::open(&root_dir).unwrap();
        set_openat2(true);
        check(&root);
        set_openat2(false);
        check(&root);
        set_openat2(true);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn reads_a_range() {
        let (base, root_dir) = tree();
        let f = Root::open(&root_dir).unwrap().open_beneath(b"a.txt").unwrap();
        let mut out = b"x".to_vec();
        read_into(&f, 1, 3, &mut out).unwrap();
        assert_eq!(out, b"xell");
        assert!(read_into(&f, 3, 10, &mut out).is_err());
        assert_eq!(out, b"xell");
        std::fs::remove_dir_all(base).unwrap();
    }
}
