//! The event loop: setting up the epoll set, `epoll_wait`, dispatching
//! each event to its listener, connection or the mover, and the ready list
//! that gives each connection with work left a bounded turn.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use super::{
    Conn, Mover, Worker, MAX_EVENTS, RECV_BUF_SIZE, TOKEN_HELPERS, TOKEN_LISTENER, TOKEN_MOVER,
    TOKEN_SHUTDOWN,
};
use crate::conn::policy::TICK;
use crate::conn::{Phase, Serving, Slots, Steps, Ticket, WorkerContext};
use crate::net;

pub(super) fn epoll_add(epfd: RawFd, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: `ev` is a live epoll_event the kernel copies during the call.
    if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl<M: Mover> Worker<M> {
    pub(super) fn new(mut ctx: WorkerContext, mover: M) -> Result<Worker<M>, String> {
        // sendfile(2) has no MSG_NOSIGNAL: a peer that resets must give
        // EPIPE, not kill the process. (Rust binaries ignore SIGPIPE
        // already; this keeps it true when the crate is used as a library.)
        // SAFETY: installs SIG_IGN, no handler code involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // SAFETY: plain epoll_create1(2).
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(format!("epoll_create1: {}", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let epfd = unsafe { OwnedFd::from_raw_fd(ep) };
        let listeners = std::mem::take(&mut ctx.listeners);
        let add = |fd: RawFd, events: i32, token: u64| {
            epoll_add(ep, fd, events as u32, token).map_err(|e| format!("epoll_ctl: {e}"))
        };
        for (i, l) in listeners.iter().enumerate() {
            net::set_nonblocking(l.as_raw_fd(), true).map_err(|e| format!("listener: {e}"))?;
            add(
                l.as_raw_fd(),
                libc::EPOLLIN | libc::EPOLLET,
                TOKEN_LISTENER | i as u64,
            )?;
        }
        add(ctx.shutdown.eventfd, libc::EPOLLIN, TOKEN_SHUTDOWN)?;
        if let Some(fd) = mover.completion_fd() {
            add(fd, libc::EPOLLIN, TOKEN_MOVER)?;
        }
        let max_conns = ctx.cfg.max_connections_per_worker();
        let serve = Serving::new(ctx)?;
        add(serve.helpers_eventfd(), libc::EPOLLIN, TOKEN_HELPERS)?;
        let now = Instant::now();
        Ok(Worker {
            serve,
            mover,
            epfd,
            conns: Slots::new(max_conns),
            accept_ready: vec![true; listeners.len()],
            listeners,
            accept_backoff: Default::default(),
            accept_paused: false,
            ready: VecDeque::new(),
            done: Vec::new(),
            rbuf: vec![0u8; RECV_BUF_SIZE].into_boxed_slice(),
            streams: 0,
            now,
            next_tick: now + TICK,
        })
    }

    pub(super) fn event_loop(&mut self) -> Result<(), String> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        loop {
            if self.serve.draining && self.conns.live() == 0 {
                // Reads still in flight belong to nobody now; wait for them
                // (their buffers are the mover's) until the drain deadline.
                let late = self.serve.drain_deadline.is_some_and(|d| self.now >= d);
                if self.mover.in_flight() == 0 || late {
                    return Ok(());
                }
            }
            let timeout = if !self.ready.is_empty() || self.can_accept_more() {
                0
            } else {
                let until = self.next_tick.saturating_duration_since(Instant::now());
                until.as_millis().min(TICK.as_millis()) as i32 + 1
            };
            // SAFETY: `events` is a live buffer of MAX_EVENTS entries the
            // kernel fills during the call.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    MAX_EVENTS as i32,
                    timeout,
                )
            };
            self.now = Instant::now();
            self.serve.files.batch();
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(format!("epoll_wait failed: {e}"));
                }
            }
            for ev in &events[..n.max(0) as usize] {
                let (token, bits) = (ev.u64, ev.events);
                self.on_event(token, bits);
            }
            // One turn for each connection that still had work.
            for _ in 0..self.ready.len() {
                let Some(t) = self.ready.pop_front() else {
                    break;
                };
                if let Some(c) = self.live_conn(t) {
                    c.queued = false;
                    self.service(t);
                }
            }
            if self.now >= self.next_tick {
                self.next_tick = self.now + TICK;
                self.on_tick();
            }
            self.accept_all();
            self.wake_waiters();
        }
    }

    fn on_event(&mut self, token: u64, bits: u32) {
        match token {
            TOKEN_SHUTDOWN => self.on_wake(),
            TOKEN_MOVER => self.on_completions(),
            TOKEN_HELPERS => self.on_helpers(),
            t if t & TOKEN_LISTENER != 0 => {
                let i = (t & 0xFFFF_FFFF) as usize;
                self.accept_ready[i] = true;
                self.accept_some(i);
            }
            t => {
                let who = Ticket::from_token(t);
                let Some(c) = self.live_conn(who) else { return };
                let err = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
                if bits & (libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32 | err) != 0 {
                    c.can_read = true;
                }
                if bits & (libc::EPOLLOUT as u32 | err) != 0 {
                    c.can_write = true;
                }
                self.service(who);
            }
        }
    }

    pub(super) fn live_conn(&mut self, who: Ticket) -> Option<&mut Conn<M::State>> {
        self.conns.get(who)
    }

    pub(super) fn conn(&mut self, who: Ticket) -> &mut Conn<M::State> {
        self.conns.get(who).expect("live connection")
    }

    pub(super) fn enqueue(&mut self, who: Ticket) {
        let c = self.conn(who);
        if !c.queued {
            c.queued = true;
            self.ready.push_back(who);
        }
    }

    /// Does what a connection can do now.
    pub(super) fn service(&mut self, who: Ticket) {
        let c = self.conn(who);
        if c.proto.is_h2() {
            return self.h2_service(who);
        }
        if c.can_write && c.tls.as_ref().is_some_and(|t| t.pending()) {
            // TLS records waiting for socket space go first.
            let fd = c.fd.as_raw_fd();
            match c.tls.as_mut().expect("tls").flush(fd) {
                Ok(true) => {}
                Ok(false) => c.can_write = false,
                Err(_) => {
                    self.close(who);
                    return;
                }
            }
        }
        match self.conn(who).life.phase {
            Phase::Reading => self.drive(who),
            Phase::Opening => {
                self.take_pipelined(who);
            }
            Phase::Sending => {
                if self.take_pipelined(who) {
                    self.pump(who);
                }
            }
            Phase::Lingering => self.linger(who),
            Phase::Closing => unreachable!("the epoll loop closes at once"),
        }
    }
}
