//! UDP for QUIC, one socket per worker: what only the kernel can do.
//!
//! - A socket per worker in a `SO_REUSEPORT` group on the HTTPS address,
//!   steered by [`super::cid::steering_program`] (`SO_ATTACH_REUSEPORT_CBPF`).
//! - Sends batched by GSO: one `sendmsg` carries up to
//!   [`super::GSO_SEGMENTS`] datagrams of one size to one address
//!   (`UDP_SEGMENT`, Linux 4.18); where the kernel or the device refuses
//!   it, a datagram a call.
//! - Receives coalesced by GRO (`UDP_GRO`, Linux 5.0): one `recvmsg` may
//!   bring several datagrams of one sender, all of one size but the last;
//!   the stride comes in a control message.
//! - ECN: the TOS byte of each datagram received (`IP_RECVTOS`,
//!   `IPV6_RECVTCLASS`) and the codepoint set on each send.
//! - Datagrams leave with Don't Fragment set (`IP_PMTUDISC_PROBE`), as
//!   QUIC's path MTU discovery needs (RFC 9000 §14).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::net::{from_storage, setopt, sockaddr};

use super::cid::BpfInsn;

// Linux's values (libc lacks some): linux/udp.h, asm-generic/socket.h.
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
const SO_ATTACH_REUSEPORT_CBPF: i32 = 51;

/// Control-message room for a send (`UDP_SEGMENT` and a TOS) and a
/// receive (`UDP_GRO` and a TOS), generously.
const CMSG_ROOM: usize = 128;

/// A worker's UDP socket.
#[derive(Debug)]
pub struct Udp {
    fd: OwnedFd,
    v6: bool,
    /// Whether sends may carry `UDP_SEGMENT`; cleared at the first
    /// refusal (a kernel without it, a device without checksum offload).
    gso: bool,
}

/// A receive: `len` bytes from `from`, datagrams of `stride` bytes
/// (the last may be shorter), with the TOS byte's ECN bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub stride: usize,
    pub ecn: u8,
}

/// Binds `workers` sockets to `addr` in one `SO_REUSEPORT` group (the
/// order of the vector is each socket's index in the group), and attaches
/// the steering program. A plain bind of the port is tried first, as for
/// TCP (`net::bind_group`).
pub fn bind_group(addr: SocketAddr, workers: usize) -> io::Result<Vec<Udp>> {
    drop(bind_one(&addr, false)?);
    let mut group = Vec::with_capacity(workers);
    for _ in 0..workers {
        group.push(bind_one(&addr, true)?);
    }
    if workers > 1 {
        group[0].attach_steering(workers)?;
    }
    Ok(group)
}

fn bind_one(addr: &SocketAddr, reuseport: bool) -> io::Result<Udp> {
    let v6 = addr.is_ipv6();
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2) call.
    let raw = unsafe {
        libc::socket(
            family,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let s = fd.as_raw_fd();
    if reuseport {
        setopt(s, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    if v6 {
        setopt(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        setopt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        setopt(
            s,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )?;
    } else {
        setopt(s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        setopt(
            s,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )?;
    }
    // GRO is an optimisation: an old kernel without it still works.
    let _ = setopt(s, libc::SOL_UDP, UDP_GRO, 1);
    let _ = setopt(s, libc::SOL_SOCKET, libc::SO_RCVBUF, super::SOCKET_BUFFER);
    let _ = setopt(s, libc::SOL_SOCKET, libc::SO_SNDBUF, super::SOCKET_BUFFER);
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` is a live sockaddr of length `len`.
    if unsafe { libc::bind(s, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Udp { fd, v6, gso: true })
}

impl Udp {
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        crate::net::local_addr(self.fd())
    }

    /// Whether sends are still batched by GSO.
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Attaches [`super::cid::steering_program`] to the group (any one
    /// socket of it carries the group's program).
    fn attach_steering(&self, workers: usize) -> io::Result<()> {
        let prog = super::cid::steering_program(workers);
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        const _: () = assert!(std::mem::size_of::<BpfInsn>() == 8);
        // SAFETY: `fprog` points at `prog`, live for the call, whose
        // elements have sock_filter's layout (repr(C), 8 bytes); the
        // kernel copies the program.
        let rc = unsafe {
            libc::setsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                SO_ATTACH_REUSEPORT_CBPF,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One receive into `buf` (GRO may coalesce several datagrams);
    /// `None` when nothing waits.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut cmsg = [0u64; CMSG_ROOM / 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ROOM;
        // SAFETY: every pointer in `msg` names a live local or `buf`,
        // with its length.
        let n = unsafe { libc::recvmsg(self.fd(), &mut msg, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        let len = n as usize;
        let (mut stride, mut ecn) = (len, 0u8);
        // SAFETY: `msg` was filled by recvmsg; the CMSG_* macros walk the
        // control buffer within `msg_controllen`, and each value read is
        // the size the kernel writes for that type.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let data = libc::CMSG_DATA(c);
                match (h.cmsg_level, h.cmsg_type) {
                    (libc::SOL_UDP, UDP_GRO) => {
                        stride = std::ptr::read_unaligned(data.cast::<i32>()) as usize
                    }
                    (libc::IPPROTO_IP, libc::IP_TOS) => ecn = *data & 0b11,
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        ecn = std::ptr::read_unaligned(data.cast::<i32>()) as u8 & 0b11
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let stride = if stride == 0 { len } else { stride.min(len) };
        Ok(Some(Received {
            len,
            from: from_storage(&from),
            stride,
            ecn,
        }))
    }

    /// Sends `contents` to `to`: datagrams of `segment` bytes (the last
    /// may be shorter) in one call when GSO is on, else one a call.
    /// `Ok(false)`: the socket's buffer is full, nothing (more) was sent;
    /// the caller keeps the rest and waits until the socket is writable.
    pub fn send(
        &mut self,
        to: SocketAddr,
        ecn: u8,
        segment: usize,
        contents: &[u8],
    ) -> io::Result<bool> {
        assert!(segment > 0 && !contents.is_empty());
        if self.gso && contents.len() > segment {
            match self.sendmsg(to, ecn, Some(segment), contents) {
                Ok(()) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) => {
                    self.gso = false;
                }
                Err(e) => return Err(e),
            }
        }
        for d in contents.chunks(segment) {
            match self.sendmsg(to, ecn, None, d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                // A probe over the path's MTU: QUIC learns from its loss.
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn sendmsg(
        &self,
        to: SocketAddr,
        ecn: u8,
        segment: Option<usize>,
        bytes: &[u8],
    ) -> io::Result<()> {
        let (mut ss, len) = sockaddr(&to);
        let mut cmsg = [0u64; CMSG_ROOM / 8];
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ROOM;
        let tos = (
            if self.v6 {
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
            } else {
                (libc::IPPROTO_IP, libc::IP_TOS)
            },
            i32::from(ecn & 0b11),
        );
        // SAFETY: the control buffer holds CMSG_ROOM bytes, room for both
        // messages (CMSG_SPACE(2) + CMSG_SPACE(4) = 40 bytes); each is
        // written within its CMSG_LEN, and msg_controllen is set to what
        // was used.
        let rc = unsafe {
            let mut used = 0usize;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = tos.0 .0;
            (*c).cmsg_type = tos.0 .1;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), tos.1);
            used += libc::CMSG_SPACE(4) as usize;
            if let Some(s) = segment {
                c = libc::CMSG_NXTHDR(&msg, c);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), s as u16);
                used += libc::CMSG_SPACE(2) as usize;
            }
            msg.msg_controllen = used;
            libc::sendmsg(self.fd(), &msg, 0)
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
