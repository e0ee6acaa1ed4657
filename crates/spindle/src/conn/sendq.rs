//! What a connection sends, in order, without copying body bytes: a queue
//! of segments, each either bytes the queue owns (a response's head,
//! HTTP/2 control frames, TLS records made by copying) or a range of one
//! of the loop's chunk buffers (file bytes read there, framed and sealed
//! in place). No I/O: the loop asks [`SendQueue::start`] for the iovecs
//! of one send, and reports what the kernel took with [`SendQueue::sent`],
//! which hands back the chunk buffers that are out.
//!
//! Invariants: segments go to the socket in the order they were pushed
//! (TLS records must: their sequence numbers are in that order); the
//! segments of a send in flight are never changed or dropped before its
//! completion; a chunk buffer goes back to its pool exactly once, after
//! the last byte of its last segment left, and only once its owner has
//! let go of it ([`SendQueue::push_buf`]'s `last`).

use std::collections::VecDeque;
use std::ops::Range;

/// Most segments one send carries (one `SENDMSG`'s iovecs).
pub const MAX_IOV: usize = 16;

/// An owned segment's capacity kept for reuse; beyond it the memory goes.
const KEEP_CAPACITY: usize = 64 * 1024;

/// An idle connection's spare capacity at most ([`SendQueue::shrink`]).
const IDLE_CAPACITY: usize = 4096;

/// The memory of the loop's chunk buffers, by index.
pub trait BufMem {
    fn mem(&self, id: u32) -> &[u8];
    fn mem_mut(&mut self, id: u32) -> &mut [u8];
}

enum Seg {
    Bytes(Vec<u8>),
    /// `range` of chunk buffer `id`; `last`: the buffer goes back to the
    /// pool once this segment is out.
    Buf {
        id: u32,
        range: Range<usize>,
        last: bool,
    },
}

impl Seg {
    fn len(&self) -> usize {
        match self {
            Seg::Bytes(b) => b.len(),
            Seg::Buf { range, .. } => range.len(),
        }
    }
}

/// One connection's bytes on their way to its socket.
#[derive(Default)]
pub struct SendQueue {
    segs: VecDeque<Seg>,
    /// Bytes of the front segment already sent.
    front_sent: usize,
    /// Segments (from the front) that the send in flight carries; 0 when
    /// none is in flight.
    inflight: usize,
    /// An emptied owned segment kept for the next bytes.
    spare: Vec<u8>,
}

impl SendQueue {
    /// Nothing in flight and nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A send is in flight.
    pub fn sending(&self) -> bool {
        self.inflight > 0
    }

    /// Segments wait behind the send in flight (or for the first send).
    pub fn waiting(&self) -> bool {
        self.len() > self.inflight
    }

    /// Segments, but an empty owned tail (one [`SendQueue::tail`] made
    /// that nothing was written to yet).
    fn len(&self) -> usize {
        let empty_tail = self.segs.len() > self.inflight
            && matches!(self.segs.back(), Some(Seg::Bytes(b)) if b.is_empty());
        self.segs.len() - usize::from(empty_tail)
    }

    /// Where new owned bytes go: the last segment if it is owned and not
    /// in flight, else a new one.
    pub fn tail(&mut self) -> &mut Vec<u8> {
        let reuse =
            matches!(self.segs.back(), Some(Seg::Bytes(_))) && self.segs.len() > self.inflight;
        if !reuse {
            self.segs
                .push_back(Seg::Bytes(std::mem::take(&mut self.spare)));
        }
        match self.segs.back_mut() {
            Some(Seg::Bytes(b)) => b,
            _ => unreachable!("the tail is owned bytes"),
        }
    }

    /// Drops an empty owned segment at the back (a tail nothing was
    /// written to).
    pub fn trim(&mut self) {
        if self.segs.len() > self.inflight {
            if let Some(Seg::Bytes(b)) = self.segs.back() {
                if b.is_empty() {
                    if let Some(Seg::Bytes(b)) = self.segs.pop_back() {
                        self.keep(b);
                    }
                }
            }
        }
    }

