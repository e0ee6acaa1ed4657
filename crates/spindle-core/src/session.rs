//! The per-connection state machine, shared by every backend.
//!
//! ```text
//!            feed(bytes)                 opened(meta | error)        sent()
//!   Reading ────────────► next() ─Open──► AwaitOpen ───────────► AwaitSent ─────► Reading
//!      ▲                     │                                        ▲    (keep-alive)
//!      │                     ├─Respond (error, 405, 400 ...) ─────────┘
//!      └──── NeedInput ◄─────┘                                   └──► Closed (close)
//! ```
//!
//! With precompressed sidecars on, `opened()` may answer with another
//! `Open` instead of a response (the sidecars in turn, then the file
//! itself again if none will do); the session stays in `AwaitOpen` until
//! it responds.
//!
//! With `autoindex` on, `opened()` answers a directory request whose
//! index file was not found with [`Step::List`]; the session then waits in
//! `AwaitList` for [`Session::listed`], which responds.
//!
//! A path an `auth` rule covers, asked for with credentials, makes
//! `next()` answer [`Step::Authenticate`]; the session waits in
//! `AwaitAuth` for [`Session::authenticated`], which goes on to `Open`
//! (or answers 401).
//!
//! Pipelined requests wait in the input buffer and are parsed one at a
//! time, after the previous response has been handed back with
//! [`Session::sent`], so responses always go out in request order.
//!
//! A session made with [`Session::behind_proxy`] first takes a PROXY
//! protocol header ([`crate::proxy`]) off the input, before the first
//! request: the client it names is then [`Session::client`]. A missing or
//! malformed header closes the connection without an answer.

pub use crate::accesslog::{LogInfo, StreamProtocol};
use std::ffi::CString;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::compress;
use crate::encoding::{self, Encoding};
use crate::limits;
use crate::listing;
use crate::path::{self, PathError};
use crate::proxy;
use crate::request::{self, BodyFraming, Method, Parsed, Request};
use crate::response::{self, Ctx, FileKind, FileMeta, Representation, Response};
use crate::rules::Verdict;
pub use crate::session_config::SessionConfig;
pub use crate::step::{
    AuthCheck, Checked, EdgeFound, FetchRequest, ListRequest, OpenError, OpenRequest, Step,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the PROXY header that must open the connection.
    AwaitProxy,
    Reading,
    AwaitAuth,
    AwaitOpen,
    AwaitList,
    /// Waiting for the edge to find the object at the origin.
    AwaitFetch,
    AwaitSent {
        keep_alive: bool,
    },
    Closed,
}

/// One connection's protocol state.
#[derive(Debug)]
pub struct Session {
    buf: Vec<u8>,
    /// Request-body bytes still to drop before the next request.
    discard: u64,
    state: State,
    served: u64,
    current: Option<Box<Request>>,
    /// Whether the current request allows the connection to stay open.
    current_keep_alive: bool,
    /// Input was left unread when the session decided to close: the peer
    /// may still be sending, so the driver should close lingeringly.
    unread_input: bool,
    /// The last request answered (kept for the access log, built lazily).
    last_req: Option<Box<Request>>,
    /// Or the request line of the last rejected request.
    last_reject: Option<(String, Vec<u8>)>,
    last_status: u16,
    /// A search for a precompressed sidecar of the current request.
    sidecar: Option<Box<Sidecar>>,
    /// A look for the current request's compressed result (`--compress`).
    compressed: Option<Box<Compressed>>,
    /// What the last response tells the driver about the compression
    /// cache ([`Session::take_compress_note`]).
    compress_note: Option<compress::Note>,
    /// The content coding of the response being made (a sidecar's or a
    /// compressed result's), and of the one handed out last (the log's).
    coding: Option<Encoding>,
    last_coding: Option<Encoding>,
    /// Behind a proxy: the client its header named, or the proxy.
    client: Option<SocketAddr>,
    /// The error status whose configured page is being opened.
    error_page: Option<u16>,
    /// The document root of the current request (see `OpenRequest::root`).
    root: u16,
    /// Over a connection limit: the first request gets a 503, then the
    /// connection closes (`Session::over_limit`).
    over_limit: bool,
    /// The current request names a directory (its target ends in `/`).
    dir_request: bool,
    /// The current request's object at the origin, while the edge finds
    /// it and then while its cache file is opened.
    edge: Option<edge::Edge>,
    /// One HTTP/2 or HTTP/3 stream's request ([`Session::for_stream`]):
    /// one response, then closed; logged as `HTTP/2.0` or `HTTP/3`.
    stream: Option<StreamProtocol>,
    /// A stream's request, given as fields ([`Session::for_stream`]),
    /// until `next` serves it.
    given: Option<Box<Request>>,
    /// Over TLS ([`Session::set_tls`]).
    tls: bool,
    /// Why the last request was refused by a rule, if it was.
    refusal: Option<crate::rules::Refusal>,
    /// The current request's `fallback` (see [`Rules::check`]), to open
    /// if its file is not found.
    ///
    /// [`Rules::check`]: crate::rules::Rules::check
    fallback: Option<CString>,
    /// The current request's path while its credentials are checked
    /// (`AwaitAuth`).
    auth_path: Option<CString>,
    /// The last credentials granted on this connection: their `auth`
    /// loading, a keyed hash of the `Authorization` field, and the user.
    granted: Option<Box<Granted>>,
    /// The last request was authenticated (as `granted`'s user: the
    /// access log's).
    authenticated: bool,
}

