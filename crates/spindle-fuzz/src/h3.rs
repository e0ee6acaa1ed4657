//! The `h3` check: any bytes as one HTTP/3 stream's frames, received in
//! pieces and whole, and as one QPACK field section.

use spindle_core::h3::frame::{
    self, data_header, put_goaway, put_settings, Frame, Parsed, MAX_FRAME_PAYLOAD, MAX_HEADER_LEN,
    MAX_SETTINGS,
};
use spindle_core::h3::qpack::{self, Decoder, QpackError, FIELD_OVERHEAD, MAX_FIELDS};
use spindle_core::h3::ErrorCode;

use crate::{num, xorshift};

/// The field section limit of a tight configuration (byte 0, bit 0).
const SMALL_SECTION: usize = 256;

/// Pieces one stream is received in at most: more than an input's bytes
/// (a piece is at least one), so the bound is never what stops the loop.
const MAX_PIECES: usize = 1 << 20;

/// What a stream's frames were, one line each, for comparing two
/// readings of the same bytes.
type Log = Vec<String>;

/// The input as the bytes of one stream, parsed frame by frame as a
/// driver would (DATA and unknown payloads passed over as they arrive,
/// every field section decoded), and as a field section alone.
///
/// Input: byte 0 picks the field section limit (bit 0: 256 bytes, else
/// `MAX_FIELD_SECTION_SIZE`), bytes 1-2 seed the split of the stream into
/// pieces of 1 to 64 bytes; the rest is the stream.
///
/// Invariants: no panic; `parse` never takes more bytes than it is given
/// nor none, and asks for more only while the buffer is shorter than the
/// largest frame it buffers; the stream in pieces reads as the stream
/// whole; each frame re-encoded parses to itself; SETTINGS carry no
/// HTTP/2 identifier, no identifier twice, at most `MAX_SETTINGS`; a
/// decoded section is within the limit and `MAX_FIELDS`, its size is what
/// its fields add up to, and its fields encoded again (names lowercased)
/// decode to the same list of the same size; errors carry QPACK's or
/// HTTP/3's codes as the RFCs give them.
pub fn h3(data: &[u8]) {
    let conf = data.first().copied().unwrap_or(0);
    let split = num(data, 1, 2) | 1;
    let stream = data.get(3..).unwrap_or(&[]);
    let limit = if conf & 1 != 0 {
        SMALL_SECTION
    } else {
        qpack::MAX_FIELD_SECTION_SIZE
    };
    let mut d = Decoder::new();
    let whole = frames(stream, None, &mut d, limit);
    let pieces = frames(stream, Some(split), &mut d, limit);
    assert_eq!(whole, pieces, "the stream in pieces reads otherwise");
    section(&mut d, stream, limit);
}

/// Reads `stream` as a driver would, in pieces drawn from `split` (or
/// whole): the frames it holds, each checked, and how it ends.
fn frames(stream: &[u8], mut split: Option<u64>, d: &mut Decoder, limit: usize) -> Log {
    let mut log = Log::new();
    let mut buf: Vec<u8> = Vec::new();
    // Payload bytes (DATA's, an unknown frame's) still to pass over.
    let mut skip = 0u64;
    let mut rest = stream;
    for _ in 0..MAX_PIECES {
        let n = match split.as_mut() {
            Some(s) => {
                *s = xorshift(*s);
                (1 + *s as usize % 64).min(rest.len())
            }
            None => rest.len(),
        };
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        match drain(&mut buf, &mut skip, &mut log, d, limit) {
            Some(end) => {
                log.push(end);
                return log;
            }
            None if rest.is_empty() => {
                log.push(format!("end: {} buffered, {skip} to skip", buf.len()));
                return log;
            }
            None => {}
        }
    }
    panic!("{MAX_PIECES} pieces for {} bytes", stream.len());
}

/// Parses the frames `buf` holds, taking them out of it; `Some` when the
/// stream ends here (a connection error).
fn drain(
    buf: &mut Vec<u8>,
    skip: &mut u64,
    log: &mut Log,
    d: &mut Decoder,
    limit: usize,
) -> Option<String> {
    loop {
        let k = (*skip).min(buf.len() as u64);
        buf.drain(..k as usize);
        *skip -= k;
        if *skip > 0 {
            return None;
        }
        match frame::parse(buf) {
            Parsed::NeedMore => {
                let most = MAX_HEADER_LEN + MAX_FRAME_PAYLOAD as usize;
                assert!(buf.len() < most, "{} bytes buffered, more asked", buf.len());
                return None;
            }
            Parsed::Error(e) => return Some(format!("error {e:?}")),
            Parsed::Frame(f, n) => {
                assert!(n > 0 && n <= buf.len(), "took {n} of {}", buf.len());
                check_frame(&f, n, d, limit);
                log.push(format!("{f:?} +{n}"));
                *skip = f.payload_follows();
                buf.drain(..n);
            }
        }
    }
}

