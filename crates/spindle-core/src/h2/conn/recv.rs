//! The receiving side of [`H2Conn`]: each frame's effect on the
//! connection and its streams.

use super::*;

impl H2Conn {
    pub(super) fn on_frame(&mut self, f: Frame<'_>) {
        if self.block_stream != 0 && !matches!(f, Frame::Continuation { .. }) {
            // §6.10: nothing may come between a HEADERS and its last
            // CONTINUATION.
            return self.conn_error(ErrorCode::ProtocolError);
        }
        if matches!(self.phase, Phase::FirstSettings) {
            if !matches!(f, Frame::Settings { ack: false, .. }) {
                return self.conn_error(ErrorCode::ProtocolError);
            }
            self.phase = Phase::Open;
        }
        match f {
            Frame::Data {
                stream_id,
                data,
                flow_len,
                end_stream,
            } => self.on_data(stream_id, data.len(), flow_len, end_stream),
            Frame::Headers {
                stream_id,
                block,
                end_stream,
                end_headers,
                self_dependent,
            } => self.on_headers(stream_id, block, end_stream, end_headers, self_dependent),
            Frame::Continuation {
                stream_id,
                block,
                end_headers,
            } => {
                if stream_id != self.block_stream {
                    return self.conn_error(ErrorCode::ProtocolError);
                }
                self.block_frames += 1;
                if self.block_frames > self.cfg.max_continuation_frames
                    || self.block.len() + block.len() > self.cfg.max_header_block as usize
                {
                    return self.conn_error(ErrorCode::EnhanceYourCalm);
                }
                self.block.extend_from_slice(block);
                if end_headers {
                    self.end_block();
                }
            }
            Frame::Priority { .. } => {
                self.spend(Flood::Priorities);
            }
            Frame::RstStream { stream_id, .. } => {
                if stream_id > self.max_client_stream {
                    return self.conn_error(ErrorCode::ProtocolError);
                }
                // Every open stream's response is unfinished: a reset
                // of one is what rapid reset repeats.
                if let Some(s) = self.streams.remove(&stream_id) {
                    if s.held.is_none() {
                        self.events.push_back(Event::StreamReset { stream_id });
                    }
                    self.remember(stream_id, Closed::Other);
                    if self.spend(Flood::Resets) {
                        self.maybe_done();
                    }
                }
            }
            Frame::Settings { ack, params } => {
                if !ack && self.spend(Flood::Settings) {
                    self.apply_settings(params);
                }
            }
            Frame::Ping { ack, data } => {
                if !ack && self.spend(Flood::Pings) {
                    put_ping_ack(&mut self.out, &data);
                }
            }
            Frame::GoAway {
                last_stream_id,
                code,
            } => {
                // The peer opens no more streams; those it has finish, and
                // the connection stays until it closes or idles out, as
                // frames it sends after (a PING, say) are still answered
                // (h2spec 7: no special behaviour).
                self.events.push_back(Event::GoAway {
                    last_stream_id,
                    code,
                });
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            } => self.on_window_update(stream_id, increment),
            Frame::Unknown { .. } => {}
        }
    }

