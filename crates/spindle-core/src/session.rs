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
//! Pipelined requests wait in the input buffer and are parsed one at a
//! time, after the previous response has been handed back with
//! [`Session::sent`], so responses always go out in request order.
//!
//! A session made with [`Session::behind_proxy`] first takes a PROXY
//! protocol header ([`crate::proxy`]) off the input, before the first
//! request: the client it names is then [`Session::client`]. A missing or
//! malformed header closes the connection without an answer.

use std::ffi::CString;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::encoding::{self, Encoding};
use crate::limits;
use crate::listing;
use crate::path::{self, PathError};
use crate::proxy;
use crate::request::{self, BodyFraming, Method, Parsed, Request};
use crate::response::{self, Ctx, FileKind, FileMeta, Representation, Response};
use crate::rules::Rules;

/// Settings shared by every session of a server.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub server_name: String,
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_requests_per_connection: u64,
    pub allow_dotfiles: bool,
    /// Header fields added to every response, as they go on the wire
    /// (`Name: value\r\n` each; checked by the driver's configuration),
    /// like nginx's `add_header ... always`.
    pub extra_headers: Vec<u8>,
    /// Codings served from precompressed sidecars (`file.br`, `file.zst`,
    /// `file.gz`), in the server's order of preference; empty: off.
    pub precompressed: Vec<Encoding>,
    /// A random number the driver picks at start, mixed into multipart
    /// boundaries (the core has no source of randomness of its own).
    pub boundary_seed: u64,
    /// Cache-Control, header fields and Content-Type by path glob.
    pub rules: Arc<Rules>,
    /// Pages (paths beneath the root) that answer these error statuses in
    /// place of the built-in ones.
    pub error_pages: Vec<(u16, CString)>,
    /// The charset named on text types; empty: none.
    pub charset: String,
    /// Virtual hosts: a lower-case name (or `*.suffix`) and the number of
    /// its document root (1 and up); a request whose `Host` names none of
    /// them is served from the server's root (0), as nginx's default
    /// server.
    pub hosts: Vec<(Vec<u8>, u16)>,
    /// List a directory whose index file is missing (`--autoindex`):
    /// [`Step::List`] instead of a 404.
    pub autoindex: bool,
}

impl SessionConfig {
    /// The document root for a `Host` value: its name lower-cased, without
    /// a port or a trailing dot; exact names first, then the longest
    /// `*.suffix` that matches.
    pub fn root_for(&self, host: Option<&[u8]>) -> u16 {
        let Some(h) = host else { return 0 };
        if self.hosts.is_empty() {
            return 0;
        }
        let name = if h.starts_with(b"[") {
            // An IPv6 literal, with or without a port.
            match h.iter().position(|&b| b == b']') {
                Some(i) => &h[..=i],
                None => h,
            }
        } else {
            match h.iter().rposition(|&b| b == b':') {
                Some(i) => &h[..i],
                None => h,
            }
        };
        let name = name.strip_suffix(b".").unwrap_or(name);
        let mut best: Option<(usize, u16)> = None;
        for (n, root) in &self.hosts {
            if let Some(suffix) = n.strip_prefix(b"*") {
                // `*.example.org` covers `a.example.org`, not the bare name.
                if name.len() > suffix.len()
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                    && best.is_none_or(|(l, _)| suffix.len() > l)
                {
                    best = Some((suffix.len(), *root));
                }
            } else if name.eq_ignore_ascii_case(n) {
                return *root;
            }
        }
        best.map_or(0, |(_, r)| r)
    }

    fn error_page(&self, status: u16) -> Option<&CString> {
        self.error_pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| p)
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            server_name: "spindle".to_string(),
            max_request_line: limits::DEFAULT_MAX_REQUEST_LINE,
            max_header_bytes: limits::DEFAULT_MAX_HEADER_BYTES,
            max_requests_per_connection: limits::DEFAULT_MAX_REQUESTS_PER_CONNECTION,
            allow_dotfiles: false,
            extra_headers: Vec::new(),
            precompressed: Vec::new(),
            boundary_seed: 0,
            rules: Arc::default(),
            error_pages: Vec::new(),
            charset: "utf-8".into(),
            hosts: Vec::new(),
            autoindex: false,
        }
    }
}

/// A path the driver must open beneath the document root (with
/// `openat2(RESOLVE_BENEATH)` or an equally strict walk) and `fstat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// Relative path, never empty, never absolute, no `..`.
    pub path: CString,
    /// Which document root: 0 is the server's, `n` the `n`th virtual
    /// host's (`SessionConfig::hosts`).
    pub root: u16,
}

impl OpenRequest {
    /// A key that names this file among every root's: the path itself
    /// for the server's root (no allocation), else a NUL (never in a
    /// path), the root's number, and the path.
    pub fn cache_key(&self) -> std::borrow::Cow<'_, [u8]> {
        if self.root == 0 {
            return std::borrow::Cow::Borrowed(self.path.as_bytes());
        }
        let mut k = Vec::with_capacity(self.path.as_bytes().len() + 3);
        k.push(0);
        k.extend_from_slice(&self.root.to_le_bytes());
        k.extend_from_slice(self.path.as_bytes());
        std::borrow::Cow::Owned(k)
    }
}

