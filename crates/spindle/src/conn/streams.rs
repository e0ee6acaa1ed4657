//! HTTP/2's glue between a connection and its stream slots, written once
//! (`conn::h2` has the design): a connection turns HTTP/2,
//! its input becomes streams, each stream slot's head goes to the link,
//! its end to END_STREAM, and the drain sends GOAWAY. Writing the frames
//! out is the loop's ([`Transport::h2_output`]).

use spindle_core::request::Request as CoreRequest;
use spindle_core::Fields;

use super::h2::{H2Link, H2State, Proto, Todo};
use super::life::{Life, Phase};
use super::steps::{Connection, Transport};
use super::table::Ticket;

/// The HTTP/2 steps, for every [`Transport`].
pub trait StreamSteps: Transport {
    /// The connection speaks HTTP/2 from now on (ALPN `h2`, or the
    /// preface on a plain listener).
    fn h2_begin(&mut self, who: Ticket) {
        let now = self.now();
        let out = self.h2_out(who);
        let (serve, conns) = self.parts();
        let by_address = serve.ctx.session_cfg.rules.by_address();
        let c = conns.get(who).expect("live connection");
        debug_assert!(matches!(c.proto(), Proto::Http1));
        let client = c
            .life()
            .session
            .client()
            .or_else(|| by_address.then(|| crate::net::peer_addr(c.fd())).flatten());
        let link = H2Link::new(Default::default(), client, c.tls_handshaking().is_some());
        *c.proto_mut() = Proto::H2(Box::new(H2State::new(link, out, now)));
    }

    /// Plaintext received on an HTTP/2 connection.
    fn h2_received(&mut self, who: Ticket, data: &[u8]) {
        let now = self.now();
        let (_, conns) = self.parts();
        let Proto::H2(h) = conns.get(who).expect("live connection").proto_mut() else {
            unreachable!("h2_received on a connection that is not HTTP/2")
        };
        let ms = h.ms(now);
        let todo = h.link.receive(data, ms);
        self.h2_todo(who, todo);
        self.h2_input_taken(who);
    }

    /// What the link asks of the loop: new streams, resets, the end.
    fn h2_todo(&mut self, who: Ticket, todo: Vec<Todo>) {
        for t in todo {
            // A todo before this one may have closed the connection (a
            // stream's failure flushed its GOAWAY): no new stream then,
            // since its slots were aborted already.
            let (_, conns) = self.parts();
            let Some(c) = conns.get(who) else {
                return;
            };
            if matches!(c.life().phase, Phase::Closing | Phase::Lingering) {
                return;
            }
            match t {
                Todo::Serve { stream_id, request } => self.h2_serve(who, stream_id, request),
                Todo::Abort(s) => self.abort_slot(s),
                Todo::Close => {
                    if let Proto::H2(h) = c.proto_mut() {
                        h.closing = true;
                    }
                }
            }
        }
    }

    /// A new stream: a slot of its own, with a session given its request.
    fn h2_serve(&mut self, who: Ticket, stream_id: u32, request: Box<CoreRequest>) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let full = conns.full();
        let c = conns.get(who).expect("live connection");
        let fd = c.fd();
        let Proto::H2(h) = c.proto_mut() else {
            unreachable!("a stream of a connection that is not HTTP/2")
        };
        if full {
            return h.link.refuse(stream_id);
        }
        let head_only = request.method == spindle_core::request::Method::Head;
        let session = h.link.session(request);
        let life = Life::new(session, None, &serve.ctx, false, fd, now);
        let added = self.add_stream(who, stream_id, life);
        let Proto::H2(h) = self.parts().1.get(who).expect("live").proto_mut() else {
            unreachable!()
        };
        match added {
            Some(s) => {
                h.link.attach(stream_id, s, head_only);
                self.proceed(s);
            }
            None => h.link.refuse(stream_id),
        }
    }

    /// A stream slot's response begins: its head goes to its connection's
    /// link (as HEADERS, once its first body bytes or its end come).
    /// `false`: the stream is gone.
    fn h2_stream_respond(&mut self, who: Ticket, status: u16, fields: Fields) -> bool {
        let (_, conns) = self.parts();
        let Proto::Stream { parent, id, .. } = *conns.get(who).expect("live").proto() else {
            unreachable!("h2_stream_respond on a connection")
        };
        match conns.get(parent).map(|p| p.proto_mut()) {
            Some(Proto::H2(h)) => h.link.respond(id, status, fields),
            _ => false,
        }
    }

    /// A stream slot's response is over (its last bytes were written):
    /// END_STREAM follows them. Nothing on a connection's own slot.
    fn h2_stream_done(&mut self, who: Ticket) {
        let (_, conns) = self.parts();
        let c = conns.get(who).expect("live connection");
        if let Proto::H3Stream { ended, .. } = c.proto_mut() {
            *ended = true;
            return self.h3_stream_done(who);
        }
        let Proto::Stream { parent, id, ended } = c.proto_mut() else {
            return;
        };
        *ended = true;
        let (parent, id) = (*parent, *id);
        if let Some(p) = conns.get(parent) {
            if let Proto::H2(h) = p.proto_mut() {
                h.link.end(id);
            }
            self.h2_output(parent);
        }
    }

    /// The drain: GOAWAY on every HTTP/2 connection; streams in flight
    /// finish, then each closes.
    fn h2_drain(&mut self) {
        let all = self.parts().1.select(|c| c.is_h2());
        for who in all {
            let c = self.parts().1.get(who).expect("live connection");
            if c.life().phase == Phase::Closing {
                continue;
            }
            if let Proto::H2(h) = c.proto_mut() {
                h.link.shutdown();
            }
            self.h2_output(who);
        }
    }
}

impl<T: Transport + ?Sized> StreamSteps for T {}
