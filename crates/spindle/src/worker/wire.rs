//! A connection's bytes on their way to its socket: the connection
//! layer's [`SendQueue`] (owned bytes and ranges of chunk buffers, in
//! order) and the memory of the one send in flight, a `SEND` for one
//! segment or a `SENDMSG` for several.

use crate::io::Sub;

use super::pool::Pool;
use crate::conn::sendq::{BufMem, SendQueue, MAX_IOV};

/// The send queue and its iovecs; boxed with its owner, so the iovecs
/// and the message header stay put while the kernel reads them.
pub(super) struct Wire {
    pub(super) q: SendQueue,
    iov: [libc::iovec; MAX_IOV],
    msg: libc::msghdr,
}

impl BufMem for Pool {
    fn mem(&self, id: u32) -> &[u8] {
        self.bufs[id as usize].get()
    }

    fn mem_mut(&mut self, id: u32) -> &mut [u8] {
        self.bufs[id as usize].get_mut()
    }
}

impl Wire {
    pub(super) fn new() -> Wire {
        Wire {
            q: SendQueue::default(),
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; MAX_IOV],
            // SAFETY: msghdr is plain data; all-zero is an empty header.
            msg: unsafe { std::mem::zeroed() },
        }
    }

    /// The operation that sends the queue's next bytes, or None when a
    /// send is in flight or nothing waits. The queue's segments and these
    /// iovecs are not touched until its completion ([`SendQueue::sent`]).
    pub(super) fn next_send(&mut self, fd: i32, pool: &Pool) -> Option<Sub> {
        let n = self.q.start(pool, &mut self.iov);
        if n == 0 {
            return None;
        }
        if n == 1 {
            let v = self.iov[0];
            return Some(Sub::Send {
                fd,
                buf: v.iov_base as *const u8,
                len: v.iov_len as u32,
                flags: libc::MSG_NOSIGNAL,
            });
        }
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = n as _;
        Some(Sub::SendMsg {
            fd,
            msg: &self.msg,
            flags: libc::MSG_NOSIGNAL as u32,
        })
    }
}
