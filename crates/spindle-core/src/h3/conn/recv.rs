//! The receiving side of [`H3Conn`]: what arrives on each of the client's
//! streams, frame by frame, and the client's resets and stops.

use super::*;
use crate::h3::frame::{decode_varint, Frame, Parsed, StreamKind, UniStream};
use crate::h3::qpack::QpackError;
use crate::limits;
use crate::stream_request::{request, Reject};

/// Which stream frames are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    Control,
    Request(u64),
}

/// The one byte the client's QPACK encoder stream may carry: Set Dynamic
/// Table Capacity (`001xxxxx`, RFC 9204 §4.3.1) to 0.
const SET_CAPACITY_0: u8 = 0x20;

impl H3Conn {
    /// Takes bytes that arrived on the client's stream `stream_id` (a
    /// request stream or one of its unidirectional streams), `fin` when
    /// the stream ends after them; returns how many it took. All are
    /// taken, and the FIN with them, unless the events or `out` passed
    /// their bounds: then the rest, and the FIN, must be given again once
    /// the driver has drained them. A FIN with no bytes is always taken.
    /// After `Close`, everything is taken and ignored.
    ///
    /// # Panics
    ///
    /// When `stream_id` is not a client-initiated stream's (RFC 9000
    /// §2.1): the client sends nothing on ours.
    pub fn recv(&mut self, stream_id: u64, bytes: &[u8], fin: bool) -> usize {
        assert_eq!(stream_id & 1, 0, "{stream_id} is not the client's");
        if self.is_closed() {
            return bytes.len();
        }
        let n = if stream_id & 2 == 0 {
            self.recv_request(stream_id, bytes, fin)
        } else {
            self.recv_uni(stream_id, bytes, fin)
        };
        debug_assert_eq!(self.partial, self.count_partial());
        if self.is_closed() {
            bytes.len()
        } else {
            n
        }
    }

    /// The client reset its side of `stream_id` (RESET_STREAM with
    /// `code`). A request stream's request is cancelled (§4.1.1): its
    /// response, if any, is dropped and our side reset with
    /// H3_REQUEST_CANCELLED. A critical stream's reset is
    /// H3_CLOSED_CRITICAL_STREAM (§6.2.1, RFC 9204 §4.2); any other
    /// unidirectional stream is forgotten. (Nothing here depends on the
    /// client's `code`.)
    pub fn stream_reset(&mut self, stream_id: u64, code: u64) {
        let _ = code;
        assert_eq!(stream_id & 1, 0, "{stream_id} is not the client's");
        if self.is_closed() {
            return;
        }
        if stream_id & 2 != 0 {
            match self.unis.remove(&stream_id) {
                Some(Uni::Type { .. }) => {}
                Some(_) => self.conn_error(ErrorCode::ClosedCriticalStream),
                // Nothing arrived on it yet: it is done before it began.
                None => {
                    self.uni_ids.arrive(stream_id, MAX_UNI_STREAMS);
                }
            }
            return;
        }
        let known = self.streams.contains_key(&stream_id)
            || self.bidi.arrive(stream_id, MAX_CONCURRENT_STREAMS) == Arrival::New;
        if known {
            self.stream_error(stream_id, ErrorCode::RequestCancelled);
        }
    }

    /// The client asked us to stop sending on our stream `stream_id`
    /// (STOP_SENDING; quinn-proto answers it with RESET_STREAM itself,
    /// RFC 9000 §3.5). On a request stream the response is dropped, as
    /// the client no longer wants it; on our control stream it is
    /// H3_CLOSED_CRITICAL_STREAM (§6.2.1). (Nothing here depends on the
    /// client's `code`.)
    pub fn stop_sending(&mut self, stream_id: u64, code: u64) {
        let _ = code;
        if self.is_closed() {
            return;
        }
        if Some(stream_id) == self.control_id {
            return self.conn_error(ErrorCode::ClosedCriticalStream);
        }
        if self.streams.contains_key(&stream_id) {
            self.stream_error(stream_id, ErrorCode::RequestCancelled);
        } else if let Some(o) = self.outs.remove(&stream_id) {
            // A response whose FIN is queued: the rest goes nowhere.
            self.out_len -= o.bytes.len() - o.start;
        }
    }

