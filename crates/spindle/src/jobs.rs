//! What helper threads and workers share: a bounded queue of jobs
//! ([`JobQueue`]) and a worker's mailbox for the results ([`Mailbox`]: a
//! list and the eventfd its loop waits on). Listings (`lister.rs`) and
//! password checks (`passwords.rs`) use both; a worker's two mailboxes
//! share its one eventfd.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

/// Jobs waiting for helper threads, at most `max` of them.
pub struct JobQueue<J> {
    queue: Mutex<VecDeque<J>>,
    ready: Condvar,
    max: usize,
}

impl<J> JobQueue<J> {
    pub fn new(max: usize) -> JobQueue<J> {
        JobQueue {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            max,
        }
    }

    /// Queues a job for a helper; false (and the job dropped) when `max`
    /// wait already.
    pub fn push(&self, job: J) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= self.max {
            return false;
        }
        q.push_back(job);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// The next job, waiting for one (a helper thread's loop).
    pub fn pop(&self) -> J {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(j) = q.pop_front() {
                return j;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Where helpers put a worker's finished jobs; the eventfd becomes
/// readable when there are some. The eventfd is shared (`Arc`), so that a
/// helper finishing after the worker is gone never writes to a closed or
/// reused descriptor.
pub struct Mailbox<T> {
    done: Mutex<Vec<T>>,
    efd: Arc<OwnedFd>,
}

impl<T> Mailbox<T> {
    pub fn new(efd: Arc<OwnedFd>) -> Mailbox<T> {
        Mailbox {
            done: Mutex::new(Vec::new()),
            efd,
        }
    }

    /// A helper's result, and the worker woken.
    pub fn post(&self, result: T) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(result);
        crate::sys::signal_eventfd(self.efd.as_raw_fd());
    }

    /// The results posted so far. The eventfd is read first, so a result
    /// posted after this call wakes the loop again.
    pub fn take(&self) -> Vec<T> {
        crate::sys::drain_eventfd(self.efd.as_raw_fd());
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
