//! One fetch on its connection: the request out (through TLS for https), the
//! response in and parsed, and the fetch's end (accounted, and the
//! connection reused, retried or closed).

use super::*;
use crate::http::{Eof, Feed};

impl Conn {
    /// Request bytes to the socket (through TLS for https).
    pub(super) fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => sys::send(self.fd.as_raw_fd(), data),
            Some(t) => t.send(self.fd.as_raw_fd(), data),
        }
    }

    /// Response bytes from the socket (plaintext, for https).
    pub(super) fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.tls {
            None => sys::recv(self.fd.as_raw_fd(), buf),
            Some(t) => t.recv(self.fd.as_raw_fd(), buf),
        }
    }

    /// TLS records not yet on the socket: `Ok(true)` when there are none.
    pub(super) fn flush(&mut self) -> io::Result<bool> {
        match &mut self.tls {
            None => Ok(true),
            Some(t) => t.flush(self.fd.as_raw_fd()),
        }
    }
}

impl Worker<'_> {
    pub(super) fn on_connected(&mut self, slot: usize) {
        let now = Instant::now();
        let c = self.conn(slot);
        let us = now.duration_since(c.conn_start).as_micros() as u64;
        c.last_activity = now;
        if c.role == Role::Fetch {
            self.stats.connect.record(us);
        }
        self.send_request(slot);
    }

    pub(super) fn send_request(&mut self, slot: usize) {
        let keepalive = self.plan.keepalive;
        let c = self.conn(slot);
        c.phase = Phase::Sending;
        c.sent = 0;
        c.got_first_byte = false;
        c.parser.reset();
        c.request_at = Instant::now();
        self.continue_send(slot, keepalive);
    }

    pub(super) fn continue_send(&mut self, slot: usize, keepalive: bool) {
        let plan = self.plan;
        let c = self.slots[slot].conn.as_mut().expect("live slot");
        let t = &plan.targets[c.url];
        let req: &[u8] = if keepalive || c.role == Role::Idle {
            &t.request_keepalive
        } else {
            &t.request_close
        };
        loop {
            let sent = if c.sent < req.len() {
                c.send(&req[c.sent..])
            } else {
                // TLS records still to write (the request is in them).
                c.flush().and_then(|done| {
                    if done {
                        Ok(0)
                    } else {
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                })
            };
            match sent {
                Ok(n) => {
                    c.sent += n;
                    if c.sent == req.len() && c.tls.as_ref().is_some_and(|t| t.wants_write()) {
                        continue;
                    }
                    if c.sent == req.len() {
                        c.phase = Phase::Receiving;
                        c.last_activity = Instant::now();
                        if c.saw_input {
                            c.saw_input = false;
                            self.on_readable(slot);
                        }
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(slot, errmsg(&e), true);
                    return;
                }
            }
        }
    }

    /// Read what is there; then act on the result.
    pub(super) fn on_readable(&mut self, slot: usize) {
        match self.read_some(slot) {
            Read::Pending => {}
            Read::Throttled(at) => {
                let gen = self.slots[slot].gen;
                self.conn(slot).phase = Phase::Throttled;
                self.throttled.push((at, slot, gen));
            }
            Read::Done { extra } => self.response_done(slot, extra),
            Read::Eof => self.on_eof(slot),
            Read::IoError(e) => self.fail(slot, errmsg(&e), true),
            Read::Proto(e) => self.fail(slot, e, false),
        }
    }

    pub(super) fn read_some(&mut self, slot: usize) -> Read {
        let throttle = self.plan.throttle;
        let c = self.slots[slot].conn.as_mut().expect("live slot");
        let buf = &mut self.buf;
        let stats = &mut self.stats;
        loop {
            let now = Instant::now();
            let mut want = buf.len();
            if let Some(rate) = throttle {
                let rate = rate as f64;
                let elapsed = now.duration_since(c.conn_start).as_secs_f64();
                let budget = rate / 2.0 + elapsed * rate - c.throttle_bytes as f64;
                if budget < 1.0 {
                    let wait = (c.throttle_bytes as f64 + rate / 4.0 - rate / 2.0) / rate;
                    return Read::Throttled(c.conn_start + Duration::from_secs_f64(wait.max(0.0)));
                }
                want = want.min(budget as usize);
            }
            match c.recv(&mut buf[..want]) {
                Ok(0) => return Read::Eof,
                Ok(n) => {
                    c.last_activity = now;
                    c.throttle_bytes += n as u64;
                    if !c.got_first_byte {
                        c.got_first_byte = true;
                        if c.role == Role::Fetch {
                            stats
                                .first_response
                                .record(now.duration_since(c.request_at).as_micros() as u64);
                        }
                    }
                    match c.parser.feed(&buf[..n]) {
                        Ok(Feed::More) => {}
                        Ok(Feed::Done { used }) => return Read::Done { extra: used < n },
                        Err(e) => return Read::Proto(e.to_string()),
                    }
                    // A short read drains a plain socket; TLS hands out a record
                    // at a time, so it reads on until WouldBlock.
                    if n < want && !c.peer_closed && c.tls.is_none() {
                        return Read::Pending;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Read::IoError(e),
            }
        }
    }

    pub(super) fn on_eof(&mut self, slot: usize) {
        let c = self.conn(slot);
        match c.parser.eof() {
            Eof::Complete => self.response_done(slot, false),
            Eof::NoResponse => self.fail(slot, "connection closed without a response".into(), true),
            Eof::TruncatedHead => {
                self.fail(slot, "connection closed in the response head".into(), false)
            }
            Eof::ShortBody => {
                let got = c.parser.body_bytes();
                let msg = match c.parser.content_length() {
                    Some(cl) => format!("byte count wrong (body ended after {got} of {cl} bytes)"),
                    None => format!("byte count wrong (chunked body ended after {got} bytes)"),
                };
                self.end(slot, Outcome::Short(msg), false);
            }
        }
    }

    /// A response finished. `extra`: bytes followed it in the same read.
    pub(super) fn response_done(&mut self, slot: usize, extra: bool) {
        let keepalive = self.plan.keepalive;
        let c = self.conn(slot);
        let reusable = c.parser.keep_alive() && !extra;
        let (role, url, cl) = (c.role, c.url, c.parser.content_length());
        if role == Role::Idle {
            self.idle_setting_up -= 1;
            if reusable {
                self.conn(slot).phase = Phase::Parked;
                self.idle_open += 1;
                self.shared.idle_held.fetch_add(1, Relaxed);
            } else {
                self.stats.idle_errors += 1;
                self.note(url, "server would not keep the idle connection open");
                self.close(slot);
            }
            return;
        }
        let outcome = if extra && !keepalive {
            Outcome::Short(format!(
                "byte count wrong (more bytes than Content-Length {})",
                cl.unwrap_or(0)
            ))
        } else {
            Outcome::Complete
        };
        if extra && keepalive {
            self.note(url, "data after the response on a keep-alive connection");
        }
        self.end(slot, outcome, reusable);
    }

    /// A fetch or idle setup failed. `may_retry`: a reused keep-alive
    /// connection that failed before any response byte is retried once on a
    /// new connection (the server may have closed it while idle).
    pub(super) fn fail(&mut self, slot: usize, msg: String, may_retry: bool) {
        let c = self.conn(slot);
        if c.role == Role::Idle {
            let (url, parked) = (c.url, c.phase == Phase::Parked);
            if !parked {
                self.idle_setting_up -= 1;
                self.stats.idle_errors += 1;
                self.note(url, &format!("idle connection: {msg}"));
            }
            self.close(slot);
            return;
        }
        if may_retry && c.reused && !c.retried && !c.parser.started() && c.in_fetch {
            let (url, start) = (c.url, c.fetch_start);
            c.in_fetch = false;
            // The fetch goes on, on a new connection; it is counted in flight
            // again there.
            self.in_flight -= 1;
            self.shared.current.fetch_sub(1, Relaxed);
            self.stats.reconnects += 1;
            self.close(slot);
            self.start_on_new_conn(url, start, true);
            return;
        }
        self.end(slot, Outcome::Error(msg), false);
    }

    /// End the fetch on `slot` and decide what the connection does next.
    pub(super) fn end(&mut self, slot: usize, outcome: Outcome, reusable: bool) {
        let plan = self.plan;
        let now = Instant::now();
        let c = self.slots[slot].conn.as_mut().expect("live slot");
        if !c.in_fetch {
            // A parked connection went away: nothing to count.
            self.close(slot);
            return;
        }
        c.in_fetch = false;
        let url = c.url;
        let bytes = c.parser.body_bytes();
        let sum = c.parser.checksum();
        let status = c.parser.status();
        let took = now.duration_since(c.fetch_start).as_micros() as u64;
        self.stats.bytes += bytes;
        if let Some(code) = status {
            if let Some(n) = self.stats.codes.get_mut(code as usize) {
                *n += 1;
            }
        }
        let mut msg = None;
        let answered = matches!(outcome, Outcome::Complete | Outcome::Short(_));
        match outcome {
            Outcome::Complete => {
                self.stats.fetch.record(took);
                if status.is_some_and(|s| (200..300).contains(&s)) {
                    let r = *self.shared.refs[url].get_or_init(|| (bytes, sum));
                    if plan.checksum {
                        if r.1 != sum {
                            self.stats.bad_checksums += 1;
                            msg = Some("checksum wrong".to_string());
                        }
                    } else if r.0 != bytes {
                        self.stats.bad_bytes += 1;
                        msg = Some(format!(
                            "byte count wrong ({bytes}, first fetch had {})",
                            r.0
                        ));
                    }
                }
            }
            Outcome::Short(m) => {
                self.stats.fetch.record(took);
                if plan.checksum {
                    self.stats.bad_checksums += 1;
                    msg = Some(m.replace("byte count wrong", "checksum wrong"));
                } else {
                    self.stats.bad_bytes += 1;
                    msg = Some(m);
                }
            }
            Outcome::Timeout => {
                self.stats.timeouts += 1;
                msg = Some("timed out".to_string());
            }
            Outcome::Error(m) => {
                self.stats.errors += 1;
                msg = Some(m);
            }
        }
        if let Some(m) = msg {
            self.note(url, &m);
        }
        self.account_end();

        let stopping = self.shared.stop.load(Relaxed);
        if reusable && plan.keepalive && !stopping {
            if self.tp.rate > 0.0 {
                self.conn(slot).phase = Phase::Parked;
                let gen = self.slots[slot].gen;
                self.pool.push((slot, gen));
                return;
            }
            if self.claim() {
                let url = self.pick_url();
                self.fetch_on_kept(slot, url, Instant::now());
                return;
            }
        } else if plan.keepalive && !reusable && answered {
            self.stats.reconnects += 1;
        }
        self.close(slot);
    }
}