/// Credentials granted on a connection (see [`Auth::memo`]): the same
/// `Authorization` field under the same loading of the file is granted
/// again without a check.
///
/// [`Auth::memo`]: crate::auth::Auth::memo
#[derive(Debug)]
struct Granted {
    generation: u64,
    memo: u64,
    user: Vec<u8>,
}

/// The header fields an error status carries: `Retry-After` on a 503 (a
/// passing shortage).
fn error_extra(status: u16) -> &'static [(&'static str, &'static str)] {
    if status == 503 {
        &[("Retry-After", "1")]
    } else {
        &[]
    }
}

/// The built-in answer to an error status.
fn error_for(status: u16, ctx: &Ctx) -> Response {
    response::error(status, ctx, error_extra(status))
}

/// Whether `m` is a regular file at least as new as `src` (a sidecar
/// older than its resource is stale and ignored).
fn newer_file(m: &FileMeta, src: &FileMeta) -> bool {
    m.kind == FileKind::Regular && (m.mtime_sec, m.mtime_nsec) >= (src.mtime_sec, src.mtime_nsec)
}

/// A precompressed sidecar search in progress (see [`encoding`]).
#[derive(Debug)]
struct Sidecar {
    /// The resource's own path and metadata.
    src_path: CString,
    src: FileMeta,
    /// Codings still to try, best first.
    todo: Vec<Encoding>,
    /// The coding whose sidecar is being opened; `None`: the resource
    /// itself is being opened again, no sidecar would do.
    trying: Option<Encoding>,
}

/// The stored compressed result of the current request's file, looked
/// for beneath [`compress::CACHE_ROOT`] (see [`compress`]).
#[derive(Debug)]
struct Compressed {
    /// The file's path and the version the name is of.
    src_path: CString,
    src: FileMeta,
    coding: Encoding,
    name: CString,
    hunt: Hunt,
}