/// A directory the driver must list (`--autoindex`): open it beneath the
/// root as it opens files, read its entries (at most
/// [`listing::MAX_ENTRIES`], without blocking its event loop), render them
/// with [`listing::render`], then call [`Session::listed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Relative path of the directory: `.` for the root, else as in
    /// [`OpenRequest::path`].
    pub path: CString,
    /// The representation the client asked for (`Accept`).
    pub format: listing::Format,
    /// Which document root, as [`OpenRequest::root`].
    pub root: u16,
}

impl ListRequest {
    /// The directory's path as [`listing::render`] wants it: empty for
    /// the root.
    pub fn dir(&self) -> &[u8] {
        match self.path.as_bytes() {
            b"." => b"",
            p => p,
        }
    }
}

/// Why a driver could not open a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// ENOENT, ENOTDIR, ELOOP, EXDEV (escapes the root), ENAMETOOLONG: 404.
    NotFound,
    /// EACCES, EPERM: 403.
    Forbidden,
    /// EMFILE, ENFILE, ENOMEM: 503, try later.
    Busy,
    /// Anything else: 500.
    Other,
}

impl OpenError {
    /// Classifies an errno from `openat2`/`fstat`.
    pub fn from_errno(errno: i32) -> OpenError {
        match errno {
            2 /* ENOENT */ | 20 /* ENOTDIR */ | 40 /* ELOOP */ | 18 /* EXDEV */
            | 36 /* ENAMETOOLONG */ | 6 /* ENXIO */ => OpenError::NotFound,
            13 /* EACCES */ | 1 /* EPERM */ => OpenError::Forbidden,
            24 /* EMFILE */ | 23 /* ENFILE */ | 12 /* ENOMEM */ | 11 /* EAGAIN */ => OpenError::Busy,
            _ => OpenError::Other,
        }
    }
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Step {
    /// Receive more bytes, then [`Session::feed`] them.
    NeedInput,
    /// Open this path, then call [`Session::opened`].
    Open(OpenRequest),
    /// List this directory, then call [`Session::listed`] (only from
    /// [`Session::opened`], with `autoindex` on).
    List(ListRequest),
    /// Transmit this response, then call [`Session::sent`].
    Respond(Response),
    /// Close the connection (after a lingering close, if the peer may
    /// still be sending).
    Close,
}

impl Step {
    /// The response, if this step is one.
    pub fn into_response(self) -> Option<Response> {
        match self {
            Step::Respond(r) => Some(r),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the PROXY header that must open the connection.
    AwaitProxy,
    Reading,
    AwaitOpen,
    AwaitList,
    AwaitSent {
        keep_alive: bool,
    },
    Closed,
}

/// What the access log needs of the last response.
#[derive(Debug, Clone, Default)]
pub struct LogInfo {
    pub method: String,
    pub target: Vec<u8>,
    pub minor_version: u8,
    pub status: u16,
    pub referer: Option<Vec<u8>>,
    pub user_agent: Option<Vec<u8>>,
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
            client: None,
            error_page: None,
            root: 0,
            over_limit: false,
            dir_request: false,
        }
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
    /// one its header named, or else the proxy's. None on other sessions,
    /// whose driver asks the socket for its peer.
    pub fn client(&self) -> Option<SocketAddr> {
        self.client
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
            State::AwaitOpen | State::AwaitList => !self.current_keep_alive,
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
            },
            (None, Some((method, target))) => LogInfo {
                method: method.clone(),
                target: target.clone(),
                minor_version: 1,
                status: self.last_status,
                ..LogInfo::default()
            },
            (None, None) => LogInfo {
                status: self.last_status,
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
            State::AwaitOpen | State::AwaitList | State::AwaitSent { .. } => {
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
        let mut keep_alive = req.keep_alive && self.served + 1 < cfg.max_requests_per_connection;
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
                if let Some(page) = cfg.error_page(404) {
                    self.current_keep_alive = keep_alive;
                    self.current = Some(req);
                    self.state = State::AwaitOpen;
                    self.error_page = Some(404);
                    return Step::Open(OpenRequest {
                        path: page.clone(),
                        root: self.root,
                    });
                }
                self.last_req = Some(req);
                self.respond_error(cfg, 404, keep_alive, announce, head_only, &[])
            }
            Ok(resolved) => {
                // NUL bytes were refused by `resolve`, so this cannot fail.
                let path = CString::new(resolved.rel).expect("path has no NUL");
                self.dir_request = resolved.is_dir_request;
                self.current_keep_alive = keep_alive;
                self.current = Some(req);
                self.state = State::AwaitOpen;
                Step::Open(OpenRequest {
                    path,
                    root: self.root,
                })
            }
        }
    }