    // Request streams (§4.1).

    fn recv_request(&mut self, id: u64, bytes: &[u8], fin: bool) -> usize {
        if self.streams.get(&id).is_some_and(|s| s.recv == Recv::Ended) {
            // The FIN again (QUIC allows no bytes past it).
            debug_assert!(bytes.is_empty(), "stream {id}: bytes after the FIN");
            return bytes.len();
        }
        if !self.streams.contains_key(&id) {
            if self.backed_up() && !bytes.is_empty() {
                return 0;
            }
            if !self.admit(id) {
                return bytes.len();
            }
        }
        let s = self.streams.get_mut(&id).expect("admitted");
        let mut reader = std::mem::take(&mut s.reader);
        let n = self.read_frames(On::Request(id), &mut reader, bytes);
        if n == bytes.len() && fin && self.streams.contains_key(&id) {
            self.request_fin(id, &reader);
        }
        let closed = self.is_closed();
        match self.streams.get_mut(&id) {
            Some(s) => s.reader = reader,
            None if closed => {}
            None => self.partial -= reader.buf.len(),
        }
        self.settle(id);
        n
    }

    /// A stream not in the map: opens it if it is new and there is room;
    /// refuses it (H3_REQUEST_REJECTED, §4.1.1) if there is none or our
    /// GOAWAY excluded it. False when it is not (or no longer) open.
    fn admit(&mut self, id: u64) -> bool {
        match self.bidi.arrive(id, MAX_CONCURRENT_STREAMS) {
            Arrival::Done => return false,
            Arrival::TooFar => {
                self.conn_error(ErrorCode::IdError);
                return false;
            }
            Arrival::New => {}
        }
        let excluded = matches!(self.phase, Phase::Draining { goaway_id } if id >= goaway_id);
        // Streams QUIC opened whose bytes are still on their way count
        // too: quinn-proto counts them against the same limit.
        let full = self.streams.len() + self.bidi.gaps.len() >= MAX_CONCURRENT_STREAMS;
        if excluded || full {
            self.events.push_back(Event::Reset {
                stream_id: id,
                code: ErrorCode::RequestRejected,
            });
            return false;
        }
        let s = Stream {
            recv: Recv::Head,
            reply: Reply::Waiting,
            reader: Reader::default(),
            content_length: None,
            received: 0,
        };
        self.streams.insert(id, s);
        true
    }

    /// The request stream's FIN, after all its bytes.
    fn request_fin(&mut self, id: u64, reader: &Reader) {
        if !reader.buf.is_empty() || reader.skip != Skip::None {
            // §7.1: the last frame is cut short.
            return self.conn_error(ErrorCode::FrameError);
        }
        let s = self.streams.get_mut(&id).expect("an open stream");
        match s.recv {
            // §4.1.2: too little of a request to answer.
            Recv::Head => return self.stream_error(id, ErrorCode::RequestIncomplete),
            Recv::Body if s.content_length.is_some_and(|cl| cl != s.received) => {
                // §4.1.2: content-length disagrees with the DATA.
                return self.stream_error(id, ErrorCode::MessageError);
            }
            Recv::Body | Recv::Trailers => s.recv = Recv::Ended,
            Recv::Ended => unreachable!("a FIN after the FIN"),
        }
        self.release(id, true);
    }

    /// Hands out a held request.
    fn release(&mut self, id: u64, end_stream: bool) {
        let s = self.streams.get_mut(&id).expect("an open stream");
        if !matches!(s.reply, Reply::Held(_)) {
            return;
        }
        let Reply::Held(mut req) = std::mem::replace(&mut s.reply, Reply::Handed) else {
            unreachable!("held");
        };
        req.end_stream = end_stream;
        self.events.push_back(Event::Request(*req));
    }