/// Where a [`Compressed`] look is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hunt {
    /// The stored result is being opened.
    Looking,
    /// It is not there (or not worth it): the file is being opened again,
    /// to go as it is; `make`: the driver should have it made.
    Reopening { make: bool },
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            buf: Vec::new(),
            discard: 0,
            state: State::Reading,
            served: 0,
            current: None,
            current_keep_alive: false,
            unread_input: false,
            last_req: None,
            last_reject: None,
            last_status: 0,
            sidecar: None,
            compressed: None,
            compress_note: None,
            coding: None,
            last_coding: None,
            client: None,
            error_page: None,
            root: 0,
            over_limit: false,
            dir_request: false,
            edge: None,
            stream: None,
            given: None,
            tls: false,
            refusal: None,
            fallback: None,
            auth_path: None,
            granted: None,
            authenticated: false,
        }
    }

    /// Why a rule refused the request just answered (`allow`/`deny`,
    /// `referers`, `secure-link`), if one did: for the metrics.
    pub fn refusal(&self) -> Option<crate::rules::Refusal> {
        self.refusal
    }

    /// The session's bytes come over TLS (an HTTPS connection, or a
    /// stream of one): `--redirect-https` leaves it alone.
    pub fn set_tls(&mut self) {
        self.tls = true;
    }

    /// The session of one HTTP/2 or HTTP/3 stream: it is given one
    /// request, built from the stream's fields ([`request::from_fields`]),
    /// answers it with a head of fields ([`Response::fields`]) for HPACK
    /// or QPACK, and is then
    /// closed. `client`: the connection's client behind a proxy, as its
    /// connection's session learned it.
    pub fn for_stream(
        client: Option<SocketAddr>,
        req: Box<Request>,
        protocol: StreamProtocol,
    ) -> Session {
        Session {
            stream: Some(protocol),
            client,
            given: Some(req),
            ..Session::new()
        }
    }

    /// The request given to a stream's session, until it is served.
    pub fn given_request(&self) -> Option<&Request> {
        self.given.as_deref()
    }

    /// A session on a listener behind a load balancer, whose connection
    /// comes from `peer` (the proxy): the input must open with a PROXY
    /// protocol header (v1 or v2), and the client it names, or `peer` for
    /// a header that names none (v2 `LOCAL`, v1 `UNKNOWN`), is then
    /// [`Session::client`]. Without a valid header, within
    /// [`proxy::MAX_LEN`] bytes, [`Session::next`] says [`Step::Close`],
    /// and nothing is answered (as nginx's `proxy_protocol` listeners).
    pub fn behind_proxy(peer: SocketAddr) -> Session {
        Session {
            state: State::AwaitProxy,
            client: Some(peer),
            ..Session::new()
        }
    }

    /// A session on a connection past a limit (`--max-connections-per-ip`):
    /// its first request is answered 503 with `Retry-After: 1`, and the
    /// connection closes, as nginx's `limit_conn`.
    pub fn over_limit() -> Session {
        Session {
            over_limit: true,
            ..Session::new()
        }
    }

    /// The client's address on a session [`Session::behind_proxy`]: the
    /// one its header named, or else the proxy's; on another session, the
    /// peer its driver gave it with [`Session::set_peer`]. None otherwise:
    /// the driver asks the socket for its peer when it needs it.
    pub fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    /// Tells a session (not one [`Session::behind_proxy`]) its
    /// connection's peer, which rules by address (`allow`, `deny`) check.
    /// A driver need do so only when [`Rules::by_address`] says some rule
    /// asks; without it such a rule refuses every request.
    ///
    /// [`Rules::by_address`]: crate::rules::Rules::by_address
    pub fn set_peer(&mut self, peer: Option<SocketAddr>) {
        debug_assert!(
            self.state != State::AwaitProxy,
            "the PROXY header names the client"
        );
        self.client = peer;
    }

    /// Appends received bytes. Bytes of a request body being discarded are
    /// dropped here.
    pub fn feed(&mut self, mut data: &[u8]) {
        if self.discard > 0 {
            let n = (self.discard).min(data.len() as u64) as usize;
            self.discard -= n as u64;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
    }

    /// Whether the session can take more input now. False while a
    /// response is being produced and the buffer already holds a full
    /// head's worth of pipelined bytes (backpressure), and once closed.
    pub fn wants_input(&self, cfg: &SessionConfig) -> bool {
        match self.state {
            State::Closed => false,
            State::Reading | State::AwaitProxy => true,
            _ => self.buf.len() < cfg.max_header_bytes,
        }
    }

    /// True when part of a request (or of a body to discard) has arrived,
    /// or the PROXY header is awaited: the driver applies the
    /// request-header timeout then, and the idle keep-alive timeout
    /// otherwise.
    pub fn mid_request(&self) -> bool {
        self.state == State::AwaitProxy
            || self.discard > 0
            || self.buf.iter().any(|&b| b != b'\r' && b != b'\n')
    }

    /// Requests answered so far on this connection.
    /// What the last response asks of the compression cache, once: a
    /// result to make, or one that was used (`--compress`).
    pub fn take_compress_note(&mut self) -> Option<compress::Note> {
        self.compress_note.take()
    }

    pub fn served(&self) -> u64 {
        self.served
    }

    /// True when the connection closes after the response in progress
    /// (or is closed): nothing the peer sends from now on is read as a
    /// request. A driver need not keep receiving then; whatever is left
    /// unread when it closes calls for a lingering close (see
    /// [`Session::linger_advised`]).
    pub fn closes_after_response(&self) -> bool {
        match self.state {
            State::Closed | State::AwaitSent { keep_alive: false } => true,
            State::AwaitAuth | State::AwaitOpen | State::AwaitList | State::AwaitFetch => {
                !self.current_keep_alive
            }
            State::AwaitProxy | State::Reading | State::AwaitSent { keep_alive: true } => false,
        }
    }

    /// Whether the connection should be closed lingeringly (write side
    /// first, then drain input for a while): true when the session stopped
    /// reading with input possibly still on its way, e.g. after a rejected
    /// request or an unread body. A reset in that case could destroy the
    /// response before the peer reads it.
    pub fn linger_advised(&self) -> bool {
        self.unread_input
    }

    /// The log fields of the response handed out last. Built on demand,
    /// so a server without an access log pays nothing for it.
    pub fn log_info(&self) -> LogInfo {
        match (&self.last_req, &self.last_reject) {
            (Some(r), _) => LogInfo {
                method: r.method.as_str().to_string(),
                target: r.target.clone(),
                minor_version: r.minor_version,
                status: self.last_status,
                referer: r.referer.clone(),
                user_agent: r.user_agent.clone(),
                user: self.user().map(<[u8]>::to_vec),
                stream: self.stream,
                coding: self.last_coding,
            },
            (None, Some((method, target))) => LogInfo {
                method: method.clone(),
                target: target.clone(),
                minor_version: 1,
                status: self.last_status,
                stream: self.stream,
                ..LogInfo::default()
            },
            (None, None) => LogInfo {
                status: self.last_status,
                stream: self.stream,
                ..LogInfo::default()
            },
        }
    }

    /// The method of the response handed out last, as the access log
    /// has it (`-` when none was read), without building [`LogInfo`]: for
    /// a driver's per-request counters.
    pub fn last_method(&self) -> &str {
        match (&self.last_req, &self.last_reject) {
            (Some(r), _) => r.method.as_str(),
            (None, Some((method, _))) => method,
            (None, None) => "-",
        }
    }

    /// Decides the next step.
    pub fn next(&mut self, cfg: &SessionConfig) -> Step {
        match self.state {
            State::Closed => return Step::Close,
            State::AwaitAuth
            | State::AwaitOpen
            | State::AwaitList
            | State::AwaitFetch
            | State::AwaitSent { .. } => {
                debug_assert!(false, "next() called while a step is outstanding");
                return Step::NeedInput;
            }
            State::AwaitProxy => match proxy::parse(&self.buf) {
                proxy::Parsed::Incomplete => return Step::NeedInput,
                proxy::Parsed::Invalid => {
                    // No answer: whatever sent this is not the proxy we
                    // trust to speak first. Nothing was sent, so a reset
                    // on the close harms no response.
                    self.buf = Vec::new();
                    self.state = State::Closed;
                    return Step::Close;
                }
                proxy::Parsed::Done { client, len } => {
                    if client.is_some() {
                        self.client = client;
                    }
                    self.buf.drain(..len);
                    self.state = State::Reading;
                }
            },
            State::Reading => {}
        }
        if self.stream.is_some() {
            return match self.given.take() {
                Some(req) => self.serve(cfg, req),
                // A stream's session answers one request, then closes.
                None => Step::Close,
            };
        }
        if self.discard > 0 {
            return Step::NeedInput;
        }
        // RFC 9112 §2.2: ignore empty lines before a request line.
        let blank = self
            .buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(self.buf.len());
        self.buf.drain(..blank);
        if self.buf.is_empty() {
            return Step::NeedInput;
        }
        // The last request's allocation is reused: its log line (the only
        // reader of `last_req` after `sent`) has been written by now.
        let req = match request::parse_reusing(
            &self.buf,
            cfg.max_request_line,
            cfg.max_header_bytes,
            &mut self.last_req,
        ) {
            Parsed::Partial => return Step::NeedInput,
            Parsed::Rejected(r) => {
                self.unread_input = true;
                self.buf.clear();
                let head_only = r.method == "HEAD";
                self.last_req = None;
                self.last_reject = Some((r.method, r.target));
                return self.respond_error(cfg, r.status, false, false, head_only, &[]);
            }
            Parsed::Complete(req) => req,
        };
        self.buf.drain(..req.head_len);
        self.serve(cfg, req)
    }

    /// A whole request, parsed from HTTP/1.1 bytes or given as fields:
    /// its body's framing, then the checks, the rules and the open.
    fn serve(&mut self, cfg: &SessionConfig, req: Box<Request>) -> Step {
        let mut keep_alive = self.stream.is_none()
            && req.keep_alive
            && self.served + 1 < cfg.max_requests_per_connection;
        match req.body {
            BodyFraming::None => {}
            BodyFraming::Length(n) if n <= limits::MAX_DISCARD_BODY => {
                let have = (self.buf.len() as u64).min(n);
                self.buf.drain(..have as usize);
                self.discard = n - have;
            }
            BodyFraming::Length(_) | BodyFraming::Chunked => {
                keep_alive = false;
                self.unread_input = true;
                self.buf.clear();
            }
        }
        self.last_reject = None;
        self.refusal = None;
        self.authenticated = false;
        let head_only = req.method == Method::Head;
        let announce = req.minor_version == 0;
        if self.over_limit {
            self.last_req = Some(req);
            return self.respond_error(
                cfg,
                503,
                false,
                announce,
                head_only,
                &[("Retry-After", "1")],
            );
        }
        if let Method::Other(_) = req.method {
            self.last_req = Some(req);
            return self.respond_error(
                cfg,
                405,
                keep_alive,
                announce,
                head_only,
                &[("Allow", "GET, HEAD")],
            );
        }
        self.root = cfg.root_for(req.host.as_deref());
        let resolved = match path::target_path(&req.target) {
            None => Err(PathError::BadRequest),
            Some(target_path) => path::resolve(target_path, cfg.allow_dotfiles),
        };
        match resolved {
            Err(PathError::BadRequest) => {
                self.last_req = Some(req);
                self.respond_error(cfg, 400, false, announce, head_only, &[])
            }
            Err(PathError::Hidden) => {
                let req = match self.open_error_page(cfg, req, 404, keep_alive) {
                    Ok(step) => return step,
                    Err(req) => req,
                };
                self.last_req = Some(req);
                self.respond_error(cfg, 404, keep_alive, announce, head_only, &[])
            }
            Ok(resolved) => {
                if let Some(answer) = self.acme_answer(cfg, &resolved.rel) {
                    self.last_req = Some(req);
                    let ctx = self.ctx(cfg, keep_alive, announce, head_only);
                    return self.finish(match answer {
                        Some(body) => response::plain_text(&body, &ctx),
                        None => response::error(404, &ctx, &[]),
                    });
                }
                if let Some(location) = self.https_location(cfg, &req, &resolved.rel) {
                    self.last_req = Some(req);
                    let extra = [("Location", location.as_str())];
                    return self.respond_error(cfg, 308, keep_alive, announce, head_only, &extra);
                }
                let asked = crate::rules::Asked {
                    client: self.client.map(|a| a.ip()),
                    raw_path: path::target_path(&req.target).unwrap_or(b"/"),
                    query: req
                        .target
                        .iter()
                        .position(|&b| b == b'?')
                        .map_or(&b""[..], |i| &req.target[i + 1..]),
                    referer: req.referer.as_deref(),
                };
                // An answer without a file: the status and a header field
                // (a redirect's `Location`, a 401's `WWW-Authenticate`).
                let mut auth = None;
                let answer = match cfg.rules.check(&resolved.rel, &asked) {
                    Verdict::Serve { fallback, auth: a } => {
                        self.fallback = fallback.cloned();
                        auth = a.cloned();
                        None
                    }
                    Verdict::Refuse(status, why) => {
                        self.refusal = Some(why);
                        Some((status, None))
                    }
                    Verdict::Redirect(status, location) => {
                        Some((status, Some(("Location", location))))
                    }
                };
                let mut check = None;
                let answer = match (answer, auth) {
                    (None, Some(auth)) if self.granted_again(&auth, &req) => {
                        self.authenticated = true;
                        None
                    }
                    (None, Some(auth)) => {
                        match crate::auth::credentials(req.authorization.as_deref()) {
                            Ok(credentials) => {
                                check = Some(AuthCheck { auth, credentials });
                                None
                            }
                            Err(why) => {
                                if why == crate::auth::BadCredentials::Malformed {
                                    self.refusal = Some(crate::rules::Refusal::Password);
                                }
                                Some((401, Some(("WWW-Authenticate", auth.challenge()))))
                            }
                        }
                    }
                    (answer, _) => answer,
                };
                if let Some((status, field)) = answer {
                    // A refusal with a configured page (403): the page.
                    let req = match field {
                        Some(_) => req,
                        None => match self.open_error_page(cfg, req, status, keep_alive) {
                            Ok(step) => return step,
                            Err(req) => req,
                        },
                    };
                    self.last_req = Some(req);
                    let pair;
                    let extra: &[(&str, &str)] = match &field {
                        Some((name, value)) => {
                            pair = [(*name, value.as_str())];
                            &pair
                        }
                        None => &[],
                    };
                    return self.respond_error(cfg, status, keep_alive, announce, head_only, extra);
                }
                // NUL bytes were refused by `resolve`, so this cannot fail.
                let path = CString::new(resolved.rel).expect("path has no NUL");
                self.dir_request = resolved.is_dir_request;
                self.current_keep_alive = keep_alive;
                self.current = Some(req);
                if let Some(check) = check {
                    self.auth_path = Some(path);
                    self.state = State::AwaitAuth;
                    return Step::Authenticate(check);
                }
                self.state = State::AwaitOpen;
                Step::Open(OpenRequest {
                    path,
                    root: self.root,
                })
            }
        }
    }

    /// The driver's answer to [`Step::List`]: the rendered listing (see
    /// [`listing::render`]), or why the directory could not be listed
    /// (not found or not a directory: 404; EACCES: 403; ...). Always a
    /// [`Step::Respond`], whose body is in memory.
    pub fn listed(
        &mut self,
        cfg: &SessionConfig,
        result: Result<&listing::Listing, OpenError>,
    ) -> Step {
        assert_eq!(self.state, State::AwaitList, "listed() without Step::List");
        let (req, ctx) = self.take_current(cfg);
        let resp = match result {
            Ok(l) => {
                let vary = cfg
                    .compress
                    .as_ref()
                    .is_some_and(|c| c.typed(l.format.content_type()));
                self.coding = l.coding;
                response::for_listing(&req, l, vary, &ctx)
            }
            Err(e) => error_for(e.status(), &ctx),
        };
        self.last_req = Some(req);
        self.finish(resp)
    }

    /// The driver could not read the body of the response [`Session::next`]
    /// or [`Session::opened`] gave it, and has sent no byte of it, head
    /// included: this is the response to send in its place, a 500 (a 503
    /// with `Retry-After` when `errno` says the shortage is passing:
    /// ENOMEM, EAGAIN, ENOBUFS), on the same keep-alive terms, so the
    /// connection stays usable. Once any byte is out, a driver must close
    /// the connection instead: nothing correct can follow a head that
    /// promised a body.
    pub fn body_failed(&mut self, cfg: &SessionConfig, errno: i32) -> Response {
        let State::AwaitSent { keep_alive } = self.state else {
            panic!("body_failed() without Step::Respond");
        };
        let (announce, head_only) = self.last_req.as_ref().map_or((false, false), |r| {
            (r.minor_version == 0, r.method == Method::Head)
        });
        let busy = matches!(
            errno,
            12 /* ENOMEM */ | 11 /* EAGAIN */ | 105 /* ENOBUFS */
        );
        let step = if busy {
            self.respond_error(
                cfg,
                503,
                keep_alive,
                announce,
                head_only,
                &[("Retry-After", "1")],
            )
        } else {
            self.respond_error(cfg, 500, keep_alive, announce, head_only, &[])
        };
        match step {
            Step::Respond(r) => r,
            _ => unreachable!("respond_error always responds"),
        }
    }

    /// The driver has transmitted the whole response.
    pub fn sent(&mut self) {
        let State::AwaitSent { keep_alive } = self.state else {
            panic!("sent() without Step::Respond");
        };
        self.served += 1;
        self.state = if keep_alive {
            State::Reading
        } else {
            State::Closed
        };
    }

    /// Marks the session closed (peer went away, timeout, shutdown).
    pub fn close(&mut self) {
        self.state = State::Closed;
    }

    /// The current request, taken to be answered, and its response's
    /// context.
    fn take_current<'a>(&mut self, cfg: &'a SessionConfig) -> (Box<Request>, Ctx<'a>) {
        let req = self.current.take().expect("current request");
        let ctx = self.ctx(
            cfg,
            self.current_keep_alive,
            req.minor_version == 0,
            req.method == Method::Head,
        );
        (req, ctx)
    }

    fn ctx<'a>(
        &self,
        cfg: &'a SessionConfig,
        keep_alive: bool,
        announce: bool,
        head_only: bool,
    ) -> Ctx<'a> {
        Ctx {
            server: &cfg.server_name,
            extra: if self.tls && self.stream != Some(StreamProtocol::Http3) {
                &cfg.https_extra_headers
            } else {
                &cfg.extra_headers
            },
            keep_alive,
            announce_keep_alive: announce && keep_alive,
            head_only,
            seed: cfg.boundary_seed,
            charset: &cfg.charset,
            http2: self.stream.is_some(),
        }
    }

    fn respond_error(
        &mut self,
        cfg: &SessionConfig,
        status: u16,
        keep_alive: bool,
        announce: bool,
        head_only: bool,
        extra: &[(&str, &str)],
    ) -> Step {
        let ctx = self.ctx(cfg, keep_alive, announce, head_only);
        self.finish(response::error(status, &ctx, extra))
    }

    fn finish(&mut self, resp: Response) -> Step {
        self.last_status = resp.status;
        self.last_coding = self.coding.take();
        self.state = State::AwaitSent {
            keep_alive: resp.keep_alive,
        };
        if !resp.keep_alive {
            // Nothing after this response will be read as a request.
            if !self.buf.is_empty() || self.discard > 0 {
                self.unread_input = true;
            }
            self.buf.clear();
            self.discard = 0;
        }
        Step::Respond(resp)
    }
}