/// One frame: its encoding read back, its settings valid, its field
/// section checked.
fn check_frame(f: &Frame<'_>, took: usize, d: &mut Decoder, limit: usize) {
    let mut again = Vec::new();
    match *f {
        Frame::Data { len } => {
            let h = data_header(len);
            assert_eq!(
                frame::parse(h.as_bytes()),
                Parsed::Frame(*f, h.as_bytes().len())
            );
        }
        Frame::Settings(s) => {
            let pairs: Vec<(u64, u64)> = s.iter().collect();
            assert!(pairs.len() <= MAX_SETTINGS);
            for (i, &(id, _)) in pairs.iter().enumerate() {
                assert!(!frame::setting::HTTP2_ONLY.contains(&id));
                assert!(pairs[..i].iter().all(|&(k, _)| k != id), "{id} twice");
            }
            put_settings(&mut again, &pairs);
            match frame::parse(&again) {
                Parsed::Frame(Frame::Settings(t), _) => {
                    assert!(t.iter().eq(pairs.iter().copied()))
                }
                other => panic!("SETTINGS read back as {other:?}"),
            }
        }
        Frame::Goaway(id) => {
            put_goaway(&mut again, id);
            assert_eq!(frame::parse(&again), Parsed::Frame(*f, again.len()));
        }
        Frame::Headers(s) | Frame::PushPromise { section: s, .. } => {
            assert!(s.len() < took);
            section(d, s, limit);
        }
        Frame::CancelPush(_) | Frame::MaxPushId(_) | Frame::Unknown { .. } => {}
    }
}

/// A field section: decoded within its limits, or refused with a QPACK
/// error; decoded, it encodes back to itself.
fn section(d: &mut Decoder, s: &[u8], limit: usize) {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let r = d.decode(s, limit, &mut |f| {
        fields.push((f.name.to_ascii_lowercase(), f.value.to_vec()))
    });
    let size = match r {
        Ok(size) => size,
        Err(e) => {
            let want = match e {
                QpackError::TooLarge => ErrorCode::ExcessiveLoad,
                _ => ErrorCode::QpackDecompressionFailed,
            };
            assert_eq!(e.code(), want);
            return;
        }
    };
    assert!(size <= limit, "a section of {size} bytes past {limit}");
    assert!(fields.len() <= MAX_FIELDS);
    let counted: usize = fields
        .iter()
        .map(|(n, v)| n.len() + v.len() + FIELD_OVERHEAD)
        .sum();
    assert_eq!(size, counted);
    let mut out = Vec::new();
    qpack::encode_section_prefix(&mut out);
    for (n, v) in &fields {
        match status(n, v) {
            Some(code) => qpack::encode_status(code, &mut out),
            None => qpack::encode_field(n, v, &mut out),
        }
    }
    let mut again = Vec::new();
    let size_again = d
        .decode(&out, limit, &mut |f| {
            again.push((f.name.to_vec(), f.value.to_vec()))
        })
        .expect("our encoding of a section decodes");
    assert_eq!(again, fields, "a section encoded again decodes otherwise");
    assert_eq!(size_again, size);
}

/// A `:status` field's code, when its value is three digits from 100.
fn status(name: &[u8], value: &[u8]) -> Option<u16> {
    if name != b":status" || value.len() != 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let code = std::str::from_utf8(value).ok()?.parse().ok()?;
    (100..1000).contains(&code).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of every frame a server sends, with a reserved one, reads
    /// the same in pieces of every size as whole.
    #[test]
    fn a_stream_of_every_frame_reads_the_same_in_pieces() {
        let mut s = Vec::new();
        frame::put_our_settings(&mut s);
        frame::put_headers(&mut s, &[0, 0, 0xd1, 0xd7, 0xc1]);
        s.extend_from_slice(data_header(3).as_bytes());
        s.extend_from_slice(b"abc");
        s.extend_from_slice(&[0x21, 2, b'g', b'g']);
        put_goaway(&mut s, 8);
        let mut d = Decoder::new();
        let whole = frames(&s, None, &mut d, 1000);
        assert_eq!(whole.len(), 6, "{whole:?}");
        for seed in 1..50 {
            assert_eq!(frames(&s, Some(seed), &mut d, 1000), whole);
        }
    }
}