    /// Queues `range` of chunk buffer `id`; `last`: the buffer is the
    /// queue's from now on, and goes back once this segment is out.
    /// `false` when the queue did not take the buffer (an empty `range`
    /// that is `last`, with nothing of that buffer queued): the caller
    /// frees it.
    #[must_use]
    pub fn push_buf(&mut self, id: u32, range: Range<usize>, last: bool) -> bool {
        self.trim();
        if !range.is_empty() {
            // Records sealed end to end in one buffer: one segment.
            let open = self.segs.len() > self.inflight;
            if let Some(Seg::Buf {
                id: i,
                range: r,
                last: l,
            }) = self.segs.back_mut()
            {
                if open && *i == id && r.end == range.start && !*l {
                    r.end = range.end;
                    *l = last;
                    return true;
                }
            }
            self.segs.push_back(Seg::Buf { id, range, last });
            return true;
        }
        if !last {
            return true;
        }
        // Nothing more to send from it: its last queued segment frees it.
        for seg in self.segs.iter_mut().rev() {
            if let Seg::Buf { id: i, last, .. } = seg {
                if *i == id {
                    *last = true;
                    return true;
                }
            }
        }
        false
    }

    /// The iovecs of the next send, from the front (at most [`MAX_IOV`]
    /// segments), written to `iov`; marks them in flight. Returns how many
    /// were written (0: nothing to send, or a send is in flight).
    pub fn start(&mut self, mem: &impl BufMem, iov: &mut [libc::iovec; MAX_IOV]) -> usize {
        self.trim();
        if self.inflight > 0 {
            return 0;
        }
        let mut n = 0;
        let mut skip = self.front_sent;
        for seg in self.segs.iter().take(MAX_IOV) {
            let bytes: &[u8] = match seg {
                Seg::Bytes(b) => b,
                Seg::Buf { id, range, .. } => &mem.mem(*id)[range.clone()],
            };
            let bytes = &bytes[skip..];
            skip = 0;
            iov[n] = libc::iovec {
                iov_base: bytes.as_ptr() as *mut libc::c_void,
                iov_len: bytes.len(),
            };
            n += 1;
        }
        self.inflight = n;
        n
    }

    /// The send in flight took `n` bytes (the kernel's result, `>= 0`).
    /// Chunk buffers whose last segment is now out are pushed to `freed`.
    pub fn sent(&mut self, mut n: usize, freed: &mut Vec<u32>) {
        assert!(self.inflight > 0, "a send completed that was not started");
        self.inflight = 0;
        while let Some(seg) = self.segs.front() {
            let left = seg.len() - self.front_sent;
            if n < left {
                self.front_sent += n;
                n = 0;
                break;
            }
            n -= left;
            self.front_sent = 0;
            match self.segs.pop_front() {
                Some(Seg::Buf { id, last: true, .. }) => freed.push(id),
                Some(Seg::Bytes(b)) => self.keep(b),
                _ => {}
            }
            if n == 0 {
                break;
            }
        }
        assert_eq!(n, 0, "the kernel sent more than was given");
    }

    /// The connection is gone (nothing in flight any more): every chunk
    /// buffer the queue holds, to `freed`.
    pub fn clear(&mut self, freed: &mut Vec<u32>) {
        debug_assert_eq!(self.inflight, 0, "cleared under a send in flight");
        for seg in self.segs.drain(..) {
            if let Seg::Buf { id, last: true, .. } = seg {
                freed.push(id);
            }
        }
        self.front_sent = 0;
        self.inflight = 0;
    }

    /// An idle connection keeps no batch-sized spare.
    pub fn shrink(&mut self) {
        if self.spare.capacity() > IDLE_CAPACITY {
            self.spare = Vec::new();
        }
    }

