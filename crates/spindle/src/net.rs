//! Listening sockets: one `SO_REUSEPORT` socket per worker and address, so
//! that the kernel spreads new connections over the workers and no two
//! workers ever contend for one accept queue.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `listen(2)` backlog of every listening socket.
pub const LISTEN_BACKLOG: i32 = 4096;

pub(crate) fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid; it is then filled as
    // the family's struct, which fits inside it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
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
            // SAFETY: sockaddr_in fits in sockaddr_storage and both are plain data.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
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
            // SAFETY: sockaddr_in6 fits in sockaddr_storage and both are plain data.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

pub(crate) fn setopt(fd: RawFd, level: i32, opt: i32, val: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&val as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn bind_one(addr: &SocketAddr, reuseport: bool) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    setopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if reuseport {
        setopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    if addr.is_ipv6() {
        setopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
    }
    // Nagle off, so the tail of a response is not held back waiting for an
    // ACK. Set once here: Linux copies the listener's TCP_NODELAY into
    // every socket accept() returns (the child is a clone of the listening
    // sock), which saves a setsockopt per connection (tested below).
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` is a live sockaddr of length `len`.
    if unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain listen(2) on our socket.
    if unsafe { libc::listen(fd, LISTEN_BACKLOG) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// The address a socket is bound to.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    // SAFETY: getsockname writes at most `len` bytes into a live sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: as above.
    if unsafe {
        libc::getsockname(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(from_storage(&ss))
}

/// The peer of a connected socket, as text for the access log.
pub fn peer_string(fd: RawFd) -> String {
    peer_addr(fd).map_or_else(|| "-".to_string(), |a| a.ip().to_string())
}

/// The peer of a connected socket (None if it is gone).
pub fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: getpeername writes at most `len` bytes into a live sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: as above.
    if unsafe {
        libc::getpeername(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    } < 0
    {
        return None;
    }
    Some(from_storage(&ss))
}

pub(crate) fn from_storage(ss: &libc::sockaddr_storage) -> SocketAddr {
    if ss.ss_family as i32 == libc::AF_INET6 {
        // SAFETY: the family says the storage holds a sockaddr_in6.
        let a: libc::sockaddr_in6 =
            unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
        SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port)))
    } else {
        // SAFETY: the family says the storage holds a sockaddr_in.
        let a: libc::sockaddr_in =
            unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
        SocketAddr::from((a.sin_addr.s_addr.to_ne_bytes(), u16::from_be(a.sin_port)))
    }
}

/// Binds `workers` listening sockets to `addr` with `SO_REUSEPORT`.
///
/// A plain (non-reuseport) bind is tried first: with `SO_REUSEPORT` alone,
/// a second server of the same user could bind the same port silently and
/// take half the connections. For port 0 the probe's port is reused by
/// every worker's socket.
pub fn bind_group(addr: SocketAddr, workers: usize) -> io::Result<(SocketAddr, Vec<OwnedFd>)> {
    let probe = bind_one(&addr, false)?;
    let actual = local_addr(probe.as_raw_fd())?;
    drop(probe);
    let mut socks = Vec::with_capacity(workers);
    for _ in 0..workers {
        socks.push(bind_one(&actual, true)?);
    }
    Ok((actual, socks))
}

/// First descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;
/// Most sockets taken from systemd.
pub const MAX_ACTIVATED_SOCKETS: usize = 64;

/// The listening sockets systemd passed to this process (socket activation,
/// `sd_listen_fds(3)`): descriptors 3 onwards, when `LISTEN_PID` names this
/// process. Each must be a listening TCP socket ([`take_listening`]). The
/// variables are removed so that nothing this process starts takes them for
/// its own.
pub fn activated_sockets() -> Result<Vec<OwnedFd>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let n = std::env::var("LISTEN_FDS").ok();
    let (Some(pid), Some(n)) = (pid, n) else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={n}: not a number of sockets"))?;
    if n > MAX_ACTIVATED_SOCKETS {
        return Err(format!(
            "LISTEN_FDS={n}: at most {MAX_ACTIVATED_SOCKETS} sockets"
        ));
    }
    (0..n)
        .map(|i| {
            take_listening(LISTEN_FDS_START + i as RawFd, "from systemd").map_err(|e| {
                if e.ends_with("not a listening stream socket") {
                    format!("{e} (use ListenStream= in the .socket unit)")
                } else {
                    e
                }
            })
        })
        .collect()
}

/// Takes ownership of `fd`, a listening TCP socket handed to this process
/// (by systemd, or by the spindle it replaces: `handover.rs`): checks that
/// it is one, marks it close-on-exec and sets TCP_NODELAY, as on the
/// sockets spindle binds.
pub fn take_listening(fd: RawFd, from: &str) -> Result<OwnedFd, String> {
    let listening = getopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)
        .map_err(|e| format!("socket {fd} {from}: {e}"))?;
    let kind = getopt(fd, libc::SOL_SOCKET, libc::SO_TYPE)
        .map_err(|e| format!("socket {fd} {from}: {e}"))?;
    if listening != 1 || kind != libc::SOCK_STREAM {
        return Err(format!(
            "socket {fd} {from} is not a listening stream socket"
        ));
    }
    // SAFETY: the descriptor was handed to this process for it to own, and
    // nothing else in it owns it (the caller takes each number once).
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
        .map_err(|e| format!("socket {fd} {from}: {e} (a TCP socket is needed)"))?;
    Ok(sock)
}

/// Takes ownership of `fd`, a pipe's write end handed to this process by
/// the spindle it replaces, after checking that it is one.
pub fn take_pipe_end(fd: RawFd) -> Result<OwnedFd, String> {
    // SAFETY: an all-zero stat is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the live local.
    if unsafe { libc::fstat(fd, &mut st) } < 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(format!("descriptor {fd} is not a pipe"));
    }
    // SAFETY: handed to this process to own; taken once.
    let end = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(end)
}

/// Sends `sig` to this process (taken by the main thread's `sigwait`).
pub fn signal_self(sig: libc::c_int) {
    // SAFETY: kill(2) to our own pid with a valid signal number.
    unsafe { libc::kill(libc::getpid(), sig) };
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `cmd` with the descriptors `keep` open in it under the same
/// numbers (they are close-on-exec here, as every descriptor spindle
/// opens, so nothing else leaks into the child).
pub fn spawn_keeping(
    cmd: &mut std::process::Command,
    keep: Vec<RawFd>,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it makes only fcntl(2)
    // calls, on numbers that stay open in the parent until spawn returns
    // (the caller owns them), and allocates nothing (`keep` was built
    // before the fork).
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &keep {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

fn getopt(fd: RawFd, level: i32, opt: i32) -> io::Result<i32> {
    let mut v: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live i32 and its size.
    let rc = unsafe { libc::getsockopt(fd, level, opt, (&mut v as *mut i32).cast(), &mut len) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Sends `state` to systemd's notification socket (`sd_notify(3)`), if the
/// service manager gave one in `NOTIFY_SOCKET` (a path, or `@` and an
/// abstract name). Best effort: a server not run by systemd has none.
pub fn sd_notify(state: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = target.as_encoded_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => UnixAddr::from_abstract_name(name),
        None => UnixAddr::from_pathname(std::path::Path::new(&target)),
    };
    if let (Ok(addr), Ok(sock)) = (addr, UnixDatagram::unbound()) {
        let _ = sock.send_to_addr(state.as_bytes(), &addr);
    }
}

/// Unsent bytes a connection may hold in the kernel while it sends a bulk
/// body over a congestion control that paces (`TCP_NOTSENT_LOWAT`, see
/// [`set_bulk`]); a `sendfile` stops short beyond it, and the socket polls
/// writable again below half of it.
pub const BULK_NOTSENT_LOWAT: i32 = 32 * 1024;

/// Unsent bytes an HTTPS connection may hold in the kernel
/// (`TCP_NOTSENT_LOWAT`, set on the `--tls-listen` sockets and inherited
/// by every connection accepted from them): about one batch of records
/// (`ENCRYPT_STEP`, HTTP/2's `FILL_BATCH`).
///
/// - HTTP/2's priorities then take effect: a new stream's frames are
///   framed behind at most this much of a download's DATA, not behind
///   the megabytes a socket buffer grows to.
/// - Without a bound, a large body is queued ahead in the kernel, and
///   the ACKs that open the window transmit it, in the softirq of
///   whichever core takes them: on loopback the client's. With it, the
///   server's own SENDs transmit, and a client on the same machine is
///   no longer slowed by them (docs/decisions.md, "HTTPS send queue").
///
/// Plain listeners are left alone: their bodies go by `sendfile`, bounded
/// by [`set_bulk`] where that pays.
pub const TLS_NOTSENT_LOWAT: i32 = 64 * 1024;

/// Bounds the unsent bytes of connections accepted from the HTTPS
/// listener `fd` ([`TLS_NOTSENT_LOWAT`]). A refusal costs only speed.
pub fn set_tls_listener(fd: RawFd) {
    let _ = setopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        TLS_NOTSENT_LOWAT,
    );
}

/// How a connection was switched into bulk sending by [`set_bulk`], so
/// that it can be switched back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bulk {
    /// Not in bulk sending.
    Off,
    /// Nagle's algorithm on.
    Nagle,
    /// Nagle's algorithm on, and unsent bytes bounded by
    /// [`BULK_NOTSENT_LOWAT`].
    NagleLowat,
}

/// Switches a connection into bulk sending, for a body that goes by many
/// `sendfile` calls; [`end_bulk`] switches it back.
///
/// - Nagle's algorithm comes back on (`TCP_NODELAY` off). The listener's
///   `TCP_NODELAY` would send the tail of every `sendfile` call as a
///   segment of its own (a 256 KiB call over loopback is four full
///   segments and a runt of 212 bytes); with Nagle the runt waits for the
///   next call's bytes.
/// - When the connection's congestion control paces (`bbr`),
///   `TCP_NOTSENT_LOWAT` also bounds the bytes queued but not yet sent.
///   Without it a `sendfile` loop queues megabytes. With no `fq` qdisc to
///   pace them, TCP then releases them itself, one segment per expiry of
///   the socket's pacing timer, on the server's core. On `cubic`, which
///   does not pace, the bound only adds wake-ups, so it is left off.
pub fn set_bulk(fd: RawFd) -> Bulk {
    let lowat = paces(fd)
        && setopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            BULK_NOTSENT_LOWAT,
        )
        .is_ok();
    // A refusal costs only speed.
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 0);
    if lowat {
        Bulk::NagleLowat
    } else {
        Bulk::Nagle
    }
}

/// Ends bulk sending: `TCP_NODELAY` on again, which sends whatever Nagle
/// holds at once (so the body's last bytes do not wait for an ACK), and
/// the system's default low-water mark back.
pub fn end_bulk(fd: RawFd, how: Bulk) {
    if how == Bulk::Off {
        return;
    }
    let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    if how == Bulk::NagleLowat {
        let _ = setopt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, 0);
    }
}

/// Whether the connection's congestion control asks TCP to pace its
/// segments (`bbr` does; `cubic` and `reno` do not).
fn paces(fd: RawFd) -> bool {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `name`, a live
    // array of that size, and stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    rc == 0 && name.starts_with(b"bbr")
}

/// True when input waits unread in the socket (a non-blocking one-byte
/// `MSG_PEEK`; false on EOF, on errors and when nothing is there).
pub fn has_unread_input(fd: RawFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv(2) writes at most one byte into `b`, a live local.
    let n = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, no pointers involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this kernel offers kernel TLS (`setsockopt(TCP_ULP, "tls")`,
/// `CONFIG_TLS`), probed on a throwaway loopback connection (the ULP
/// attaches only to an established socket). With it, `sendfile` could
/// send file bytes over HTTPS without a copy; spindle does not use it yet
/// (no kernel to test it on), and says which path it takes at start.
pub fn ktls_available() -> Result<(), io::Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    let _server = listener.accept()?;
    let ulp = b"tls";
    // SAFETY: setsockopt with a pointer to a live byte array and its length;
    // the kernel copies it during the call.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&client),
            libc::IPPROTO_TCP,
            libc::TCP_ULP,
            ulp.as_ptr().cast(),
            ulp.len() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn tcp_opt(fd: RawFd, name: i32) -> i32 {
        let mut v: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`, a live i32.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                name,
                (&mut v as *mut i32).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        v
    }

    fn nodelay(fd: RawFd) -> i32 {
        tcp_opt(fd, libc::TCP_NODELAY)
    }

    /// Bulk sending turns Nagle on, bounds the unsent bytes only under a
    /// congestion control that paces, and ending it restores both (the
    /// next response on the connection must not be held by Nagle).
    #[test]
    fn bulk_sending_turns_nagle_on_and_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tried = 0;
        for (cc, want) in [("cubic", Bulk::Nagle), ("bbr", Bulk::NagleLowat)] {
            let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (conn, _) = listener.accept().unwrap();
            let fd = conn.as_raw_fd();
            conn.set_nodelay(true).unwrap();
            // SAFETY: setsockopt reads `cc.len()` bytes from a live str.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_CONGESTION,
                    cc.as_ptr().cast(),
                    cc.len() as libc::socklen_t,
                )
            };
            if rc != 0 {
                continue; // that congestion control is not available here
            }
            tried += 1;
            let how = set_bulk(fd);
            assert_eq!(how, want, "{cc}");
            assert_eq!(nodelay(fd), 0, "{cc}: Nagle on while bulk");
            let lowat = tcp_opt(fd, libc::TCP_NOTSENT_LOWAT);
            match want {
                Bulk::NagleLowat => assert_eq!(lowat, BULK_NOTSENT_LOWAT, "{cc}"),
                _ => assert_eq!(lowat, 0, "{cc}: no low-water mark without pacing"),
            }
            end_bulk(fd, how);
            assert_eq!(nodelay(fd), 1, "{cc}: TCP_NODELAY back after bulk");
            assert_eq!(tcp_opt(fd, libc::TCP_NOTSENT_LOWAT), 0, "{cc}");
        }
        assert!(tried > 0, "neither cubic nor bbr could be set");
    }

    /// Accepts the connection queued on `listener` (blocking).
    fn accept_one(listener: &OwnedFd) -> OwnedFd {
        // SAFETY: a blocking accept4 on our listening socket, which has
        // the connection queued; no pointers are passed.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor from accept4.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// The backends no longer set TCP_NODELAY per connection: they rely on
    /// accepted sockets inheriting it from the listener.
    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let Ok((bound, fds)) = bind_group(addr, 1) else {
                continue; // no IPv6 on this host
            };
            let _client = std::net::TcpStream::connect(bound).unwrap();
            let conn = accept_one(&fds[0]);
            assert_eq!(nodelay(conn.as_raw_fd()), 1, "{addr}");
        }
    }

    /// HTTPS connections get their bound on unsent bytes from the
    /// listener, the way they get TCP_NODELAY.
    #[test]
    fn accepted_sockets_inherit_the_tls_listeners_low_water_mark() {
        let (bound, fds) = bind_group("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        set_tls_listener(fds[0].as_raw_fd());
        let _client = std::net::TcpStream::connect(bound).unwrap();
        let conn = accept_one(&fds[0]);
        assert_eq!(
            tcp_opt(conn.as_raw_fd(), libc::TCP_NOTSENT_LOWAT),
            TLS_NOTSENT_LOWAT
        );
    }
}