    /// The driver's answer to [`Step::Open`]: the response to transmit
    /// ([`Step::Respond`]), or, while looking for a precompressed sidecar,
    /// the next path to open ([`Step::Open`], answered here again). The
    /// driver sends the file of the last successful open.
    pub fn opened(
        &mut self,
        cfg: &SessionConfig,
        open_path: &OpenRequest,
        result: Result<FileMeta, OpenError>,
    ) -> Step {
        assert_eq!(self.state, State::AwaitOpen, "opened() without Step::Open");
        let vary = !cfg.precompressed.is_empty();
        let mut rep = Representation {
            encoding: None,
            vary,
        };
        let mut chosen = None;
        match (self.sidecar.take(), &result) {
            (Some(sc), Ok(m)) if sc.trying.is_some() && newer_file(m, &sc.src) => {
                // This sidecar will do: it is sent, typed as the resource.
                rep.encoding = sc.trying;
                chosen = Some(sc);
            }
            // Missing, not a file, or older than the resource: the next.
            (Some(sc), _) if sc.trying.is_some() => return self.next_sidecar(sc),
            (None, Ok(m)) if vary && m.kind == FileKind::Regular => {
                let req = self.current.as_ref().expect("current request");
                if matches!(req.method, Method::Get | Method::Head) {
                    let todo =
                        encoding::negotiate(req.accept_encoding.as_deref(), &cfg.precompressed);
                    if !todo.is_empty() {
                        let sc = Box::new(Sidecar {
                            src_path: open_path.path.clone(),
                            src: *m,
                            todo,
                            trying: None,
                        });
                        return self.next_sidecar(sc);
                    }
                }
            }
            // No search, or its end: the resource's own open, again.
            _ => {}
        }
        if cfg.autoindex && self.dir_request && result == Err(OpenError::NotFound) {
            // No index file: the directory's listing instead (a file
            // where the directory should be fails the list with 404).
            if let Some(dir) = open_path.path.as_bytes().strip_suffix(path::INDEX_FILE) {
                let dir = dir.strip_suffix(b"/").unwrap_or(dir);
                let req = self.current.as_ref().expect("current request");
                let format = crate::listing::negotiate(req.accept.as_deref());
                let path = CString::new(if dir.is_empty() { &b"."[..] } else { dir })
                    .expect("path has no NUL");
                self.state = State::AwaitList;
                return Step::List(ListRequest {
                    path,
                    format,
                    root: self.root,
                });
            }
        }
        let rel_path = chosen
            .as_ref()
            .map_or(open_path.path.as_bytes(), |sc| sc.src_path.as_bytes());
        let error_page = self.error_page.take();
        if error_page.is_none() {
            // An error with a configured page: open the page instead.
            let status = match &result {
                Ok(m) if m.kind == FileKind::Regular => None,
                Ok(m)
                    if m.kind == FileKind::Directory
                        && !open_path.path.as_bytes().ends_with(path::INDEX_FILE) =>
                {
                    None
                }
                Ok(_) | Err(OpenError::NotFound) => Some(404),
                Err(OpenError::Forbidden) => Some(403),
                Err(OpenError::Busy) => Some(503),
                Err(OpenError::Other) => Some(500),
            };
            if let Some(page) = status.and_then(|st| cfg.error_page(st)) {
                self.error_page = status;
                return Step::Open(OpenRequest {
                    path: page.clone(),
                    root: self.root,
                });
            }
        }
        let req = self.current.take().expect("current request");
        let keep_alive = self.current_keep_alive;
        let ctx = self.ctx(
            cfg,
            keep_alive,
            req.minor_version == 0,
            req.method == Method::Head,
        );
        if let Some(status) = error_page {
            // The page of an error: its bytes if it is a file, else the
            // built-in page.
            let extra: &[(&str, &str)] = if status == 503 {
                &[("Retry-After", "1")]
            } else {
                &[]
            };
            let resp = match result {
                Ok(m) if m.kind == FileKind::Regular => {
                    response::error_page(status, &m, open_path.path.as_bytes(), &ctx, extra)
                }
                _ => response::error(status, &ctx, extra),
            };
            self.last_req = Some(req);
            return self.finish(resp);
        }
        let resp = match result {
            Ok(meta) => match meta.kind {
                FileKind::Regular => {
                    let rules = cfg.rules.apply(rel_path);
                    response::for_file(&req, &meta, rel_path, rep, &rules, &ctx)
                }
                FileKind::Directory if !open_path.path.as_bytes().ends_with(path::INDEX_FILE) => {
                    let location = redirect_location(&req.target);
                    response::error(301, &ctx, &[("Location", &location)])
                }
                _ => response::error(404, &ctx, &[]),
            },
            Err(OpenError::NotFound) => response::error(404, &ctx, &[]),
            Err(OpenError::Forbidden) => response::error(403, &ctx, &[]),
            Err(OpenError::Busy) => response::error(503, &ctx, &[("Retry-After", "1")]),
            Err(OpenError::Other) => response::error(500, &ctx, &[]),
        };
        self.last_req = Some(req);
        self.finish(resp)
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
        let req = self.current.take().expect("current request");
        let ctx = self.ctx(
            cfg,
            self.current_keep_alive,
            req.minor_version == 0,
            req.method == Method::Head,
        );
        let resp = match result {
            Ok(l) => response::for_listing(&req, l, &ctx),
            Err(OpenError::NotFound) => response::error(404, &ctx, &[]),
            Err(OpenError::Forbidden) => response::error(403, &ctx, &[]),
            Err(OpenError::Busy) => response::error(503, &ctx, &[("Retry-After", "1")]),
            Err(OpenError::Other) => response::error(500, &ctx, &[]),
        };
        self.last_req = Some(req);
        self.finish(resp)
    }

