//! Where each record's payload lands in a send buffer ([`RecordLayout`]),
//! so that a disk read fills records in place for
//! [`TlsLink::seal_in_place`](super::TlsLink::seal_in_place).

use std::ops::Range;

use super::{TlsLink, MAX_PLAINTEXT};

/// Where records go in a send buffer so that a disk read (one iovec per
/// record payload) lands file bytes straight in place for
/// [`TlsLink::seal_in_place`].
///
/// Packed (`align` 1, for reads through the page cache): the sealed
/// records lie end to end, ready for one `SEND`. Aligned (`align` the
/// `O_DIRECT` block, for direct reads): each payload starts at a multiple
/// of `align` and carries a multiple of it (but the file's last), so every
/// iovec suits `O_DIRECT`; the records then have gaps between them and go
/// out by `SENDMSG`, one iovec per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    /// Plaintext of each record before the file bytes: 0 for HTTP/1.1, 9
    /// for HTTP/2's DATA frame header.
    pub prefix: usize,
    pub header_room: usize,
    pub tail_room: usize,
    /// 1 (packed), or the alignment of every payload's start and length.
    pub align: usize,
}

/// One record's place in a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSlot {
    /// The whole record, header to tag: pass `&mut buf[record]` to
    /// [`TlsLink::seal_in_place`].
    pub record: Range<usize>,
    /// Plaintext bytes (prefix and payload): `seal_in_place`'s `len`.
    pub plaintext_len: usize,
    /// Where the file bytes go (an iovec of the read).
    pub payload: Range<usize>,
}

impl RecordLayout {
    /// The packed layout for `link` (after its handshake) with `prefix`.
    pub fn for_link(link: &TlsLink, prefix: usize) -> RecordLayout {
        RecordLayout {
            prefix,
            header_room: link.header_room(),
            tail_room: link.tail_room(),
            align: 1,
        }
    }

    /// This layout with payloads aligned to `align` (a power of two).
    pub fn aligned(self, align: usize) -> RecordLayout {
        RecordLayout { align, ..self }
    }

    /// Most file bytes one record carries.
    pub fn max_payload(&self) -> usize {
        let most = MAX_PLAINTEXT.saturating_sub(self.prefix);
        most - most % self.align.max(1)
    }

    /// The buffer bytes that `payload` file bytes take, in full records
    /// (aligned: up to the end of the last payload rounded up to `align`,
    /// which an `O_DIRECT` read of the file's tail may fill).
    pub fn buffer_len(&self, payload: usize) -> usize {
        self.slots(usize::MAX, payload).last().map_or(0, |s| {
            s.record
                .end
                .max(s.payload.end.next_multiple_of(self.align.max(1)))
        })
    }

    /// The records that fit in `buf_len` bytes, carrying at most
    /// `payload_max` file bytes in all, each full but the last.
    pub fn slots(&self, buf_len: usize, payload_max: usize) -> RecordSlots {
        RecordSlots {
            layout: *self,
            at: 0,
            buf_len,
            payload_left: payload_max,
        }
    }
}

/// The packed records in a buffer of `buf_len` bytes, each full but the
/// last (shorter if the buffer ends first).
pub fn record_slots(
    buf_len: usize,
    prefix: usize,
    header_room: usize,
    tail_room: usize,
) -> RecordSlots {
    let layout = RecordLayout {
        prefix,
        header_room,
        tail_room,
        align: 1,
    };
    layout.slots(buf_len, usize::MAX)
}

/// The iterator of [`RecordLayout::slots`].
#[derive(Debug, Clone)]
pub struct RecordSlots {
    layout: RecordLayout,
    at: usize,
    buf_len: usize,
    payload_left: usize,
}

impl Iterator for RecordSlots {
    type Item = RecordSlot;

    fn next(&mut self) -> Option<RecordSlot> {
        let l = &self.layout;
        let start = self
            .at
            .checked_add(l.header_room + l.prefix)?
            .checked_next_multiple_of(l.align.max(1))?;
        let room = self.buf_len.checked_sub(start)?.checked_sub(l.tail_room)?;
        let mut payload = room.min(l.max_payload()).min(self.payload_left);
        if payload < self.payload_left && payload < l.max_payload() {
            // Cut short by the buffer: keep an aligned read aligned.
            payload -= payload % l.align.max(1);
        }
        if payload == 0 {
            return None;
        }
        let slot = RecordSlot {
            record: start - l.prefix - l.header_room..start + payload + l.tail_room,
            plaintext_len: l.prefix + payload,
            payload: start..start + payload,
        };
        self.at = slot.record.end;
        self.payload_left -= payload;
        Some(slot)
    }
}
