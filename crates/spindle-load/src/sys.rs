//! The raw syscalls spindle-load needs: epoll, non-blocking TCP sockets and
//! RLIMIT_NOFILE. Everything `unsafe` in the crate lives here.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    // SAFETY: getrlimit/setrlimit only read/write the local struct, which
    // lives across both calls.
    unsafe {
        let mut lim: libc::rlimit = zeroed();
        cvt(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim))?;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            cvt(libc::setrlimit(libc::RLIMIT_NOFILE, &lim))?;
        }
        Ok(lim.rlim_cur)
    }
}

/// CPU time the calling thread has used so far: (user, system) seconds,
/// from `getrusage(RUSAGE_THREAD)`.
pub fn thread_cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage only writes the local struct, which outlives the call.
    let ru = unsafe {
        let mut ru: libc::rusage = zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return (0.0, 0.0);
        }
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// Event bits, re-exported so the engine needs no libc.
pub const EV_IN: u32 = libc::EPOLLIN as u32;
pub const EV_OUT: u32 = libc::EPOLLOUT as u32;
pub const EV_ERR: u32 = libc::EPOLLERR as u32;
pub const EV_HUP: u32 = libc::EPOLLHUP as u32;
pub const EV_RDHUP: u32 = libc::EPOLLRDHUP as u32;
const EV_ET: u32 = libc::EPOLLET as u32;

/// One ready descriptor: the token it was registered with, and its events.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub token: u64,
    pub events: u32,
}

pub struct Epoll {
    fd: OwnedFd,
    buf: Vec<libc::epoll_event>,
}

impl Epoll {
    /// `max_events`: most events returned by one `wait`.
    pub fn new(max_events: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; the fd it returns is owned
        // by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        Ok(Epoll {
            fd,
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; max_events.max(1)],
        })
    }

    /// Register `fd` edge-triggered for input, output and peer hang-up.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: EV_IN | EV_OUT | EV_RDHUP | EV_ET,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event that lives across the call; the
        // kernel copies it.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Wait up to `timeout_ms` (-1: forever) and append ready events to `out`.
    pub fn wait(&mut self, out: &mut Vec<Event>, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: `buf` holds `buf.len()` initialised epoll_events and is not
        // touched by anyone else during the call; the kernel writes at most
        // that many.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr(),
                self.buf.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        for ev in &self.buf[..n as usize] {
            out.push(Event {
                token: ev.u64,
                events: ev.events,
            });
        }
        Ok(())
    }
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A non-blocking TCP socket for `addr`, optionally bound to `source`, with
/// `connect` started. Returns the socket and whether it is already connected.
pub fn connect_nonblocking(
    addr: &SocketAddr,
    source: Option<IpAddr>,
    nodelay: bool,
) -> io::Result<(OwnedFd, bool)> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket takes no pointers; the new fd is owned only by us.
    let fd = unsafe {
        OwnedFd::from_raw_fd(cvt(libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        ))?)
    };
    if nodelay {
        let one: libc::c_int = 1;
        // SAFETY: `one` lives across the call and its size is passed.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                &one as *const _ as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })?;
    }
    if let Some(ip) = source {
        let (ss, len) = sockaddr(&SocketAddr::new(ip, 0));
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes for the call.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &ss as *const _ as *const libc::sockaddr,
                len,
            )
        })?;
    }
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` holds a valid sockaddr of `len` bytes for the call.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &ss as *const _ as *const libc::sockaddr,
            len,
        )
    };
    if r == 0 {
        return Ok((fd, true));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok((fd, false))
    } else {
        Err(e)
    }
}

/// The pending error of a socket (SO_ERROR), if any.
pub fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` live across the call; `len` holds err's size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(if err == 0 {
        None
    } else {
        Some(io::Error::from_raw_os_error(err))
    })
}

/// `recv` into `buf`.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid writable slice for the duration of the call,
    // and we pass its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `send` without SIGPIPE.
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid readable slice for the duration of the call,
    // and we pass its length.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
