//! Password checks off the event loop (`auth` rules).
//!
//! A check costs milliseconds of CPU (bcrypt at cost 5 is about 2 ms), so
//! a worker never runs one: it hands the session's
//! [`AuthCheck`](spindle_core::AuthCheck) to [`Checker`], one helper
//! thread shared by all workers, run at a lower priority (nice
//! [`NICENESS`]) so that a flood of wrong passwords takes the CPU the
//! workers leave and no more. At most [`MAX_QUEUED`] checks wait for it;
//! past that a request gets a 503 with `Retry-After`. The answer comes
//! back through the worker's mailbox: a queue and an eventfd the loop
//! waits on, as listings do (`crate::lister`).
//!
//! Each worker keeps its recent successes ([`Checks`]: at most
//! [`CACHE_ENTRIES`], each for [`CACHE_TTL`]), keyed by a SHA-256 of the
//! rule's file loading (its generation, new on each reload), the user and
//! the password, never the password itself: a browser sends its
//! credentials with every request, and only the first costs a check.
//! Failures are not kept, so a password fixed in the file works at once
//! after the reload that reads it. Before any of this, a session grants
//! again the `Authorization` field it last saw granted on its connection
//! (a keyed hash of it, `spindle_core::auth::Auth::memo`), with no step
//! to the driver at all.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_core::{AuthCheck, Checked};

use crate::jobs::{JobQueue, Mailbox};

/// Checks waiting for the helper, across all workers.
pub const MAX_QUEUED: usize = 64;
/// Successes a worker remembers.
pub const CACHE_ENTRIES: usize = 1024;
/// How long a success is remembered.
pub const CACHE_TTL: Duration = Duration::from_secs(300);
/// The helper thread's nice value: below every worker.
pub const NICENESS: i32 = 10;

/// The key of a success: SHA-256 of the file loading, user and password.
type Key = [u8; 32];

fn key(check: &AuthCheck) -> Key {
    let c = &check.credentials;
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    d.update(&check.auth.generation.to_le_bytes());
    d.update(&(c.user().len() as u64).to_le_bytes());
    d.update(c.user());
    d.update(c.password());
    let mut k = [0u8; 32];
    k.copy_from_slice(d.finish().as_ref());
    k
}

struct Job {
    token: u64,
    check: AuthCheck,
    mailbox: Arc<Mailbox<(u64, bool)>>,
}

/// The helper thread and its queue.
pub struct Checker {
    queue: JobQueue<Job>,
}

impl Checker {
    /// Starts the helper (it lives as long as the process).
    pub fn start() -> Result<Arc<Checker>, String> {
        let c = Arc::new(Checker {
            queue: JobQueue::new(MAX_QUEUED),
        });
        let me = c.clone();
        std::thread::Builder::new()
            .name("spindle-auth".into())
            .spawn(move || {
                crate::sys::lower_thread_priority(NICENESS);
                me.run()
            })
            .map_err(|e| format!("password thread: {e}"))?;
        Ok(c)
    }

    fn run(&self) {
        loop {
            let job = self.queue.pop();
            let ok = job.check.run();
            job.mailbox.post((job.token, ok));
        }
    }
}

/// What [`Checks::check`] found.
pub enum Outcome {
    /// The answer now (a recent success, or `Busy`), with the check back.
    Now(AuthCheck, Checked),
    /// The helper checks it; [`Checks::take_done`] brings the answer.
    Later,
}

/// One worker's side: its mailbox, the checks it has out, and its recent
/// successes. `W` names a waiting connection (slot and generation).
pub struct Checks<W> {
    checker: Arc<Checker>,
    mailbox: Arc<Mailbox<(u64, bool)>>,
    granted: HashMap<Key, Instant>,
    /// Keys in the order they were granted (the oldest goes first).
    order: VecDeque<Key>,
    pending: HashMap<u64, (W, Key, AuthCheck)>,
    next: u64,
}

impl<W: Copy> Checks<W> {
    /// A worker's side; `efd` is the eventfd its loop waits on for the
    /// helpers.
    pub fn new(checker: Arc<Checker>, efd: Arc<OwnedFd>) -> Checks<W> {
        Checks {
            checker,
            mailbox: Arc::new(Mailbox::new(efd)),
            granted: HashMap::new(),
            order: VecDeque::new(),
            pending: HashMap::new(),
            next: 0,
        }
    }

    /// Checks credentials for `who`: at once from a recent success (or
    /// `Busy` when the helper's queue is full), else by the helper.
    pub fn check(&mut self, check: AuthCheck, who: W, now: Instant) -> Outcome {
        let k = key(&check);
        if let Some(&at) = self.granted.get(&k) {
            if now.duration_since(at) < CACHE_TTL {
                return Outcome::Now(check, Checked::Granted);
            }
            self.granted.remove(&k);
        }
        self.next += 1;
        let token = self.next;
        let job = Job {
            token,
            check: check.clone(),
            mailbox: self.mailbox.clone(),
        };
        if !self.checker.queue.push(job) {
            return Outcome::Now(check, Checked::Busy);
        }
        self.pending.insert(token, (who, k, check));
        Outcome::Later
    }

    /// The checks done since the last call, each with the connection that
    /// waits for it; successes are remembered.
    pub fn take_done(&mut self, now: Instant) -> Vec<(W, AuthCheck, Checked)> {
        let done = self.mailbox.take();
        let mut out = Vec::with_capacity(done.len());
        for (token, ok) in done {
            let Some((who, k, check)) = self.pending.remove(&token) else {
                continue;
            };
            if ok {
                self.remember(k, now);
                out.push((who, check, Checked::Granted));
            } else {
                out.push((who, check, Checked::Denied));
            }
        }
        out
    }

    fn remember(&mut self, k: Key, now: Instant) {
        if self.granted.insert(k, now).is_none() {
            self.order.push_back(k);
        }
        while self.granted.len() > CACHE_ENTRIES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.granted.remove(&old);
        }
        // Keys forgotten by expiry leave stale entries in `order`; keep it
        // bounded too.
        if self.order.len() > 2 * CACHE_ENTRIES {
            let granted = &self.granted;
            self.order.retain(|k| granted.contains_key(k));
        }
        debug_assert!(self.granted.len() <= CACHE_ENTRIES);
    }
}