    fn on_data(&mut self, id: u32, len: usize, flow_len: u32, end_stream: bool) {
        if id > self.max_client_stream {
            return self.conn_error(ErrorCode::ProtocolError);
        }
        if i64::from(flow_len) > self.conn_recv_window {
            return self.conn_error(ErrorCode::FlowControlError);
        }
        // Every body byte is dropped on arrival: the connection's window
        // is given back whatever the stream's fate.
        self.conn_recv_window -= i64::from(flow_len);
        self.conn_recv_unacked += flow_len;
        if self.conn_recv_unacked >= self.cfg.connection_window / 2 {
            put_window_update(&mut self.out, 0, self.conn_recv_unacked);
            self.conn_recv_window += i64::from(self.conn_recv_unacked);
            self.conn_recv_unacked = 0;
        }
        if flow_len == 0 && !end_stream && !self.spend(Flood::EmptyData) {
            return;
        }
        let half = self.cfg.initial_window / 2;
        let Some(s) = self.streams.get_mut(&id) else {
            if self.closed_by_us(id) {
                return;
            }
            // §6.1: DATA on a stream not open is STREAM_CLOSED.
            return self.stream_error(id, ErrorCode::StreamClosed);
        };
        if s.state == State::HalfClosedRemote {
            return self.stream_error(id, ErrorCode::StreamClosed);
        }
        if i64::from(flow_len) > s.recv_window {
            return self.stream_error(id, ErrorCode::FlowControlError);
        }
        s.recv_window -= i64::from(flow_len);
        s.received += len as u64;
        let bad_length = match s.content_length {
            Some(cl) => s.received > cl || (end_stream && s.received != cl),
            None => false,
        };
        if bad_length {
            // §8.1.1: content-length disagrees with the DATA.
            return self.stream_error(id, ErrorCode::ProtocolError);
        }
        if s.held.is_some() && (end_stream || s.received > limits::MAX_DISCARD_BODY) {
            let mut req = s.held.take().expect("held");
            req.end_stream = end_stream;
            self.events.push_back(Event::Request(*req));
        }
        let s = self.streams.get_mut(&id).expect("the stream");
        if end_stream {
            self.remote_end(id);
        } else {
            s.recv_unacked += flow_len;
            if s.recv_unacked >= half && s.recv_unacked > 0 {
                put_window_update(&mut self.out, id, s.recv_unacked);
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
    }

    fn on_headers(
        &mut self,
        id: u32,
        block: &[u8],
        end_stream: bool,
        end_headers: bool,
        self_dependent: bool,
    ) {
        if id & 1 == 0 {
            // §5.1.1: clients use odd stream ids.
            return self.conn_error(ErrorCode::ProtocolError);
        }
        let block_for = if let Some(s) = self.streams.get(&id) {
            if s.state == State::HalfClosedRemote {
                BlockFor::Discard(Some(ErrorCode::StreamClosed))
            } else if !end_stream {
                // §8.1: a second HEADERS is trailers, and ends the stream.
                BlockFor::Discard(Some(ErrorCode::ProtocolError))
            } else {
                BlockFor::Trailers
            }
        } else if id <= self.max_client_stream {
            match self.recently_closed.iter().find(|(i, _)| *i == id) {
                Some((_, Closed::ByUs)) => BlockFor::Discard(None),
                // §5.1: HEADERS on a closed stream.
                Some((_, Closed::Other)) => return self.conn_error(ErrorCode::StreamClosed),
                // §5.1.1: a stream id lower than one already used.
                None => return self.conn_error(ErrorCode::ProtocolError),
            }
        } else {
            self.max_client_stream = id;
            if self.going_away.is_some_and(|last| id > last) {
                BlockFor::Discard(None)
            } else if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
                BlockFor::Refused
            } else {
                BlockFor::Request
            }
        };
        let block_for = match block_for {
            BlockFor::Request | BlockFor::Trailers if self_dependent => {
                BlockFor::Discard(Some(ErrorCode::ProtocolError))
            }
            b => b,
        };
        if block.len() > self.cfg.max_header_block as usize {
            return self.conn_error(ErrorCode::EnhanceYourCalm);
        }
        self.block.clear();
        self.block.extend_from_slice(block);
        self.block_stream = id;
        self.block_end_stream = end_stream;
        self.block_frames = 0;
        self.block_for = block_for;
        if end_headers {
            self.end_block();
        }
    }

    /// A header block is complete: decode it and act on it.
    fn end_block(&mut self) {
        let id = self.block_stream;
        let end_stream = self.block_end_stream;
        self.block_stream = 0;
        // Decoded into a buffer the connection keeps (emptied after each
        // block), so a request's fields cost no allocation each.
        let mut fields = std::mem::take(&mut self.fields);
        let decoded = self.hpack.decode(
            &self.block,
            self.cfg.max_header_list_size as usize,
            &mut |n, v| fields.push(n, v),
        );
        self.block.clear();
        if self.block.capacity() > KEEP_CAPACITY {
            self.block = Vec::new();
        }
        self.on_block(id, end_stream, decoded, &fields);
        fields.clear(KEEP_CAPACITY);
        self.fields = fields;
    }

    /// What a decoded header block does.
    fn on_block(
        &mut self,
        id: u32,
        end_stream: bool,
        decoded: Result<bool, hpack::HpackError>,
        fields: &Packed,
    ) {
        let fits = match decoded {
            Ok(fits) => fits,
            Err(_) => return self.conn_error(ErrorCode::CompressionError),
        };
        match self.block_for {
            BlockFor::Discard(None) => {}
            BlockFor::Discard(Some(code)) => self.stream_error(id, code),
            BlockFor::Refused => {
                put_rst_stream(&mut self.out, id, ErrorCode::RefusedStream);
                self.remember(id, Closed::ByUs);
                self.spend(Flood::Resets);
            }
            // The driver ended or reset the stream while its trailers
            // were still arriving.
            BlockFor::Trailers if !self.streams.contains_key(&id) => {}
            BlockFor::Trailers => {
                let bad = !fits
                    || fields.iter().any(|(n, _)| n.first() == Some(&b':'))
                    || self.streams[&id]
                        .content_length
                        .is_some_and(|cl| cl != self.streams[&id].received);
                if bad {
                    self.stream_error(id, ErrorCode::ProtocolError);
                } else {
                    let s = self.streams.get_mut(&id).expect("checked above");
                    if let Some(mut req) = s.held.take() {
                        req.end_stream = true;
                        self.events.push_back(Event::Request(*req));
                    }
                    self.remote_end(id);
                }
            }
            BlockFor::Request if !fits => self.refuse(id, 431, end_stream),
            BlockFor::Request => match request(id, fields, end_stream) {
                Ok((req, content_length)) => {
                    let cl_bad = end_stream && content_length.is_some_and(|cl| cl != 0);
                    if cl_bad {
                        return self.stream_error(id, ErrorCode::ProtocolError);
                    }
                    // A small body is read before the request is handed
                    // out (as HTTP/1.1's session does), so the answer
                    // never races the upload.
                    let hold = !end_stream
                        && content_length.is_none_or(|cl| cl <= limits::MAX_DISCARD_BODY);
                    let urgency = req.urgency;
                    let held = if hold {
                        Some(Box::new(req))
                    } else {
                        self.events.push_back(Event::Request(req));
                        None
                    };
                    self.streams.insert(
                        id,
                        Stream {
                            state: if end_stream {
                                State::HalfClosedRemote
                            } else {
                                State::Open
                            },
                            send_window: i64::from(self.peer_initial_window),
                            recv_window: i64::from(self.cfg.initial_window),
                            recv_unacked: 0,
                            headers_sent: false,
                            body_pending: false,
                            urgency,
                            content_length,
                            received: 0,
                            held,
                        },
                    );
                    debug_assert!(self.streams.len() <= self.cfg.max_concurrent_streams as usize);
                }
                Err(Reject::Connect) => self.refuse(id, 405, end_stream),
                Err(Reject::Malformed) => self.stream_error(id, ErrorCode::ProtocolError),
            },
        }
    }

    /// Answers a request the driver never sees (a header list over the
    /// limit, CONNECT) with just a status.
    fn refuse(&mut self, id: u32, status: u16, end_stream: bool) {
        self.scratch.clear();
        self.encoder.begin_block(&mut self.scratch);
        hpack::encode_status(status, &mut self.scratch);
        put_headers(
            &mut self.out,
            id,
            &self.scratch,
            true,
            self.peer_max_frame_size,
        );
        if !end_stream {
            // §8.1: the response is complete; the body is not wanted.
            put_rst_stream(&mut self.out, id, ErrorCode::NoError);
        }
        self.remember(id, Closed::ByUs);
        self.spend(Flood::Resets);
    }

    fn on_window_update(&mut self, id: u32, increment: u32) {
        // A client reading fast sends many updates, each opening room for
        // a frame or more: only the small ones count against the budget.
        if increment < SMALL_WINDOW_INCREMENT && !self.spend(Flood::WindowUpdates) {
            return;
        }
        if id == 0 {
            self.conn_send_window += i64::from(increment);
            if self.conn_send_window > i64::from(MAX_WINDOW) {
                return self.conn_error(ErrorCode::FlowControlError);
            }
            return self.window_opened();
        }
        if id > self.max_client_stream {
            return self.conn_error(ErrorCode::ProtocolError);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            return self.stream_error(id, ErrorCode::FlowControlError);
        }
        self.window_opened();
    }

    fn apply_settings(&mut self, params: &[u8]) {
        for (k, v) in frame::settings(params) {
            match k {
                setting::INITIAL_WINDOW_SIZE => {
                    // §6.9.2: every stream's window moves by the change.
                    let delta = i64::from(v) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = v;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > i64::from(MAX_WINDOW) {
                            return self.conn_error(ErrorCode::FlowControlError);
                        }
                    }
                    if delta > 0 {
                        self.window_opened();
                    }
                }
                setting::MAX_FRAME_SIZE => self.peer_max_frame_size = v,
                // The next HEADERS say the new size first (RFC 7541 §4.2).
                setting::HEADER_TABLE_SIZE => self.encoder.set_peer_max(v as usize),
                // ENABLE_PUSH, MAX_CONCURRENT_STREAMS: we never push.
                // MAX_HEADER_LIST_SIZE: advisory; ours are small.
                _ => {}
            }
        }
        put_settings_ack(&mut self.out);
    }
}