/// `Location` for a directory requested without its trailing slash: the
/// path with `/` appended, query preserved.
/// What `--redirect-https` needs of a host: a name or address, with no
/// byte that could make the `Location` mean another place.
fn plain_host(host: &[u8]) -> Option<&str> {
    // Without its port: `name:8080`, `[::1]:8080`.
    let h = match host.iter().rposition(|&b| b == b':') {
        Some(i) if !host.ends_with(b"]") && host[i + 1..].iter().all(u8::is_ascii_digit) => {
            &host[..i]
        }
        _ => host,
    };
    let ok = !h.is_empty()
        && h.iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    ok.then(|| std::str::from_utf8(h).ok()).flatten()
}

impl Session {
    /// An ACME HTTP-01 challenge on a plain connection while the server's
    /// own ACME client runs: `Some(Some(key authorization))` for a token
    /// being validated, `Some(None)` (404) for any other; `None` when the
    /// request is not one (or no client runs: then the document root
    /// serves the path, for an ACME client beside spindle).
    fn acme_answer(&self, cfg: &SessionConfig, rel: &[u8]) -> Option<Option<String>> {
        let tokens = cfg.acme_http01.as_ref()?;
        if self.tls {
            return None;
        }
        let token = rel.strip_prefix(crate::challenge::HTTP01_PREFIX)?;
        Some(tokens.answer(token))
    }

