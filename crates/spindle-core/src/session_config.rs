//! What every session of a server is configured with ([`SessionConfig`]),
//! and the choice of a document root by `Host`.

use std::ffi::CString;
use std::sync::Arc;

use crate::encoding::Encoding;
use crate::fields::Fields;
use crate::limits;
use crate::rules::Rules;

/// Settings shared by every session of a server.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub server_name: String,
    pub max_request_line: usize,
    pub max_header_bytes: usize,
    pub max_requests_per_connection: u64,
    pub allow_dotfiles: bool,
    /// Header fields added to every response (checked by the driver's
    /// configuration, and parsed once: [`Fields::from_lines`]), like
    /// nginx's `add_header ... always`.
    pub extra_headers: Fields,
    /// What responses over TLS on TCP (HTTPS, HTTP/2 over TLS) carry
    /// instead: the same, and `Alt-Svc` when HTTP/3 is served.
    pub https_extra_headers: Fields,
    /// Codings served from precompressed sidecars (`file.br`, `file.zst`,
    /// `file.gz`), in the server's order of preference; empty: off.
    pub precompressed: Vec<Encoding>,
    /// Compression on the fly (`--compress`); `None`: off.
    pub compress: Option<crate::compress::CompressConfig>,
    /// A random number the driver picks at start, mixed into multipart
    /// boundaries (the core has no source of randomness of its own).
    pub boundary_seed: u64,
    /// Cache-Control, header fields and Content-Type by path glob.
    pub rules: Arc<Rules>,
    /// `--redirect-https`: a session that is not over TLS answers every
    /// request but ACME's HTTP-01 challenges with 308 to the same host and
    /// target over HTTPS, on this port (443: none in the URL).
    pub redirect_https: Option<u16>,
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
    /// [`Step::List`](crate::Step::List) instead of a 404.
    pub autoindex: bool,
    /// ACME HTTP-01 answers (`--acme-domain`): when set, a plain
    /// connection's `/.well-known/acme-challenge/TOKEN` is answered from
    /// here (200 or 404), never from the document root.
    pub acme_http01: Option<Arc<crate::challenge::Http01Tokens>>,
    /// A caching edge in front of an origin (`--origin`): a GET or HEAD of
    /// a file not found beneath the root is [`Step::Fetch`](crate::Step::Fetch)
    /// instead of a 404 (a rule's `fallback` still goes first).
    pub edge: bool,
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

    pub(crate) fn error_page(&self, status: u16) -> Option<&CString> {
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
            extra_headers: Fields::default(),
            https_extra_headers: Fields::default(),
            precompressed: Vec::new(),
            compress: None,
            boundary_seed: 0,
            rules: Arc::default(),
            error_pages: Vec::new(),
            charset: "utf-8".into(),
            hosts: Vec::new(),
            autoindex: false,
            redirect_https: None,
            acme_http01: None,
            edge: false,
        }
    }
}
