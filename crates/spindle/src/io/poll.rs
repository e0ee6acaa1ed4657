//! The epoll engine: io_uring's operations carried out with readiness
//! and plain syscalls, for kernels or sandboxes without io_uring and for
//! the seed backends.
//!
//! A socket operation runs when its descriptor is ready: a receive, an
//! accept or an eventfd read when epoll says readable; a send is tried at
//! once and, if the socket is full, again when epoll says writable (sends
//! on one socket keep their order). A disk operation (`OPENAT2`, `READ`,
//! `READV`) goes to the engine's [`Disk`] strategy. Completions are queued
//! and handed out by [`Engine::wait`], as the ring's are, so the worker
//! above cannot tell the engines apart except by their speed.
//!
//! Interest is level-triggered, registered only while an operation waits
//! on the descriptor (a hung-up socket with nothing waiting would
//! otherwise wake every wait).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use super::{Cqe, DiskOp, Engine, RecvBufs, Sub, BUFFER_SHIFT, F_BUFFER, F_MORE};

/// Most completions one readiness event yields for one multishot
/// operation (accept, receive), so that one busy socket cannot hold the
/// loop.
pub const BURST: usize = 16;
/// epoll events taken per wait.
pub const EVENTS: usize = 256;

/// How a [`Poll`] engine does disk operations.
pub trait Disk {
    /// Starts `op`; its completion goes to `done`, now or from a later
    /// [`Disk::reap`].
    ///
    /// # Safety
    /// The pointers in `op` stay valid until its completion is reaped.
    unsafe fn submit(&mut self, op: DiskOp, user_data: u64, done: &mut VecDeque<Cqe>);

    /// A descriptor that becomes readable when [`Disk::reap`] has
    /// completions (drained by `reap`).
    fn event_fd(&self) -> Option<RawFd> {
        None
    }

    /// Moves finished operations' completions to `done`.
    fn reap(&mut self, _done: &mut VecDeque<Cqe>) {}
}

/// A socket operation waiting for its descriptor to be readable.
#[derive(Debug, Clone, Copy)]
enum In {
    Accept,
    Recv { multishot: bool },
    ReadEvent { buf: *mut u8 },
    Poll { multishot: bool },
}

/// A socket operation waiting for its descriptor to be writable.
#[derive(Debug, Clone, Copy)]
enum Out {
    Send {
        buf: *const u8,
        len: u32,
        flags: i32,
    },
    SendMsg {
        msg: *const libc::msghdr,
        flags: u32,
    },
    SendFile {
        file: i32,
        off: u64,
        len: u32,
    },
    Poll,
}

/// What waits on one descriptor, and the interest registered for it.
#[derive(Default)]
struct Waiting {
    ins: Vec<(u64, In)>,
    outs: VecDeque<(u64, Out)>,
    /// The events registered with epoll; 0: not registered.
    mask: u32,
}