    fn keep(&mut self, mut b: Vec<u8>) {
        if b.capacity() <= KEEP_CAPACITY && b.capacity() > self.spare.capacity() {
            b.clear();
            self.spare = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(Vec<Vec<u8>>);
    impl BufMem for Mem {
        fn mem(&self, id: u32) -> &[u8] {
            &self.0[id as usize]
        }
        fn mem_mut(&mut self, id: u32) -> &mut [u8] {
            &mut self.0[id as usize]
        }
    }

    fn iov() -> [libc::iovec; MAX_IOV] {
        [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_IOV]
    }

    /// What the iovecs of a send point at, concatenated.
    fn gather(iov: &[libc::iovec]) -> Vec<u8> {
        let mut v = Vec::new();
        for i in iov {
            // SAFETY (test): each iovec points into memory the test holds.
            v.extend_from_slice(unsafe {
                std::slice::from_raw_parts(i.iov_base as *const u8, i.iov_len)
            });
        }
        v
    }

    #[test]
    fn segments_go_in_order_and_buffers_come_back_once_out() {
        let mem = Mem(vec![b"0123456789".to_vec(), b"abcdef".to_vec()]);
        let mut q = SendQueue::default();
        q.tail().extend_from_slice(b"HEAD");
        assert!(q.push_buf(0, 2..8, true));
        q.tail().extend_from_slice(b"MID");
        assert!(q.push_buf(1, 0..6, true));
        let mut v = iov();
        let n = q.start(&mem, &mut v);
        assert_eq!(n, 4);
        assert_eq!(q.segs.len(), 4);
        assert_eq!(gather(&v[..n]), b"HEAD234567MIDabcdef");
        assert!(q.sending());
        // Nothing new starts while one is in flight; new bytes wait.
        q.tail().extend_from_slice(b"T");
        assert_eq!(q.start(&mem, &mut v), 0);
        let mut freed = Vec::new();
        q.sent(7, &mut freed);
        assert!(freed.is_empty(), "buffer 0 is not all out");
        let n = q.start(&mem, &mut v);
        assert_eq!(gather(&v[..n]), b"567MIDabcdefT");
        q.sent(3 + 3 + 6, &mut freed);
        assert_eq!(freed, vec![0, 1]);
        let n = q.start(&mem, &mut v);
        assert_eq!(gather(&v[..n]), b"T");
        q.sent(1, &mut freed);
        assert!(q.is_empty());
    }

    #[test]
    fn a_buffer_not_let_go_is_never_freed_and_clear_frees_the_rest() {
        let mem = Mem(vec![vec![7; 8], vec![9; 8]]);
        let mut q = SendQueue::default();
        assert!(q.push_buf(0, 0..3, false));
        assert!(q.push_buf(0, 4..8, true));
        assert!(q.push_buf(1, 0..8, true));
        let mut v = iov();
        let n = q.start(&mem, &mut v);
        assert_eq!(n, 3);
        let mut freed = Vec::new();
        q.sent(3, &mut freed);
        assert!(freed.is_empty());
        q.clear(&mut freed);
        assert_eq!(freed, vec![0, 1]);
    }

    #[test]
    fn an_empty_last_range_frees_the_buffer_after_its_queued_bytes() {
        let mem = Mem(vec![vec![1; 4], vec![2; 4]]);
        let mut q = SendQueue::default();
        assert!(q.push_buf(0, 0..4, false));
        assert!(q.push_buf(0, 4..4, true), "marks the queued segment last");
        assert!(
            !q.push_buf(1, 0..0, true),
            "nothing queued: the caller frees"
        );
        let mut v = iov();
        assert_eq!(q.start(&mem, &mut v), 1);
        let mut freed = Vec::new();
        q.sent(4, &mut freed);
        assert_eq!(freed, vec![0]);
        assert!(q.is_empty());
    }

    #[test]
    fn an_empty_tail_is_neither_waiting_nor_sent() {
        let mem = Mem(vec![]);
        let mut q = SendQueue::default();
        q.tail();
        assert!(q.is_empty() && !q.waiting());
        let mut v = iov();
        assert_eq!(q.start(&mem, &mut v), 0);
        q.tail().extend_from_slice(b"x");
        assert!(q.waiting());
    }

    #[test]
    fn adjacent_ranges_of_one_buffer_are_one_segment() {
        let mem = Mem(vec![vec![1; 64]]);
        let mut q = SendQueue::default();
        assert!(q.push_buf(0, 0..10, false));
        assert!(q.push_buf(0, 10..20, false));
        assert!(q.push_buf(0, 30..40, true));
        assert_eq!(q.segs.len(), 2);
        let mut v = iov();
        assert_eq!(q.start(&mem, &mut v), 2);
        assert_eq!(v[0].iov_len, 20);
    }

    #[test]
    fn at_most_max_iov_segments_per_send() {
        let mem = Mem(vec![vec![1; 64]]);
        let mut q = SendQueue::default();
        for i in 0..(MAX_IOV + 3) {
            // Gaps between them, so that none coalesce.
            assert!(q.push_buf(0, 2 * i..2 * i + 1, i == MAX_IOV + 2));
        }
        let mut v = iov();
        assert_eq!(q.start(&mem, &mut v), MAX_IOV);
        let mut freed = Vec::new();
        q.sent(MAX_IOV, &mut freed);
        assert!(freed.is_empty());
        assert_eq!(q.start(&mem, &mut v), 3);
        q.sent(3, &mut freed);
        assert_eq!(freed, vec![0]);
    }
}