    /// `--redirect-https`'s answer for this request, if it has one: not
    /// over TLS, not an ACME HTTP-01 challenge (RFC 8555 §8.3, which must
    /// stay reachable over plain HTTP), and a host to send it to.
    fn https_location(
        &self,
        cfg: &SessionConfig,
        req: &request::Request,
        rel: &[u8],
    ) -> Option<String> {
        let port = cfg.redirect_https?;
        if self.tls || rel.starts_with(b".well-known/acme-challenge/") {
            return None;
        }
        let host = plain_host(req.host.as_deref()?)?;
        let target = std::str::from_utf8(&req.target).ok()?;
        if !target.starts_with('/') || target.starts_with("//") {
            return None;
        }
        Some(match port {
            443 => format!("https://{host}{target}"),
            p => format!("https://{host}:{p}{target}"),
        })
    }
}

fn redirect_location(target: &[u8]) -> String {
    let path = path::target_path(target).unwrap_or(b"/");
    let query = target
        .iter()
        .position(|&b| b == b'?')
        .map_or(&b""[..], |i| &target[i..]);
    let mut s = String::from_utf8_lossy(path).into_owned();
    s.push('/');
    s.push_str(&String::from_utf8_lossy(query));
    s
}

mod auth;
mod edge;
mod open;

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