    /// Opens the next sidecar of a search, or the resource itself again
    /// when none is left.
    fn next_sidecar(&mut self, mut sc: Box<Sidecar>) -> Step {
        let path = if sc.todo.is_empty() {
            sc.trying = None;
            sc.src_path.clone()
        } else {
            let e = sc.todo.remove(0);
            sc.trying = Some(e);
            let mut p = sc.src_path.as_bytes().to_vec();
            p.extend_from_slice(e.suffix().as_bytes());
            CString::new(p).expect("path has no NUL")
        };
        self.sidecar = Some(sc);
        Step::Open(OpenRequest {
            path,
            root: self.root,
        })
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

    fn ctx<'a>(
        &self,
        cfg: &'a SessionConfig,
        keep_alive: bool,
        announce: bool,
        head_only: bool,
    ) -> Ctx<'a> {
        Ctx {
            server: &cfg.server_name,
            extra: &cfg.extra_headers,
            keep_alive,
            announce_keep_alive: announce && keep_alive,
            head_only,
            seed: cfg.boundary_seed,
            charset: &cfg.charset,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(size: u64) -> FileMeta {
        FileMeta {
            size,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 5,
            ino: 42,
            kind: FileKind::Regular,
        }
    }

    /// The proxy's own address, in the PROXY tests.
    fn peer() -> SocketAddr {
        "10.0.0.2:41000".parse().unwrap()
    }

    fn head_str(r: &Response) -> String {
        String::from_utf8_lossy(&r.head).into_owned()
    }

    /// Plays the driver for one request with precompressed sidecars on:
    /// `world` says what each path is (absent: not found). Returns the
    /// paths opened, in order, and the response.
    fn sidecar_run(
        accept: &str,
        method: &str,
        world: &[(&str, FileMeta)],
    ) -> (Vec<String>, Response) {
        let cfg = SessionConfig {
            precompressed: Encoding::ALL.to_vec(),
            ..SessionConfig::default()
        };
        let mut s = Session::new();
        let ae = if accept.is_empty() {
            String::new()
        } else {
            format!("Accept-Encoding: {accept}\r\n")
        };
        s.feed(format!("{method} /app.js HTTP/1.1\r\nHost: x\r\n{ae}\r\n").as_bytes());
        let Step::Open(mut o) = s.next(&cfg) else {
            panic!("open expected")
        };
        let mut opened = Vec::new();
        loop {
            let p = String::from_utf8(o.path.as_bytes().to_vec()).unwrap();
            let found = world
                .iter()
                .find(|(n, _)| *n == p)
                .map(|(_, m)| *m)
                .ok_or(OpenError::NotFound);
            opened.push(p);
            assert!(opened.len() <= 5, "{opened:?}");
            match s.opened(&cfg, &o, found) {
                Step::Respond(r) => return (opened, r),
                Step::Open(next) => o = next,
                other => panic!("{other:?}"),
            }
        }
    }

    fn at(size: u64, mtime_sec: i64) -> FileMeta {
        FileMeta {
            mtime_sec,
            ..meta(size)
        }
    }

    #[test]
    fn hosts_pick_roots() {
        let cfg = SessionConfig {
            hosts: vec![
                (b"a.test".to_vec(), 1),
                (b"*.test".to_vec(), 2),
                (b"*.b.test".to_vec(), 3),
                (b"[::1]".to_vec(), 4),
            ],
            ..SessionConfig::default()
        };
        let r = |h: &[u8]| cfg.root_for(Some(h));
        assert_eq!(r(b"a.test"), 1);
        assert_eq!(r(b"A.TEST:80"), 1);
        assert_eq!(r(b"a.test."), 1);
        assert_eq!(r(b"x.a.test"), 2, "the wildcard, not the exact name");
        assert_eq!(r(b"x.b.test"), 3, "the longest wildcard");
        assert_eq!(r(b"test"), 0, "a wildcard does not cover its bare name");
        assert_eq!(r(b"[::1]:8080"), 4);
        assert_eq!(r(b"other"), 0);
        assert_eq!(r(b""), 0);
        assert_eq!(cfg.root_for(None), 0);
        let mut s = Session::new();
        s.feed(b"GET /x HTTP/1.1\r\nHost: q.b.test\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!((o.root, &o.cache_key()[..3]), (3, &[0, 3, 0][..]));
    }

    #[test]
    fn error_pages_replace_the_built_in_ones() {
        let cfg = SessionConfig {
            error_pages: vec![(404, c"e/404.html".into()), (503, c"e/503.html".into())],
            ..SessionConfig::default()
        };
        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /.git HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n");
        // Missing: the page, with 404.
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
            panic!()
        };
        assert_eq!(p.path.as_bytes(), b"e/404.html");
        let r = s.opened(&cfg, &p, Ok(meta(70))).into_response().unwrap();
        assert_eq!((r.status, r.file), (404, Some((0, 70))));
        s.sent();
        // Hidden: the same page, without opening the hidden path.
        let Step::Open(p) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!(p.path.as_bytes(), b"e/404.html");
        let r = s.opened(&cfg, &p, Ok(meta(70))).into_response().unwrap();
        assert_eq!(r.status, 404);
        s.sent();
        // Busy: the 503 page keeps its Retry-After.
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::Busy)) else {
            panic!()
        };
        let r = s.opened(&cfg, &p, Ok(meta(5))).into_response().unwrap();
        assert_eq!(r.status, 503);
        assert!(head_str(&r).contains("Retry-After: 1\r\n"));
        s.sent();
        // A page that is missing itself: the built-in one, no loop.
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let Step::Open(p) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
            panic!()
        };
        let r = s
            .opened(&cfg, &p, Err(OpenError::NotFound))
            .into_response()
            .unwrap();
        assert_eq!((r.status, r.file), (404, None));
        assert!(head_str(&r).contains("<h1>404 Not Found</h1>"));
    }

    #[test]
    fn sidecar_chosen_by_accept_encoding() {
        let world = [
            ("app.js", at(1000, 10)),
            ("app.js.br", at(300, 11)),
            ("app.js.gz", at(400, 10)),
        ];
        let (opened, r) = sidecar_run("gzip, br", "GET", &world);
        assert_eq!(opened, ["app.js", "app.js.br"]);
        let h = head_str(&r);
        assert!(h.contains("Content-Encoding: br\r\n"), "{h}");
        assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
        assert!(h.contains("Content-Type: text/javascript"), "{h}");
        assert!(h.contains("Content-Length: 300\r\n"), "{h}");
        assert!(h.contains("-br\"\r\n"), "ETag names the coding: {h}");
        assert_eq!(r.file, Some((0, 300)));

        // gzip preferred by q-value; zstd missing is skipped.
        let (opened, r) = sidecar_run("br;q=0.5, zstd;q=0.9, gzip", "GET", &world);
        assert_eq!(opened, ["app.js", "app.js.gz"]);
        assert!(head_str(&r).contains("Content-Encoding: gzip\r\n"));
        assert_eq!(r.file, Some((0, 400)));
    }

    #[test]
    fn stale_or_missing_sidecars_fall_back_to_the_file() {
        // The .br is older than the file; no .zst; the .gz is a directory.
        let mut dir = at(4096, 20);
        dir.kind = FileKind::Directory;
        let world = [
            ("app.js", at(1000, 10)),
            ("app.js.br", at(300, 9)),
            ("app.js.gz", dir),
        ];
        let (opened, r) = sidecar_run("br, zstd, gzip", "GET", &world);
        assert_eq!(
            opened,
            ["app.js", "app.js.br", "app.js.zst", "app.js.gz", "app.js"]
        );
        let h = head_str(&r);
        assert!(!h.contains("Content-Encoding"), "{h}");
        assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
        assert_eq!(r.file, Some((0, 1000)));
    }

    #[test]
    fn no_acceptable_coding_opens_once() {
        let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
        for accept in ["", "identity", "br;q=0", "garbage;;q=x", "deflate"] {
            let (opened, r) = sidecar_run(accept, "GET", &world);
            assert_eq!(opened, ["app.js"], "{accept}");
            let h = head_str(&r);
            assert!(!h.contains("Content-Encoding"), "{h}");
            assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
        }
        // A missing resource: 404 at once, no sidecar looked for.
        let (opened, r) = sidecar_run("br", "GET", &[("app.js.br", at(3, 11))]);
        assert_eq!(opened, ["app.js"]);
        assert_eq!(r.status, 404);
    }

    #[test]
    fn sidecar_head_and_range_apply_to_the_encoded_bytes() {
        let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
        let (_, r) = sidecar_run("br", "HEAD", &world);
        assert!(head_str(&r).contains("Content-Length: 300\r\n"));
        assert_eq!(r.file, None);
        let cfg = SessionConfig {
            precompressed: vec![Encoding::Br],
            ..SessionConfig::default()
        };
        let mut s = Session::new();
        s.feed(
            b"GET /app.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\nRange: bytes=-100\r\n\r\n",
        );
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let Step::Open(o2) = s.opened(&cfg, &o, Ok(world[0].1)) else {
            panic!()
        };
        assert_eq!(o2.path.as_bytes(), b"app.js.br");
        let r = s.opened(&cfg, &o2, Ok(world[1].1)).into_response().unwrap();
        assert_eq!(r.status, 206);
        assert!(head_str(&r).contains("Content-Range: bytes 200-299/300\r\n"));
        assert_eq!(r.file, Some((200, 100)));
    }

    #[test]
    fn sidecar_conditionals_use_the_coded_etag() {
        let world = [("app.js", at(1000, 10)), ("app.js.br", at(300, 11))];
        let (_, r) = sidecar_run("br", "GET", &world);
        let h = head_str(&r);
        let tag = h
            .lines()
            .find_map(|l| l.strip_prefix("ETag: "))
            .unwrap()
            .to_string();
        let cfg = SessionConfig {
            precompressed: vec![Encoding::Br],
            ..SessionConfig::default()
        };
        let ask = |accept: &str| {
            let mut s = Session::new();
            s.feed(
                format!("GET /app.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {accept}\r\nIf-None-Match: {tag}\r\n\r\n")
                    .as_bytes(),
            );
            let Step::Open(mut o) = s.next(&cfg) else {
                panic!()
            };
            loop {
                let found = world
                    .iter()
                    .find(|(n, _)| n.as_bytes() == o.path.as_bytes())
                    .map(|(_, m)| *m)
                    .ok_or(OpenError::NotFound);
                match s.opened(&cfg, &o, found) {
                    Step::Respond(r) => return r,
                    Step::Open(n) => o = n,
                    _ => panic!(),
                }
            }
        };
        let r = ask("br");
        assert_eq!(r.status, 304);
        assert!(head_str(&r).contains("Vary: Accept-Encoding\r\n"));
        // The identity representation has another tag: a full 200.
        assert_eq!(ask("identity").status, 200);
    }

    #[test]
    fn body_failed_answers_500_and_keeps_the_connection() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!("open expected")
        };
        let r = s
            .opened(&cfg, &o, Ok(meta(1000)))
            .into_response()
            .expect("response");
        assert_eq!(r.status, 200);
        let e = s.body_failed(&cfg, 5 /* EIO */);
        assert_eq!(e.status, 500);
        assert!(e.keep_alive);
        assert!(e.file.is_none());
        assert!(
            head_str(&e).starts_with("HTTP/1.1 500 "),
            "{}",
            head_str(&e)
        );
        assert_eq!(s.log_info().status, 500);
        s.sent();
        // The next pipelined request is served as usual.
        let Step::Open(o) = s.next(&cfg) else {
            panic!("open expected")
        };
        assert_eq!(o.path.as_bytes(), b"b");
    }

    #[test]
    fn body_failed_on_a_shortage_is_503_and_keeps_close_terms() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!("open expected")
        };
        s.opened(&cfg, &o, Ok(meta(1000)))
            .into_response()
            .expect("response");
        let e = s.body_failed(&cfg, 12 /* ENOMEM */);
        assert_eq!(e.status, 503);
        assert!(!e.keep_alive);
        assert!(
            head_str(&e).contains("Retry-After: 1\r\n"),
            "{}",
            head_str(&e)
        );
        s.sent();
        assert!(matches!(s.next(&cfg), Step::Close));
    }

    #[test]
    fn proxy_header_comes_off_before_the_first_request() {
        let cfg = SessionConfig::default();
        let mut s = Session::behind_proxy(peer());
        assert!(s.mid_request(), "the header is under the header timeout");
        assert!(s.wants_input(&cfg));
        assert!(!s.closes_after_response());
        assert!(matches!(s.next(&cfg), Step::NeedInput));
        s.feed(b"PROXY TCP4 192.0.2.7 10.0.0.1 5");
        assert!(matches!(s.next(&cfg), Step::NeedInput));
        assert_eq!(s.client(), Some(peer()));
        // The header's end and the first request in one piece.
        s.feed(b"6324 443\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!("open expected")
        };
        assert_eq!(o.path.as_bytes(), b"a");
        assert_eq!(s.client(), Some("192.0.2.7:56324".parse().unwrap()));
        s.opened(&cfg, &o, Ok(meta(3)));
        s.sent();
        // A second PROXY line is a request like any other: refused (505,
        // as httparse reads `443` where the version belongs).
        s.feed(b"PROXY TCP4 198.51.100.1 10.0.0.1 1 2\r\n\r\n");
        let Step::Respond(r) = s.next(&cfg) else {
            panic!("respond expected")
        };
        assert_eq!(r.status, 505);
        assert_eq!(s.client(), Some("192.0.2.7:56324".parse().unwrap()));
    }

    #[test]
    fn proxy_local_keeps_the_peer() {
        let cfg = SessionConfig::default();
        let mut s = Session::behind_proxy(peer());
        let mut h = crate::proxy::V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[0x20, 0x00, 0, 0]);
        h.extend_from_slice(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        s.feed(&h);
        assert!(matches!(s.next(&cfg), Step::Open(_)));
        assert_eq!(s.client(), Some(peer()));
        assert_eq!(Session::new().client(), None);
    }

    #[test]
    fn missing_or_bad_proxy_header_closes_without_an_answer() {
        let cfg = SessionConfig::default();
        for input in [
            &b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"PROXY TCP4 nonsense\r\n",
            b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff",
        ] {
            let mut s = Session::behind_proxy(peer());
            s.feed(input);
            assert!(matches!(s.next(&cfg), Step::Close));
            assert!(!s.linger_advised());
            assert!(!s.wants_input(&cfg));
        }
        // A plain session takes a PROXY line for a bad request.
        let mut s = Session::new();
        s.feed(b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n\r\n");
        let Step::Respond(r) = s.next(&cfg) else {
            panic!("respond expected")
        };
        assert_eq!(r.status, 505);
    }

    #[test]
    fn pipelined_requests_in_order() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
        for name in ["a", "b"] {
            let Step::Open(o) = s.next(&cfg) else {
                panic!()
            };
            assert_eq!(o.path.as_bytes(), name.as_bytes());
            let r = s
                .opened(&cfg, &o, Ok(meta(3)))
                .into_response()
                .expect("response");
            assert_eq!(r.status, 200);
            assert_eq!(r.file, Some((0, 3)));
            s.sent();
        }
        assert!(matches!(s.next(&cfg), Step::NeedInput));
        assert!(!s.mid_request());
    }

    #[test]
    fn body_is_discarded_across_feeds() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123");
        let Step::Respond(r) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!(r.status, 405);
        assert!(head_str(&r).contains("Allow: GET, HEAD"));
        assert!(r.keep_alive);
        s.sent();
        assert!(matches!(s.next(&cfg), Step::NeedInput));
        s.feed(b"456789GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!(o.path.as_bytes(), b"b");
    }

    #[test]
    fn closes_after_response_follows_keep_alive() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        assert!(!s.closes_after_response());
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        assert!(!s.closes_after_response(), "HTTP/1.1 keeps the connection");
        s.opened(&cfg, &o, Ok(meta(3)))
            .into_response()
            .expect("response");
        assert!(!s.closes_after_response());
        s.sent();
        s.feed(b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        assert!(
            s.closes_after_response(),
            "Connection: close, before the open"
        );
        s.opened(&cfg, &o, Ok(meta(3)))
            .into_response()
            .expect("response");
        assert!(s.closes_after_response());
        s.sent();
        assert!(s.closes_after_response());
        assert!(matches!(s.next(&cfg), Step::Close));

        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.0\r\n\r\n");
        assert!(matches!(s.next(&cfg), Step::Open(_)));
        assert!(s.closes_after_response(), "HTTP/1.0 without keep-alive");
    }

    #[test]
    fn chunked_body_closes() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"GET /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let r = s
            .opened(&cfg, &o, Ok(meta(3)))
            .into_response()
            .expect("response");
        assert!(!r.keep_alive);
        assert!(head_str(&r).contains("Connection: close"));
        s.sent();
        assert!(matches!(s.next(&cfg), Step::Close));
    }

    #[test]
    fn directory_redirect_and_errors() {
        let cfg = SessionConfig::default();
        let mut s = Session::new();
        s.feed(b"GET /d?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let mut m = meta(0);
        m.kind = FileKind::Directory;
        let r = s.opened(&cfg, &o, Ok(m)).into_response().expect("response");
        assert_eq!(r.status, 301);
        assert!(head_str(&r).contains("Location: /d/?x=1\r\n"));
        s.sent();
        s.feed(b"GET /../x HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Respond(r) = s.next(&cfg) else {
            panic!()
        };
        assert_eq!(r.status, 400);
        assert!(!r.keep_alive);
    }

    #[test]
    fn autoindex_lists_a_directory_without_index() {
        use crate::listing::{render, Entry, Format};
        let on = SessionConfig {
            autoindex: true,
            ..SessionConfig::default()
        };
        let ask = |cfg: &SessionConfig, target: &str, extra: &str| {
            let mut s = Session::new();
            let extra = if extra.is_empty() {
                String::new()
            } else {
                format!("{extra}\r\n")
            };
            s.feed(format!("GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes());
            let Step::Open(o) = s.next(cfg) else { panic!() };
            let step = s.opened(cfg, &o, Err(OpenError::NotFound));
            (s, step)
        };
        // Off by default: 404.
        let (_, st) = ask(&SessionConfig::default(), "/d/", "");
        assert_eq!(st.into_response().unwrap().status, 404);
        // Only for a directory request.
        let (_, st) = ask(&on, "/d/index.html", "");
        assert_eq!(st.into_response().unwrap().status, 404);
        let (_, st) = ask(&on, "/", "");
        let Step::List(l) = st else { panic!() };
        assert_eq!(
            (l.path.as_bytes(), l.dir(), l.format),
            (&b"."[..], &b""[..], Format::Html)
        );
        let (mut s, st) = ask(&on, "/a/b/", "Accept: application/json");
        let Step::List(l) = st else { panic!() };
        assert_eq!((l.dir(), l.format), (&b"a/b"[..], Format::Json));
        let entries = vec![Entry {
            name: b"f".to_vec(),
            kind: FileKind::Regular,
            size: 1,
            mtime_sec: 0,
        }];
        let listing = render(l.dir(), entries, false, l.format, false);
        let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
        let h = head_str(&r);
        assert_eq!(r.status, 200);
        assert!(h.contains("Content-Type: application/json\r\n"), "{h}");
        assert!(h.contains("Vary: Accept\r\n"), "{h}");
        assert!(h.ends_with(std::str::from_utf8(&listing.body).unwrap()));
        assert!(r.file.is_none());
        s.sent();
        // If-None-Match: 304 without a body; HEAD: no body.
        let (mut s, _) = ask(
            &on,
            "/a/b/",
            &format!(
                "If-None-Match: {}\r\nAccept: application/json",
                listing.etag
            ),
        );
        let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
        assert_eq!((r.status, r.body_len), (304, 0));
        assert!(head_str(&r).contains(&format!("ETag: {}\r\n", listing.etag)));
        let mut s = Session::new();
        s.feed(b"HEAD /a/ HTTP/1.1\r\nHost: x\r\n\r\n");
        let Step::Open(o) = s.next(&on) else { panic!() };
        assert!(matches!(
            s.opened(&on, &o, Err(OpenError::NotFound)),
            Step::List(_)
        ));
        let r = s.listed(&on, Ok(&listing)).into_response().unwrap();
        assert_eq!((r.status, r.body_len), (200, 0));
        assert!(head_str(&r).ends_with("\r\n\r\n"));
        // A directory that cannot be read.
        let (mut s, _) = ask(&on, "/locked/", "");
        let r = s
            .listed(&on, Err(OpenError::Forbidden))
            .into_response()
            .unwrap();
        assert_eq!(r.status, 403);
    }

    #[test]
    fn conditionals() {
        let cfg = SessionConfig::default();
        let tag = response::etag(&meta(5));
        let lm = crate::date::fmt_unix(1_700_000_000);
        let cases = [
            (format!("If-None-Match: {tag}"), 304),
            (format!("If-None-Match: W/{tag}"), 304),
            ("If-None-Match: \"nope\"".to_string(), 200),
            (format!("If-Modified-Since: {lm}"), 304),
            (format!("If-Match: {tag}"), 200),
            ("If-Match: \"nope\"".to_string(), 412),
            (
                "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT".to_string(),
                412,
            ),
            ("Range: bytes=1-2".to_string(), 206),
            (format!("Range: bytes=1-2\r\nIf-Range: {tag}"), 206),
            ("Range: bytes=1-2\r\nIf-Range: \"old\"".to_string(), 200),
            (format!("Range: bytes=1-2\r\nIf-Range: {lm}"), 206),
            ("Range: bytes=9-".to_string(), 416),
        ];
        for (hdr, want) in cases {
            let mut s = Session::new();
            s.feed(format!("GET /f HTTP/1.1\r\nHost: x\r\n{hdr}\r\n\r\n").as_bytes());
            let Step::Open(o) = s.next(&cfg) else {
                panic!()
            };
            let r = s
                .opened(&cfg, &o, Ok(meta(5)))
                .into_response()
                .expect("response");
            assert_eq!(r.status, want, "{hdr}");
            if want == 206 {
                assert!(head_str(&r).contains("Content-Range: bytes 1-2/5\r\n"));
                assert_eq!(r.file, Some((1, 2)));
            }
            if want == 416 {
                assert!(head_str(&r).contains("Content-Range: bytes */5\r\n"));
            }
        }
    }

    /// Garbage, truncated and mutated requests never panic the core, and
    /// every step it asks for is one a driver can carry out.
    #[test]
    fn random_input_never_panics() {
        let cfg = SessionConfig::default();
        let seeds: &[&[u8]] = &[
            b"GET /a%20b?x HTTP/1.1\r\nHost: x\r\nRange: bytes=1-2\r\nIf-None-Match: \"a\", W/\"b\"\r\n\r\n",
            b"HEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
            b"GET http://h/..%2f HTTP/1.1\r\nHost: x\r\nIf-Range: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let mut input = seeds[round % seeds.len()].repeat(1 + (rnd() % 3) as usize);
            for _ in 0..(rnd() % 8) {
                let at = (rnd() as usize) % input.len();
                match rnd() % 4 {
                    0 => input[at] = rnd() as u8,
                    1 => input.truncate(at),
                    2 => input.insert(at, rnd() as u8),
                    _ => input.insert(at, b"\r\n%.:-,"[(rnd() % 7) as usize]),
                }
                if input.is_empty() {
                    break;
                }
            }
            let mut s = if round % 5 == 0 {
                input.splice(0..0, b"PROXY TCP6 ::1 ::2 1 2\r\n".iter().copied());
                Session::behind_proxy(peer())
            } else {
                Session::new()
            };
            for chunk in input.chunks(1 + (rnd() % 64) as usize) {
                s.feed(chunk);
                for _ in 0..64 {
                    match s.next(&cfg) {
                        Step::NeedInput | Step::Close => break,
                        Step::Open(o) => {
                            assert!(!o.path.as_bytes().is_empty());
                            assert!(!o.path.as_bytes().starts_with(b"/"));
                            assert!(!o
                                .path
                                .as_bytes()
                                .split(|&b| b == b'/')
                                .any(|seg| seg == b".."));
                            let r = s
                                .opened(&cfg, &o, Ok(meta(rnd() % 300)))
                                .into_response()
                                .expect("response");
                            if let Some((off, len)) = r.file {
                                assert!(len > 0 && off + len <= 300);
                            }
                            s.sent();
                        }
                        Step::List(_) => panic!("next() gave a listing"),
                        Step::Respond(r) => {
                            assert!(r.head.starts_with(b"HTTP/1.1 "));
                            s.sent();
                        }
                    }
                }
            }
        }
    }
}