pub struct Poll<D: Disk> {
    ep: OwnedFd,
    fds: HashMap<RawFd, Waiting>,
    /// Where each waiting socket operation waits (for cancels).
    place: HashMap<u64, RawFd>,
    timers: Vec<(Instant, u64)>,
    done: VecDeque<Cqe>,
    recv: Box<[u8]>,
    recv_size: usize,
    free: Vec<u16>,
    disk: D,
    /// A linked operation still waiting: the next push waits for it.
    link: Option<u64>,
    /// Operations held until the linked one before them (the key) ends.
    held: HashMap<u64, (Sub, u64)>,
    /// Held operations whose link completed, to push.
    released: Vec<(Sub, u64)>,
    events: Vec<libc::epoll_event>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A syscall's return as a completion result.
fn res(r: isize) -> i32 {
    if r < 0 {
        -errno()
    } else {
        r as i32
    }
}

impl<D: Disk> Poll<D> {
    pub fn new(recv: RecvBufs, disk: D) -> Result<Poll<D>, String> {
        // SAFETY: plain syscall; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(format!(
                "epoll_create1 failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: a new descriptor that nothing else owns.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let p = Poll {
            ep,
            fds: HashMap::new(),
            place: HashMap::new(),
            timers: Vec::new(),
            done: VecDeque::new(),
            recv: vec![0u8; recv.count as usize * recv.size].into_boxed_slice(),
            recv_size: recv.size,
            free: (0..recv.count).rev().collect(),
            disk,
            link: None,
            held: HashMap::new(),
            released: Vec::new(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
        };
        if let Some(fd) = p.disk.event_fd() {
            p.ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32)
                .map_err(|e| format!("epoll_ctl of the disk eventfd failed: {e}"))?;
        }
        Ok(p)
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live struct for the call's duration.
        let r = unsafe { libc::epoll_ctl(self.ep.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Queues a completion; the end of a linked operation releases what
    /// was held behind it.
    fn complete(&mut self, user_data: u64, result: i32, flags: u32) {
        self.done.push_back((user_data, result, flags));
        if flags & F_MORE != 0 {
            return;
        }
        if let Some(next) = self.held.remove(&user_data) {
            self.released.push(next);
        }
    }

    /// Registers the interest `fd`'s waiting operations need.
    fn update(&mut self, fd: RawFd) {
        let Some(w) = self.fds.get(&fd) else {
            return;
        };
        let mut want = 0;
        if !w.ins.is_empty() {
            want |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        }
        if !w.outs.is_empty() {
            want |= libc::EPOLLOUT as u32;
        }
        let had = w.mask;
        if want == had {
            if want == 0 {
                self.fds.remove(&fd);
            }
            return;
        }
        let r = match (had, want) {
            (_, 0) => self.ctl(libc::EPOLL_CTL_DEL, fd, 0),
            (0, _) => self.ctl(libc::EPOLL_CTL_ADD, fd, want).or_else(|e| {
                // Still registered: the descriptor was closed and its
                // number reused, or never left (a dup keeps it).
                if e.raw_os_error() == Some(libc::EEXIST) {
                    self.ctl(libc::EPOLL_CTL_MOD, fd, want)
                } else {
                    Err(e)
                }
            }),
            _ => self.ctl(libc::EPOLL_CTL_MOD, fd, want).or_else(|e| {
                // Closed behind the engine's back (epoll forgets it).
                if e.raw_os_error() == Some(libc::ENOENT) {
                    self.ctl(libc::EPOLL_CTL_ADD, fd, want)
                } else {
                    Err(e)
                }
            }),
        };
        match r {
            Ok(()) => {
                if want == 0 {
                    self.fds.remove(&fd);
                } else if let Some(w) = self.fds.get_mut(&fd) {
                    w.mask = want;
                }
            }
            Err(e) => {
                if want == 0 {
                    self.fds.remove(&fd);
                    return;
                }
                // The descriptor cannot be watched (closed, or not
                // pollable): what waits on it fails.
                let w = self.fds.remove(&fd).expect("waiting descriptor");
                let e = -e.raw_os_error().unwrap_or(libc::EBADF);
                for (ud, _) in w.ins {
                    self.place.remove(&ud);
                    self.complete(ud, e, 0);
                }
                for (ud, _) in w.outs {
                    self.place.remove(&ud);
                    self.complete(ud, e, 0);
                }
            }
        }
    }

    fn wait_in(&mut self, fd: RawFd, user_data: u64, op: In) {
        self.fds.entry(fd).or_default().ins.push((user_data, op));
        self.place.insert(user_data, fd);
        self.update(fd);
    }

    fn wait_out(&mut self, fd: RawFd, user_data: u64, op: Out) {
        self.fds
            .entry(fd)
            .or_default()
            .outs
            .push_back((user_data, op));
        self.place.insert(user_data, fd);
        self.update(fd);
    }

    /// Tries a send now; `None`: the socket is full.
    fn try_out(&mut self, fd: RawFd, op: Out) -> Option<i32> {
        let r = match op {
            // SAFETY: the worker keeps `buf` valid for `len` bytes until
            // the completion (the engine's contract).
            Out::Send { buf, len, flags } => unsafe {
                libc::send(fd, buf.cast(), len as usize, flags | libc::MSG_DONTWAIT)
            },
            // SAFETY: as above, for the header and what it points to.
            Out::SendMsg { msg, flags } => unsafe {
                libc::sendmsg(fd, msg, flags as i32 | libc::MSG_DONTWAIT)
            },
            Out::SendFile { file, off, len } => {
                let mut o = off as libc::off_t;
                // SAFETY: plain sendfile between the worker's descriptors.
                unsafe { libc::sendfile(fd, file, &mut o, len as usize) }
            }
            Out::Poll => return Some(libc::POLLOUT as i32),
        };
        if r < 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EINTR {
                return None;
            }
            return Some(-e);
        }
        Some(r as i32)
    }

    /// Runs what waits on `fd` for the readiness `events` reported.
    fn ready(&mut self, fd: RawFd, events: u32) {
        let hup = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
        if events & ((libc::EPOLLIN | libc::EPOLLRDHUP) as u32 | hup) != 0 {
            let ins = self
                .fds
                .get_mut(&fd)
                .map(|w| std::mem::take(&mut w.ins))
                .unwrap_or_default();
            let mut kept = Vec::new();
            for (ud, op) in ins {
                if self.run_in(fd, ud, op) {
                    kept.push((ud, op));
                } else {
                    self.place.remove(&ud);
                }
            }
            if let Some(w) = self.fds.get_mut(&fd) {
                kept.append(&mut w.ins);
                w.ins = kept;
            }
        }
        if events & (libc::EPOLLOUT as u32 | hup) != 0 {
            while let Some(&(ud, op)) = self.fds.get(&fd).and_then(|w| w.outs.front()) {
                let Some(r) = self.try_out(fd, op) else {
                    break;
                };
                self.fds.get_mut(&fd).expect("waiting").outs.pop_front();
                self.place.remove(&ud);
                self.complete(ud, r, 0);
            }
        }
        self.update(fd);
    }

    /// Runs a readable descriptor's operation; `true` if it keeps waiting.
    fn run_in(&mut self, fd: RawFd, ud: u64, op: In) -> bool {
        match op {
            In::Accept => self.run_accept(fd, ud),
            In::Recv { multishot } => self.run_recv(fd, ud, multishot),
            In::ReadEvent { buf } => {
                // SAFETY: the worker keeps `buf` valid for 8 bytes until
                // the completion.
                let r = unsafe { libc::read(fd, buf.cast(), 8) };
                if r < 0 && errno() == libc::EAGAIN {
                    return true;
                }
                self.complete(ud, res(r), 0);
                false
            }
            In::Poll { multishot } => {
                let more = if multishot { F_MORE } else { 0 };
                self.complete(ud, libc::POLLIN as i32, more);
                multishot
            }
        }
    }

    fn run_accept(&mut self, fd: RawFd, ud: u64) -> bool {
        for _ in 0..BURST {
            // SAFETY: no address is asked for.
            let r = unsafe {
                libc::accept4(
                    fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if r >= 0 {
                self.complete(ud, r, F_MORE);
                continue;
            }
            match errno() {
                libc::EAGAIN => return true,
                libc::EINTR | libc::ECONNABORTED => continue,
                e => {
                    self.complete(ud, -e, 0);
                    return false;
                }
            }
        }
        true
    }

    fn run_recv(&mut self, fd: RawFd, ud: u64, multishot: bool) -> bool {
        let more = if multishot { F_MORE } else { 0 };
        for _ in 0..BURST {
            let Some(bid) = self.free.pop() else {
                self.complete(ud, -libc::ENOBUFS, 0);
                return false;
            };
            let size = self.recv_size;
            let buf = self.recv[bid as usize * size..][..size].as_mut_ptr();
            // SAFETY: `buf` is this engine's receive buffer `bid`, `size`
            // bytes, handed to nobody else until this completion.
            let r = unsafe { libc::recv(fd, buf.cast(), size, libc::MSG_DONTWAIT) };
            if r > 0 {
                let flags = F_BUFFER | (bid as u32) << BUFFER_SHIFT | more;
                self.complete(ud, r as i32, flags);
                if !multishot {
                    return false;
                }
                if (r as usize) < size {
                    // Most likely drained; a level-triggered wait says if not.
                    return true;
                }
                continue;
            }
            self.free.push(bid);
            if r < 0 && matches!(errno(), libc::EAGAIN | libc::EINTR) {
                return true;
            }
            self.complete(ud, res(r), 0);
            return false;
        }
        true
    }

    /// Ends a waiting socket operation or a timer with `-ECANCELED`;
    /// `false` if there is none by that user data.
    fn cancel(&mut self, target: u64) -> bool {
        if let Some(fd) = self.place.remove(&target) {
            if let Some(w) = self.fds.get_mut(&fd) {
                w.ins.retain(|&(ud, _)| ud != target);
                w.outs.retain(|&(ud, _)| ud != target);
            }
            self.update(fd);
            self.complete(target, -libc::ECANCELED, 0);
            return true;
        }
        if let Some(i) = self.timers.iter().position(|&(_, ud)| ud == target) {
            self.timers.swap_remove(i);
            self.complete(target, -libc::ECANCELED, 0);
            return true;
        }
        false
    }

    fn close(&mut self, fd: RawFd) -> i32 {
        if let Some(w) = self.fds.remove(&fd) {
            if w.mask != 0 {
                let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0);
            }
            // The worker cancels what waits before it closes; anything
            // left fails as the ring's would.
            for (ud, _) in w.ins {
                self.place.remove(&ud);
                self.complete(ud, -libc::ECANCELED, 0);
            }
            for (ud, _) in w.outs {
                self.place.remove(&ud);
                self.complete(ud, -libc::ECANCELED, 0);
            }
        }
        // SAFETY: the worker hands the descriptor over to be closed.
        res(unsafe { libc::close(fd) } as isize)
    }

    /// Carries out `sub` (the link checked by the caller).
    ///
    /// # Safety
    /// As for [`Engine::push`].
    unsafe fn start(&mut self, sub: Sub, ud: u64) {
        match sub {
            Sub::Accept { fd } => {
                // The ring needs no non-blocking listener; readiness does
                // (another worker may take the connection first).
                // SAFETY: plain fcntl on the worker's listener.
                unsafe {
                    let fl = libc::fcntl(fd, libc::F_GETFL);
                    libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                }
                self.wait_in(fd, ud, In::Accept)
            }
            Sub::Recv { fd, multishot } => self.wait_in(fd, ud, In::Recv { multishot }),
            Sub::ReadEvent { fd, buf } => self.wait_in(fd, ud, In::ReadEvent { buf }),
            Sub::Poll {
                fd,
                mask,
                multishot,
            } => {
                if mask & libc::POLLOUT as u32 != 0 {
                    self.wait_out(fd, ud, Out::Poll);
                } else {
                    self.wait_in(fd, ud, In::Poll { multishot });
                }
            }
            Sub::Send {
                fd,
                buf,
                len,
                flags,
            } => self.send(fd, ud, Out::Send { buf, len, flags }),
            Sub::SendMsg { fd, msg, flags } => self.send(fd, ud, Out::SendMsg { msg, flags }),
            Sub::SendFile { fd, file, off, len } => {
                self.send(fd, ud, Out::SendFile { file, off, len })
            }
            // SAFETY: passed on from the caller.
            Sub::Disk(op) => unsafe { self.disk.submit(op, ud, &mut self.done) },
            Sub::Nop => self.complete(ud, 0, 0),
            Sub::Shutdown { fd, how } => {
                // SAFETY: plain syscall on the worker's descriptor.
                let r = unsafe { libc::shutdown(fd, how) };
                self.complete(ud, res(r as isize), 0);
            }
            Sub::Close { fd } => {
                let r = self.close(fd);
                self.complete(ud, r, 0);
            }
            Sub::Cancel { target } | Sub::PollRemove { target } | Sub::TimeoutRemove { target } => {
                let r = if self.cancel(target) {
                    0
                } else {
                    -libc::ENOENT
                };
                self.complete(ud, r, 0);
            }
            Sub::Timeout { ts } => {
                // SAFETY: the worker keeps `ts` valid until the completion.
                let d = unsafe { *ts }.duration();
                self.timers.push((Instant::now() + d, ud));
            }
        }
    }

    /// A send: now if nothing is queued before it and the socket takes
    /// it, else in order once the socket is writable.
    fn send(&mut self, fd: RawFd, ud: u64, op: Out) {
        let queued = self.fds.get(&fd).is_some_and(|w| !w.outs.is_empty());
        if !queued {
            if let Some(r) = self.try_out(fd, op) {
                self.complete(ud, r, 0);
                return;
            }
        }
        self.wait_out(fd, ud, op);
    }

    /// Pushes what a completed link released.
    fn push_released(&mut self) {
        while !self.released.is_empty() {
            for (sub, ud) in std::mem::take(&mut self.released) {
                // SAFETY: held from an earlier `push`, whose caller
                // promised the same.
                unsafe { self.push(sub, ud) };
            }
        }
    }

    /// Completes the timers that are due.
    fn fire_timers(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.timers.len() {
            if self.timers[i].0 <= now {
                let (_, ud) = self.timers.swap_remove(i);
                self.complete(ud, -libc::ETIME, 0);
            } else {
                i += 1;
            }
        }
    }

    /// Milliseconds until the next timer (rounded up), or -1.
    fn timeout_ms(&self, now: Instant) -> i32 {
        match self.timers.iter().map(|&(t, _)| t).min() {
            None => -1,
            Some(t) => {
                let d = t.saturating_duration_since(now);
                d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        }
    }
}

impl<D: Disk> Engine for Poll<D> {
    unsafe fn push(&mut self, sub: Sub, user_data: u64) {
        if let Some(on) = self.link.take() {
            if self.place.contains_key(&on) {
                self.held.insert(on, (sub, user_data));
                return;
            }
        }
        // SAFETY: passed on from the caller.
        unsafe { self.start(sub, user_data) };
        self.push_released();
    }

    unsafe fn push_linked(&mut self, sub: Sub, user_data: u64) {
        // SAFETY: passed on from the caller.
        unsafe { self.push(sub, user_data) };
        // Only the next operation waits for it (io_uring's link), and only
        // if it still waits itself.
        self.link = self.place.contains_key(&user_data).then_some(user_data);
    }

    fn wait(&mut self, out: &mut Vec<Cqe>) -> Result<(), String> {
        loop {
            let now = Instant::now();
            self.fire_timers(now);
            self.push_released();
            // Readiness is looked at on every turn, even with completions
            // ready (a response that yields with a NOP must not starve
            // the sockets), without waiting then.
            let timeout = if self.done.is_empty() {
                self.timeout_ms(now)
            } else {
                0
            };
            // SAFETY: `events` holds EVENTS entries for the kernel to fill.
            let n = unsafe {
                libc::epoll_wait(
                    self.ep.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    EVENTS as i32,
                    timeout,
                )
            };
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                return Err(format!(
                    "epoll_wait failed: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let disk_fd = self.disk.event_fd();
            for i in 0..n as usize {
                let ev = self.events[i];
                let fd = ev.u64 as RawFd;
                if Some(fd) == disk_fd {
                    self.disk.reap(&mut self.done);
                } else {
                    self.ready(fd, ev.events);
                }
            }
            self.push_released();
            if !self.done.is_empty() {
                out.extend(self.done.drain(..));
                return Ok(());
            }
        }
    }

    fn recv_buf(&self, bid: u16, len: usize) -> &[u8] {
        &self.recv[bid as usize * self.recv_size..][..len]
    }

    fn provide(&mut self, bid: u16) {
        debug_assert!(!self.free.contains(&bid), "receive buffer given back twice");
        self.free.push(bid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::disk::Inline;

    const BUFS: RecvBufs = RecvBufs {
        count: 4,
        size: 4096,
    };

    fn pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair(2) fills the two-element array.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: two new descriptors nothing else owns.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// Arms a multishot receive on `fd` as operation `ud`.
    fn receive(p: &mut Poll<Inline>, fd: RawFd, ud: u64) {
        let sub = Sub::Recv {
            fd,
            multishot: true,
        };
        // SAFETY: no memory named (the engine's own buffers).
        unsafe { p.push(sub, ud) };
    }

    /// Completions until `n` have come (each wait returns some).
    fn take(p: &mut Poll<Inline>, n: usize) -> Vec<Cqe> {
        let mut out = Vec::new();
        while out.len() < n {
            p.wait(&mut out).unwrap();
        }
        out
    }

    fn drain(fd: RawFd) -> usize {
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0;
        loop {
            // SAFETY: reads into a live buffer of its length.
            let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r <= 0 {
                return n;
            }
            n += r as usize;
        }
    }

    #[test]
    fn a_link_holds_the_next_operation_only() {
        let mut p = Poll::new(BUFS, Inline).unwrap();
        let (a, b) = pair();
        let fill = vec![7u8; 1 << 16];
        // SAFETY: sends from a live buffer until the socket is full.
        while unsafe { libc::send(a.as_raw_fd(), fill.as_ptr().cast(), fill.len(), 0) } > 0 {}
        let last = b"last";
        let fd = a.as_raw_fd();
        // SAFETY: `last` outlives the operations (completed below).
        unsafe {
            p.push_linked(
                Sub::Send {
                    fd,
                    buf: last.as_ptr(),
                    len: 4,
                    flags: 0,
                },
                1,
            );
            p.push(
                Sub::Shutdown {
                    fd,
                    how: libc::SHUT_WR,
                },
                2,
            );
            p.push(Sub::Nop, 3);
        }
        // The send waits for room, the shutdown for the send; the rest
        // of the worker's operations do not.
        assert_eq!(take(&mut p, 1), vec![(3, 0, 0)]);
        drain(b.as_raw_fd());
        let done = take(&mut p, 2);
        assert_eq!(done, vec![(1, 4, 0), (2, 0, 0)]);
    }

    #[test]
    fn a_multishot_receive_names_its_buffers_and_ends_at_eof() {
        let mut p = Poll::new(BUFS, Inline).unwrap();
        let (a, b) = pair();
        let fd = b.as_raw_fd();
        receive(&mut p, fd, 9);
        // SAFETY: sends from a live buffer.
        unsafe { libc::send(a.as_raw_fd(), b"hello".as_ptr().cast(), 5, 0) };
        let got = take(&mut p, 1);
        assert_eq!((got[0].0, got[0].1), (9, 5));
        assert!(super::super::more(got[0].2));
        let bid = super::super::buffer_id(got[0].2).expect("a buffer");
        assert_eq!(p.recv_buf(bid, 5), b"hello");
        p.provide(bid);
        drop(a);
        assert_eq!(take(&mut p, 1), vec![(9, 0, 0)], "EOF ends it");
        // A cancel of what no longer waits finds nothing.
        // SAFETY: no memory named.
        unsafe { p.push(Sub::Cancel { target: 9 }, 10) };
        assert_eq!(take(&mut p, 1), vec![(10, -libc::ENOENT, 0)]);
    }

    #[test]
    fn a_cancel_ends_a_waiting_receive() {
        let mut p = Poll::new(BUFS, Inline).unwrap();
        let (_a, b) = pair();
        let fd = b.as_raw_fd();
        receive(&mut p, fd, 5);
        // SAFETY: no memory named.
        unsafe { p.push(Sub::Cancel { target: 5 }, 6) };
        let done = take(&mut p, 2);
        assert_eq!(done, vec![(5, -libc::ECANCELED, 0), (6, 0, 0)]);
    }
}