    fn on_request_frame(&mut self, id: u64, f: Frame<'_>) {
        if !f.allowed_from_client(StreamKind::Request) {
            // §7.2: SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH and
            // PUSH_PROMISE have no place on a request stream.
            return self.conn_error(ErrorCode::FrameUnexpected);
        }
        let recv = self.streams[&id].recv;
        match (f, recv) {
            (Frame::Unknown { .. }, _) => {}
            (Frame::Headers(section), Recv::Head) => self.on_request_head(id, section),
            (Frame::Headers(section), Recv::Body) => self.on_trailers(id, section),
            (Frame::Data { .. }, Recv::Body) => {}
            // §4.1: DATA before HEADERS, HEADERS or DATA after the
            // trailers: an invalid sequence of frames.
            _ => self.conn_error(ErrorCode::FrameUnexpected),
        }
    }

    /// `k` bytes of the body passed (and were dropped).
    fn on_body(&mut self, id: u64, k: usize) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.received += k as u64;
        if s.content_length.is_some_and(|cl| s.received > cl) {
            // §4.1.2: more DATA than content-length says.
            return self.stream_error(id, ErrorCode::MessageError);
        }
        if matches!(s.reply, Reply::Held(_)) && s.received > limits::MAX_DISCARD_BODY {
            self.release(id, false);
        }
    }

    /// Decodes a field section into `self.fields`; returns whether it fit
    /// our limits, or None after a connection error (QPACK's, RFC 9204
    /// §2.2.3: the section cannot be read).
    fn decode(&mut self, section: &[u8]) -> Option<bool> {
        let mut fields = std::mem::take(&mut self.fields);
        fields.clear(KEEP_CAPACITY);
        let r = self
            .decoder
            .decode(section, qpack::MAX_FIELD_SECTION_SIZE, &mut |f| {
                fields.push(f.name, f.value)
            });
        self.fields = fields;
        match r {
            Ok(_) => Some(true),
            Err(QpackError::TooLarge) => Some(false),
            Err(e) => {
                self.conn_error(e.code());
                None
            }
        }
    }

    /// The request's HEADERS (§4.1, §4.3.1).
    fn on_request_head(&mut self, id: u64, section: &[u8]) {
        let Some(fits) = self.decode(section) else {
            return;
        };
        if !fits {
            // §4.2.2: past our SETTINGS_MAX_FIELD_SECTION_SIZE (or
            // QPACK's limits on fields and strings). There is no dynamic
            // table to fall out of step with, so the request alone is
            // answered, as HTTP/2 does.
            return self.refuse(id, 431);
        }
        let checked = request(id, &self.fields, false);
        self.fields.clear(KEEP_CAPACITY);
        let (req, content_length) = match checked {
            Ok((req, _)) if !req.names_authority() => {
                return self.stream_error(id, ErrorCode::MessageError)
            }
            Ok(r) => r,
            Err(Reject::Connect) => return self.refuse(id, 405),
            // §4.1.2: malformed, a stream error.
            Err(Reject::Malformed) => return self.stream_error(id, ErrorCode::MessageError),
        };
        let hold = content_length.is_none_or(|cl| cl <= limits::MAX_DISCARD_BODY);
        let s = self.streams.get_mut(&id).expect("an open stream");
        s.recv = Recv::Body;
        s.content_length = content_length;
        s.reply = if hold {
            Reply::Held(Box::new(req))
        } else {
            self.events.push_back(Event::Request(req));
            Reply::Handed
        };
    }

    /// Trailing HEADERS (§4.1): no pseudo-header fields (§4.3), and the
    /// body they end as long as content-length says.
    fn on_trailers(&mut self, id: u64, section: &[u8]) {
        let Some(fits) = self.decode(section) else {
            return;
        };
        let pseudo = self.fields.iter().any(|(n, _)| n.first() == Some(&b':'));
        self.fields.clear(KEEP_CAPACITY);
        let s = &self.streams[&id];
        if !fits {
            return self.stream_error(id, ErrorCode::ExcessiveLoad);
        }
        if pseudo || s.content_length.is_some_and(|cl| cl != s.received) {
            return self.stream_error(id, ErrorCode::MessageError);
        }
        self.streams.get_mut(&id).expect("an open stream").recv = Recv::Trailers;
        self.release(id, true);
    }

    /// Answers a request the driver never sees (fields past our limits,
    /// CONNECT) with just a status; its body, if any, is read and dropped
    /// until this `recv` ends, then the client is asked to stop sending it.
    fn refuse(&mut self, id: u64, status: u16) {
        self.scratch.clear();
        qpack::encode_section_prefix(&mut self.scratch);
        qpack::encode_status(status, &mut self.scratch);
        let scratch = std::mem::take(&mut self.scratch);
        self.write(id, |out| put_headers(out, &scratch), true);
        self.scratch = scratch;
        let s = self.streams.get_mut(&id).expect("an open stream");
        s.recv = Recv::Body;
        s.reply = Reply::Done;
    }

    // The client's unidirectional streams (§6.2).

    fn recv_uni(&mut self, id: u64, bytes: &[u8], fin: bool) -> usize {
        if !self.unis.contains_key(&id) {
            if self.backed_up() && !bytes.is_empty() {
                return 0;
            }
            match self.uni_ids.arrive(id, MAX_UNI_STREAMS) {
                Arrival::Done => return bytes.len(),
                Arrival::TooFar => {
                    self.conn_error(ErrorCode::IdError);
                    return bytes.len();
                }
                Arrival::New if self.unis.len() + self.uni_ids.gaps.len() >= MAX_UNI_STREAMS => {
                    self.stop_uni(id);
                    return bytes.len();
                }
                Arrival::New => {}
            }
            let ty = Uni::Type {
                bytes: [0; frame::MAX_VARINT_LEN],
                len: 0,
            };
            self.unis.insert(id, ty);
        }
        let mut pos = 0;
        if let Some(Uni::Type { .. }) = self.unis.get(&id) {
            pos = self.read_type(id, bytes);
        }
        let n = match self.unis.get_mut(&id) {
            Some(Uni::Control(r)) => {
                let mut reader = std::mem::take(r);
                let n = pos + self.read_frames(On::Control, &mut reader, &bytes[pos..]);
                if let Some(Uni::Control(r)) = self.unis.get_mut(&id) {
                    *r = reader;
                }
                n
            }
            Some(Uni::QpackEncoder) => {
                self.read_encoder_stream(&bytes[pos..]);
                bytes.len()
            }
            Some(Uni::QpackDecoder(_)) => {
                self.read_decoder_stream(id, &bytes[pos..]);
                bytes.len()
            }
            Some(Uni::Type { .. }) | None => bytes.len(),
        };
        if n == bytes.len() && fin {
            self.uni_fin(id);
        }
        n
    }

    /// Reads a unidirectional stream's type (a varint) from the start of
    /// `bytes` and acts on it: the bytes it took.
    fn read_type(&mut self, id: u64, bytes: &[u8]) -> usize {
        let Some(Uni::Type { bytes: ty, len }) = self.unis.get_mut(&id) else {
            unreachable!("a stream reading its type");
        };
        let mut pos = 0;
        while pos < bytes.len() {
            ty[usize::from(*len)] = bytes[pos];
            *len += 1;
            pos += 1;
            if let Some((t, _)) = decode_varint(&ty[..usize::from(*len)]) {
                self.typed(id, t);
                return pos;
            }
        }
        pos
    }

    /// A unidirectional stream's type came (§6.2, RFC 9204 §4.2).
    fn typed(&mut self, id: u64, t: u64) {
        let once = |c: &H3Conn, k: fn(&Uni) -> bool| !c.unis.values().any(k);
        let uni = match frame::classify_stream(t) {
            UniStream::Control if self.peer_control == PeerControl::Absent => {
                self.peer_control = PeerControl::AwaitingSettings;
                Uni::Control(Reader::default())
            }
            UniStream::QpackEncoder if once(self, |u| matches!(u, Uni::QpackEncoder)) => {
                Uni::QpackEncoder
            }
            UniStream::QpackDecoder if once(self, |u| matches!(u, Uni::QpackDecoder(_))) => {
                Uni::QpackDecoder(DecoderStream::Start)
            }
            // §6.2.1, RFC 9204 §4.2: a second control, encoder or decoder
            // stream; §6.2.2: only servers push.
            UniStream::Control
            | UniStream::QpackEncoder
            | UniStream::QpackDecoder
            | UniStream::Push => return self.conn_error(ErrorCode::StreamCreationError),
            UniStream::Reserved | UniStream::Unknown(_) => {
                self.unis.remove(&id);
                return self.stop_uni(id);
            }
        };
        self.unis.insert(id, uni);
    }

    /// §6.2: a stream of a type we do not read is stopped, with
    /// H3_STREAM_CREATION_ERROR; its bytes until then are dropped.
    fn stop_uni(&mut self, id: u64) {
        self.events.push_back(Event::StopSending {
            stream_id: id,
            code: ErrorCode::StreamCreationError,
        });
    }

    /// A unidirectional stream's FIN: §6.2.1 and RFC 9204 §4.2 forbid
    /// closing the critical ones; §6.2 lets one close before its type.
    fn uni_fin(&mut self, id: u64) {
        match self.unis.remove(&id) {
            Some(Uni::Type { .. }) | None => {}
            Some(_) => self.conn_error(ErrorCode::ClosedCriticalStream),
        }
    }

    /// The client's QPACK encoder stream. We allow a table of 0 bytes
    /// (`frame::OUR_SETTINGS`), so any insertion or duplication (RFC 9204
    /// §4.3.2-4.3.4) and any capacity but 0 (§4.3.1) is
    /// QPACK_ENCODER_STREAM_ERROR; every instruction's first byte says
    /// which, and only Set Dynamic Table Capacity 0 is one byte long.
    fn read_encoder_stream(&mut self, bytes: &[u8]) {
        if bytes.iter().any(|&b| b != SET_CAPACITY_0) {
            self.conn_error(ErrorCode::QpackEncoderStreamError);
        }
    }

    /// The client's QPACK decoder stream (RFC 9204 §4.4): Stream
    /// Cancellations are dropped (we keep nothing per stream to cancel);
    /// a Section Acknowledgment or an Insert Count Increment can only be
    /// QPACK_DECODER_STREAM_ERROR, as no section of ours references the
    /// dynamic table and nothing was ever inserted (§4.4.1, §4.4.3).
    fn read_decoder_stream(&mut self, id: u64, bytes: &[u8]) {
        let Some(&Uni::QpackDecoder(mut at)) = self.unis.get(&id) else {
            unreachable!("the decoder stream");
        };
        for &b in bytes {
            at = match at {
                DecoderStream::Int(n) if n >= 9 => {
                    return self.conn_error(ErrorCode::QpackDecoderStreamError)
                }
                DecoderStream::Int(n) if b & 0x80 != 0 => DecoderStream::Int(n + 1),
                DecoderStream::Int(_) => DecoderStream::Start,
                // 01xxxxxx: Stream Cancellation, its 6-bit prefix full
                // when more bytes follow.
                DecoderStream::Start if b & 0xc0 == 0x40 && b & 0x3f == 0x3f => {
                    DecoderStream::Int(0)
                }
                DecoderStream::Start if b & 0xc0 == 0x40 => DecoderStream::Start,
                DecoderStream::Start => return self.conn_error(ErrorCode::QpackDecoderStreamError),
            };
        }
        self.unis.insert(id, Uni::QpackDecoder(at));
    }

    /// A frame on the client's control stream (§6.2.1, §7.2).
    fn on_control_frame(&mut self, f: Frame<'_>) {
        if self.peer_control == PeerControl::AwaitingSettings {
            // §6.2.1: SETTINGS first, whatever else comes.
            if !matches!(f, Frame::Settings(_)) {
                return self.conn_error(ErrorCode::MissingSettings);
            }
            // Its values ask nothing of us: we never use the client's
            // QPACK table, and our response sections are small.
            self.peer_control = PeerControl::Ready;
            return;
        }
        if !f.allowed_from_client(StreamKind::Control) {
            return self.conn_error(ErrorCode::FrameUnexpected);
        }
        match f {
            // §7.2.4: SETTINGS once.
            Frame::Settings(_) => self.conn_error(ErrorCode::FrameUnexpected),
            Frame::Goaway(push_id) => {
                if self.peer_goaway.is_some_and(|last| push_id > last) {
                    // §5.2: a GOAWAY's id never grows.
                    return self.conn_error(ErrorCode::IdError);
                }
                if self.peer_goaway != Some(push_id) {
                    self.peer_goaway = Some(push_id);
                    self.events.push_back(Event::GoAway { push_id });
                }
            }
            Frame::MaxPushId(id) => {
                if self.max_push_id.is_some_and(|max| id < max) {
                    // §7.2.7: MAX_PUSH_ID never shrinks.
                    return self.conn_error(ErrorCode::IdError);
                }
                self.max_push_id = Some(id);
            }
            // §7.2.3: a CANCEL_PUSH for a push ID no PUSH_PROMISE named
            // (we make none).
            Frame::CancelPush(_) => self.conn_error(ErrorCode::IdError),
            Frame::Unknown { .. } => {}
            Frame::Data { .. } | Frame::Headers(_) | Frame::PushPromise { .. } => {
                unreachable!("refused by allowed_from_client")
            }
        }
    }

    // Frames, from any stream that carries them.

    /// Whether frames on `on` are still read.
    fn reading(&self, on: On) -> bool {
        match on {
            On::Control => !self.is_closed(),
            On::Request(id) => self.streams.contains_key(&id),
        }
    }

    /// Reads the frames `bytes` holds after what `r` holds; returns the
    /// bytes taken. Payloads that stream past (DATA's, unknown types')
    /// are passed over as they arrive; any other frame is taken whole from
    /// `bytes` when it lies there, else copied into `r.buf`, no further
    /// than its own end.
    fn read_frames(&mut self, on: On, r: &mut Reader, bytes: &[u8]) -> usize {
        let mut pos = 0;
        loop {
            if !self.reading(on) {
                return bytes.len();
            }
            let rest = &bytes[pos..];
            if r.skip != Skip::None {
                pos += self.pass_over(on, r, rest);
                if r.skip != Skip::None {
                    return pos;
                }
                continue;
            }
            if rest.is_empty() || self.backed_up() {
                return pos;
            }
            pos += if r.buf.is_empty() {
                self.frame_in_place(on, r, rest)
            } else {
                self.frame_buffered(on, r, rest)
            };
        }
    }

    /// Passes over payload bytes at the start of `rest`: how many.
    fn pass_over(&mut self, on: On, r: &mut Reader, rest: &[u8]) -> usize {
        let (left, body) = match r.skip {
            Skip::Body(n) => (n, true),
            Skip::Unknown(n) => (n, false),
            Skip::None => unreachable!("nothing to pass over"),
        };
        let k = left.min(rest.len() as u64);
        r.skip = match (left - k, body) {
            (0, _) => Skip::None,
            (n, true) => Skip::Body(n),
            (n, false) => Skip::Unknown(n),
        };
        if let (On::Request(id), true) = (on, body) {
            self.on_body(id, k as usize);
        }
        k as usize
    }

    /// A frame from the start of `rest`, with nothing buffered: taken
    /// where it lies, or, when `rest` ends inside it, all of `rest`
    /// copied to `r.buf`.
    fn frame_in_place(&mut self, on: On, r: &mut Reader, rest: &[u8]) -> usize {
        match frame::parse(rest) {
            Parsed::Frame(f, n) => {
                r.skip = skip_of(&f);
                self.on_frame(on, f);
                n
            }
            Parsed::NeedMore => {
                assert!(rest.len() < MAX_STREAM_BUFFER, "a frame past its limit");
                self.buffer(r, rest);
                rest.len()
            }
            Parsed::Error(e) => {
                self.conn_error(e);
                rest.len()
            }
        }
    }

    /// A frame begun in `r.buf`, topped up from `rest` no further than
    /// the frame's end (as far as its first bytes tell); the bytes of
    /// `rest` it took.
    fn frame_buffered(&mut self, on: On, r: &mut Reader, rest: &[u8]) -> usize {
        let k = frame_need(&r.buf)
            .saturating_sub(r.buf.len())
            .min(rest.len());
        debug_assert!(k > 0, "buffered a whole frame");
        self.buffer(r, &rest[..k]);
        if self.is_closed() {
            return rest.len();
        }
        let buf = std::mem::take(&mut r.buf);
        match frame::parse(&buf) {
            Parsed::Frame(f, n) => {
                debug_assert_eq!(n, buf.len(), "copied past a frame");
                self.partial -= buf.len();
                r.skip = skip_of(&f);
                self.on_frame(on, f);
                if buf.capacity() <= KEEP_CAPACITY {
                    r.buf = buf;
                    r.buf.clear();
                }
            }
            Parsed::NeedMore => r.buf = buf,
            Parsed::Error(e) => {
                r.buf = buf;
                self.conn_error(e);
            }
        }
        k
    }

    /// Appends to a reader's partial frame, within [`MAX_BUFFERED`].
    fn buffer(&mut self, r: &mut Reader, bytes: &[u8]) {
        if self.partial + bytes.len() > MAX_BUFFERED {
            return self.conn_error(ErrorCode::ExcessiveLoad);
        }
        debug_assert!(r.buf.len() + bytes.len() <= MAX_STREAM_BUFFER);
        r.buf.extend_from_slice(bytes);
        self.partial += bytes.len();
    }

    fn on_frame(&mut self, on: On, f: Frame<'_>) {
        match on {
            On::Control => self.on_control_frame(f),
            On::Request(id) => self.on_request_frame(id, f),
        }
    }

    /// Bytes held in partial frames, counted afresh (for an assertion).
    fn count_partial(&self) -> usize {
        let streams: usize = self.streams.values().map(|s| s.reader.buf.len()).sum();
        let unis: usize = self
            .unis
            .values()
            .map(|u| match u {
                Uni::Control(r) => r.buf.len(),
                _ => 0,
            })
            .sum();
        streams + unis
    }
}

/// What a frame's payload leaves to pass over.
fn skip_of(f: &Frame<'_>) -> Skip {
    match *f {
        Frame::Data { len } if len > 0 => Skip::Body(len),
        Frame::Unknown { len, .. } if len > 0 => Skip::Unknown(len),
        _ => Skip::None,
    }
}

/// How many bytes `buf`, a frame's first bytes, must hold before
/// `frame::parse` can say more than NeedMore: its type's varint, its
/// length's, then (a frame parsed whole: DATA and unknown types return as
/// soon as their header is here) its payload. Never past the frame's end.
fn frame_need(buf: &[u8]) -> usize {
    let size = |b: u8| 1usize << (b >> 6);
    let Some(&t) = buf.first() else {
        return 1;
    };
    let a = size(t);
    let Some(&l) = buf.get(a) else {
        return a + 1;
    };
    let head = a + size(l);
    match decode_varint(&buf[a..]) {
        Some((len, _)) if buf.len() >= head => head + len.min(MAX_FRAME_PAYLOAD) as usize,
        _ => head,
    }
}
