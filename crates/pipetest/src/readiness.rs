//! The readiness models: `select()`, `poll()` and `epoll`, each followed by
//! `read()` and `write()`. Raw syscalls, hence `unsafe`; no buffer outlives
//! its call.

use crate::bench::{Bench, Fault};
use anyhow::{bail, Context as _, Result};
use std::io;

/// Most events one `epoll_wait` returns.
pub const EPOLL_MAX_EVENTS: usize = 1024;

fn stall_ms(b: &Bench) -> libc::c_int {
    b.core.stall.as_millis().min(i32::MAX as u128) as libc::c_int
}

/// `poll()` over every read end, then read one token from each ready pipe.
pub(crate) fn run_poll(b: &mut Bench, fault: Fault) -> Result<()> {
    let mut pfds: Vec<libc::pollfd> = b
        .core
        .pipes
        .r
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout = stall_ms(b);
    b.seed(fault)?;
    while !b.core.done() {
        // SAFETY: poll reads and writes `pfds.len()` live pollfd structs
        // during the call only.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll");
        }
        if rc == 0 {
            return Err(b.core.stalled());
        }
        let mut left = rc;
        for (i, pfd) in pfds.iter().enumerate() {
            if left == 0 {
                break;
            }
            let re = pfd.revents;
            if re == 0 {
                continue;
            }
            left -= 1;
            if re & libc::POLLIN == 0 {
                bail!("poll: pipe {i} reported revents {re:#x} without POLLIN");
            }
            b.read_ready(i, false)?;
        }
    }
    Ok(())
}

/// `select()` over every read end (all below FD_SETSIZE), then read one
/// token from each ready pipe.
pub(crate) fn run_select(b: &mut Bench, fault: Fault) -> Result<()> {
    let maxfd = *b.core.pipes.r.iter().max().expect("at least one pipe");
    if maxfd as usize >= libc::FD_SETSIZE {
        bail!(
            "select: descriptor {maxfd} is not below FD_SETSIZE={}",
            libc::FD_SETSIZE
        );
    }
    let stall = b.core.stall;
    b.seed(fault)?;
    while !b.core.done() {
        // SAFETY: fd_set is plain old data; all-zero is the empty set.
        let mut set: libc::fd_set = unsafe { std::mem::zeroed() };
        for &fd in &b.core.pipes.r {
            // SAFETY: fd is below FD_SETSIZE (checked above); `set` is live.
            unsafe { libc::FD_SET(fd, &mut set) };
        }
        let mut tv = libc::timeval {
            tv_sec: stall.as_secs() as libc::time_t,
            tv_usec: stall.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: select reads and writes the live `set` and `tv` during the call.
        let rc = unsafe {
            libc::select(
                maxfd + 1,
                &mut set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut tv,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("select");
        }
        if rc == 0 {
            return Err(b.core.stalled());
        }
        let mut left = rc;
        for i in 0..b.core.n {
            if left == 0 {
                break;
            }
            // SAFETY: reads the live `set`; fd below FD_SETSIZE.
            if unsafe { libc::FD_ISSET(b.core.pipes.r[i], &set) } {
                left -= 1;
                b.read_ready(i, false)?;
            }
        }
    }
    Ok(())
}

struct Epoll(libc::c_int);

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: closing the epoll descriptor this struct owns.
        unsafe { libc::close(self.0) };
    }
}

/// `epoll_wait()` on every read end (level- or edge-triggered), then read
/// one token (edge: every token) from each ready pipe.
pub(crate) fn run_epoll(b: &mut Bench, edge: bool, fault: Fault) -> Result<()> {
    // SAFETY: plain syscall, no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error()).context("epoll_create1");
    }
    let ep = Epoll(ep);
    let flags = if edge {
        (libc::EPOLLIN | libc::EPOLLET) as u32
    } else {
        libc::EPOLLIN as u32
    };
    for (i, &fd) in b.core.pipes.r.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: flags,
            u64: i as u64,
        };
        // SAFETY: epoll_ctl reads the live `ev` during the call.
        if unsafe { libc::epoll_ctl(ep.0, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(io::Error::last_os_error()).context("epoll_ctl(EPOLL_CTL_ADD)");
        }
    }
    let max = b.core.n.clamp(1, EPOLL_MAX_EVENTS);
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; max];
    let timeout = stall_ms(b);
    b.seed(fault)?;
    while !b.core.done() {
        // SAFETY: epoll_wait writes at most `max` events into the live `evs`.
        let rc = unsafe { libc::epoll_wait(ep.0, evs.as_mut_ptr(), max as libc::c_int, timeout) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("epoll_wait");
        }
        if rc == 0 {
            return Err(b.core.stalled());
        }
        for ev in &evs[..rc as usize] {
            let (events, i) = (ev.events, ev.u64 as usize);
            if events & libc::EPOLLIN as u32 == 0 {
                bail!("epoll: pipe {i} reported events {events:#x} without EPOLLIN");
            }
            b.read_ready(i, edge)?;
        }
    }
    Ok(())
}
