//! Command line and TOML configuration. Every limit the server enforces is
//! a key here or a named constant in `spindle_core::limits` or a backend.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

mod acme;
mod checks;
mod compress;
mod edge;
pub use compress::CompressSettings;
pub use edge::{EdgeSettings, STALE_MAX as EDGE_STALE_MAX};
mod file;
mod merge;
use checks::*;
pub use checks::{
    parse_log_format, parse_size, MAX_ADD_HEADERS, MAX_ADD_HEADER_BYTES, MAX_ERROR_PAGES,
};
use file::{FileConfig, RuleEntry};
use merge::*;

/// Default listen address: loopback only, so that a first run exposes
/// nothing.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_CHUNK_SIZE: u64 = 512 * 1024;
pub const DEFAULT_MAX_INFLIGHT: u32 = 64;
pub const DEFAULT_IO_THREADS: u32 = 32;
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16_384;
pub const DEFAULT_KEEPALIVE_TIMEOUT_SECS: f64 = 75.0;
pub const DEFAULT_HEADER_TIMEOUT_SECS: f64 = 20.0;
pub const DEFAULT_SEND_TIMEOUT_SECS: f64 = 60.0;
pub const DEFAULT_DRAIN_TIMEOUT_SECS: f64 = 10.0;
/// Open-file cache entries per worker (see `filecache`).
pub const DEFAULT_OPEN_FILE_CACHE: usize = 10_000;
pub const DEFAULT_OPEN_FILE_CACHE_VALID_SECS: f64 = 10.0;
/// Bytes of small-file contents the open-file cache keeps per worker.
pub const DEFAULT_SMALL_FILE_CACHE: u64 = 16 << 20;
/// Largest accepted `--small-file-cache`.
pub const MAX_SMALL_FILE_CACHE: u64 = 16 << 30;
/// Largest accepted `--open-file-cache`.
pub const MAX_OPEN_FILE_CACHE: usize = 1 << 20;
/// Smallest and largest accepted `--chunk-size`.
pub const MIN_CHUNK_SIZE: u64 = 4096;
pub const MAX_CHUNK_SIZE: u64 = 16 * 1024 * 1024;
/// Largest accepted `--max-inflight` (per worker).
pub const MAX_MAX_INFLIGHT: u32 = 4096;
/// Largest accepted `--workers` and `--io-threads`.
pub const MAX_WORKERS: u32 = 1024;
/// Most `--proxy-from` address blocks (each connection on a PROXY
/// listener is checked against all of them).
pub const MAX_PROXY_FROM: usize = 256;

/// The I/O backends. All share the protocol core; they differ only in how
/// bytes move between files and sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// io_uring: accept, recv, open, read, send and close all through the ring.
    IoUring,
    /// epoll, with `sendfile()` called in the event loop (blocks on a page-cache miss).
    LinuxSendfile,
    /// epoll, with disk reads done by a bounded pool of I/O threads.
    PosixAio,
    /// epoll, with native AIO O_DIRECT reads into /dev/shm, then `sendfile()`.
    LinuxAioSendfile,
}

/// What a backend can do beyond serving plain HTTP/1.1 (which all do). The
/// one table is [`BackendKind::caps`]; the configuration's checks and the
/// tests ask it rather than naming backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// Bodies read into memory and sent from there (`sendfile = false`,
    /// `--no-sendfile`): what encryption and framing need.
    Buffers,
    /// HTTPS listeners (`--tls-listen`): bodies encrypted from buffers.
    Https,
    /// HTTP/2 (ALPN `h2`, and h2c on plain listeners).
    Http2,
    /// Page-cache bodies sent zero-copy with `sendfile(2)`.
    Sendfile,
    /// Page-cache misses read with `O_DIRECT`.
    ODirect,
    /// `--first-miss` and adaptive `--max-inflight`: the first use of a file
    /// that misses the page cache is read by the ring, with O_DIRECT or not.
    FirstMiss,
}

impl BackendKind {
    /// Every backend, the default first.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::IoUring,
        BackendKind::LinuxSendfile,
        BackendKind::PosixAio,
        BackendKind::LinuxAioSendfile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::IoUring => "io-uring",
            BackendKind::LinuxSendfile => "linux-sendfile",
            BackendKind::PosixAio => "posix-aio",
            BackendKind::LinuxAioSendfile => "linux-aio-sendfile",
        }
    }

    /// The backend called `name` (as `--backend` spells it).
    pub fn from_name(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|b| b.name() == name)
    }

    /// What this backend can do: the one place it is declared.
    pub fn caps(self) -> &'static [Cap] {
        use Cap::*;
        match self {
            BackendKind::IoUring => &[Buffers, Https, Http2, Sendfile, ODirect, FirstMiss],
            BackendKind::LinuxSendfile => &[Sendfile],
            BackendKind::PosixAio => &[Buffers, Https, Http2, Sendfile],
            BackendKind::LinuxAioSendfile => &[Sendfile, ODirect],
        }
    }

    pub fn has(self, cap: Cap) -> bool {
        self.caps().contains(&cap)
    }

    /// The names of the backends that have `cap`, joined by `conj`
    /// ("and", "or").
    pub fn names_with(cap: Cap, conj: &str) -> String {
        let names: Vec<&str> = BackendKind::ALL
            .into_iter()
            .filter(|b| b.has(cap))
            .map(BackendKind::name)
            .collect();
        names.join(&format!(" {conj} "))
    }
}

/// What the io-uring backend does with a file's first page-cache miss
/// (see `recent.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FirstMiss {
    /// `cache` while the server's memory has room; once the page cache is
    /// full (caching a file would then evict another), `direct` for bodies
    /// of one chunk and `cache` for longer ones, whose sequential reads gain
    /// more from the kernel's readahead than `O_DIRECT` saves (io-uring).
    Auto,
    /// Read it with O_DIRECT: a file used once stays out of the page cache
    /// and the open-file cache; its second use (while remembered) caches it.
    Direct,
    /// Read it through the page cache, like nginx and lighttpd.
    Cache,
}

/// A switch given as a word (`--compress off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// How the io-uring backend sets the number of disk reads in flight on
/// a device (see `depth.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Depth {
    /// Measured while serving, per device, up to `--max-inflight`.
    Adaptive,
    /// Always `--max-inflight`.
    Fixed,
}

impl FirstMiss {
    pub fn name(self) -> &'static str {
        match self {
            FirstMiss::Auto => "auto",
            FirstMiss::Direct => "direct",
            FirstMiss::Cache => "cache",
        }
    }
}

/// spindle: a static-file web server (HTTP/1.1, HTTP/2, HTTPS) built on asynchronous I/O.
#[derive(Debug, Clone, Parser)]
#[command(name = "spindle", version, about, long_about = None)]
pub struct Cli {
    /// The directory to serve [default: .]
    pub root: Option<PathBuf>,
    /// Address to listen on (repeatable) [default: 127.0.0.1:8080, unless --tls-listen or --proxy-listen is given]
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,
    /// Address to serve HTTP on behind a load balancer (repeatable): each connection must come from --proxy-from and open with a PROXY protocol header (v1 or v2)
    #[arg(long, value_name = "ADDR")]
    pub proxy_listen: Vec<SocketAddr>,
    /// Address block of the proxies allowed on --proxy-listen (repeatable), e.g. 10.0.0.0/8 or 127.0.0.1
    #[arg(long, value_name = "CIDR")]
    pub proxy_from: Vec<String>,
    /// Address to serve HTTPS on (repeatable; io-uring backend)
    #[arg(long, value_name = "ADDR")]
    pub tls_listen: Vec<SocketAddr>,
    /// PEM certificate chain for HTTPS (leaf first)
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, RSA or EC)
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Worker threads, each with its own event loop [default: number of CPUs]
    #[arg(long, value_name = "N")]
    pub workers: Option<u32>,
    /// How bytes move from files to sockets [default: io-uring]
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Bytes per disk read, e.g. 512k or 1m [default: 512k]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Disk reads in flight per worker: the ceiling of the adaptive depth, or the depth itself with --depth fixed [default: 64]
    #[arg(long, value_name = "N")]
    pub max_inflight: Option<u32>,
    /// io-uring: disk reads in flight per device found by measurement while serving (adaptive), or always --max-inflight (fixed) [default: adaptive]
    #[arg(long, value_enum, value_name = "HOW")]
    pub depth: Option<Depth>,
    /// I/O threads of the posix-aio backend [default: 32]
    #[arg(long, value_name = "N")]
    pub io_threads: Option<u32>,
    /// Access log in Combined Log Format: a file path, or - for stdout
    #[arg(long, value_name = "PATH|-")]
    pub access_log: Option<String>,
    /// Started as root: switch to this user after binding the ports and opening the logs
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// TOML file with the same keys as these options; flags override it
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds an idle keep-alive connection is kept [default: 75]
    #[arg(long, value_name = "SECS")]
    pub keepalive_timeout: Option<f64>,
    /// Seconds a client has to send a whole request head [default: 20]
    #[arg(long, value_name = "SECS")]
    pub header_timeout: Option<f64>,
    /// Seconds a response may make no progress before the connection is dropped [default: 60]
    #[arg(long, value_name = "SECS")]
    pub send_timeout: Option<f64>,
    /// Seconds to finish in-flight responses after SIGINT/SIGTERM [default: 10]
    #[arg(long, value_name = "SECS")]
    pub drain_timeout: Option<f64>,
    /// Open connections across all workers; past it, accepting pauses [default: 16384]
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u32>,
    /// Access-log format: combined (nginx's and Apache's) or json (one object per line, with the request time in µs and where the body came from) [default: combined]
    #[arg(long, value_name = "FORMAT", value_parser = parse_log_format)]
    pub log_format: Option<spindle_core::accesslog::LogFormat>,
    /// Error log (startup, reloads, failures while serving): a file path [default: stderr, or the journal under systemd]
    #[arg(long, value_name = "PATH")]
    pub error_log: Option<String>,
    /// Least severe error-log lines written: error, warn or info [default: info]
    #[arg(long, value_name = "LEVEL", value_parser = crate::errlog::parse_level)]
    pub log_level: Option<crate::errlog::Level>,
    /// Bytes per second each response's body may go at, as nginx's limit_rate (e.g. "500k"); 0 for no limit [default: 0]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub limit_rate: Option<u64>,
    /// Body bytes each response sends at full speed before --limit-rate applies [default: 0]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub limit_rate_after: Option<u64>,
    /// Open connections one client address may hold across all workers; more get 503 and a close, as nginx's limit_conn (not on --proxy-listen listeners) [default: 0, no limit]
    #[arg(long, value_name = "N")]
    pub max_connections_per_ip: Option<u32>,
    /// Largest request head in bytes; larger gets 431 [default: 8192]
    #[arg(long, value_name = "BYTES")]
    pub max_header_size: Option<usize>,
    /// Serve files and directories whose names start with a dot
    #[arg(long)]
    pub dotfiles: bool,
    /// List a directory that has no index.html (HTML, or JSON for `Accept: application/json`) [default: off]
    #[arg(long)]
    pub autoindex: bool,
    /// Open descriptors of hot files kept per worker; 0 disables [default: 10000, bounded by the fd limit]
    #[arg(long, value_name = "N")]
    pub open_file_cache: Option<usize>,
    /// Seconds a cached descriptor is trusted to still be what its path names [default: 10]
    #[arg(long, value_name = "SECS")]
    pub open_file_cache_valid: Option<f64>,
    /// Bytes of small files (up to 16 KiB each) the open-file cache keeps in memory, per worker; 0 disables [default: 16m]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub small_file_cache: Option<u64>,
    /// io-uring: a file's first use reads what misses the page cache with O_DIRECT (direct), through the page cache (cache), or direct only once memory is full (auto) [default: auto]
    #[arg(long, value_enum, value_name = "HOW")]
    pub first_miss: Option<FirstMiss>,
    /// Add a header field to every response, as nginx's `add_header ... always` (repeatable), e.g. "Strict-Transport-Security: max-age=31536000"
    #[arg(long = "add-header", value_name = "NAME: VALUE")]
    pub add_header: Vec<String>,
    /// Send every body from a copy in memory, never by sendfile(2) from the page cache (io-uring, posix-aio); see docs/reliability.md
    #[arg(long)]
    pub no_sendfile: bool,
    /// Answer every request on a plain listener with 308 to the same host and path over HTTPS (the first --tls-listen's port), except ACME's /.well-known/acme-challenge/
    #[arg(long)]
    pub redirect_https: bool,
    /// Serve HTTP/1.1 only: no ALPN `h2` on HTTPS listeners, and a plain connection opening with the HTTP/2 preface is not taken as HTTP/2 (io-uring and posix-aio serve HTTP/2; the sendfile backends only HTTP/1.1)
    #[arg(long)]
    pub no_http2: bool,
    /// Serve HTTP/3 (QUIC) on the UDP port of the first --tls-listen, with its certificates, and advertise it by Alt-Svc on HTTPS responses (io-uring and posix-aio) [default: off]
    #[arg(long)]
    pub http3: bool,
    /// Serve `file.br`, `file.zst`, `file.gz` beside `file` to clients that accept them, in this order of preference, e.g. "br,zstd,gzip" [default: off]
    #[arg(long, value_name = "CODINGS", value_delimiter = ',')]
    pub precompressed: Vec<String>,
    /// Compress text, JavaScript, JSON, SVG and the like on the fly for clients that accept it: once per file version, off the workers, into --compress-cache, and served from there [default: on]
    #[arg(long, value_enum, value_name = "on|off")]
    pub compress: Option<OnOff>,
    /// Codings --compress makes, in order of preference [default: br,zstd,gzip]
    #[arg(long, value_name = "CODINGS", value_delimiter = ',')]
    pub compress_codings: Vec<String>,
    /// Media types --compress covers, `type/*` for a whole type [default: text/*, JavaScript, JSON, XML, SVG, WebAssembly, manifests, TrueType and OpenType fonts, icons]
    #[arg(long, value_name = "TYPES", value_delimiter = ',')]
    pub compress_types: Vec<String>,
    /// Smallest file --compress compresses [default: 256]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub compress_min_size: Option<u64>,
    /// Largest file --compress compresses [default: 64M]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub compress_max_size: Option<u64>,
    /// Where --compress keeps what it made [default: /var/cache/spindle/compress]
    #[arg(long, value_name = "DIR")]
    pub compress_cache: Option<PathBuf>,
    /// Most bytes --compress-cache holds; the least recently served go first [default: 1G]
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub compress_cache_size: Option<u64>,
    /// Helper threads that compress, at a lower priority than the workers [default: 1]
    #[arg(long, value_name = "N")]
    pub compress_threads: Option<u32>,
    /// Level per coding, e.g. "gzip=9,br=11,zstd=19" [default: those]
    #[arg(long, value_name = "CODING=N", value_delimiter = ',')]
    pub compress_levels: Vec<String>,
    /// Serve what is not beneath the root from this origin, caching it in --cache-dir: an HTTP or HTTPS URL, or an S3 bucket's (path style, with --origin-s3-region); repeatable, tried in order while one is down [default: none]
    #[arg(long, value_name = "URL")]
    pub origin: Vec<String>,
    /// Where the edge keeps what it fetched from --origin, in 1 MiB slices (required with --origin)
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Most bytes --cache-dir holds; the least recently used objects go first (required with --origin)
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub cache_size: Option<u64>,
    /// Certificates trusted for an HTTPS --origin (PEM) [default: the system's]
    #[arg(long, value_name = "FILE")]
    pub origin_ca: Option<PathBuf>,
    /// Sign requests to --origin for an S3 bucket in this region (SigV4; Garage's default is "garage")
    #[arg(long, value_name = "REGION")]
    pub origin_s3_region: Option<String>,
    /// The S3 key: an AWS credentials file, FILE or FILE:PROFILE [default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY]
    #[arg(long, value_name = "FILE")]
    pub origin_s3_credentials: Option<String>,
    /// Seconds an object stays fresh when its origin says nothing (Cache-Control, Expires) [default: 60]
    #[arg(long, value_name = "SECONDS")]
    pub origin_ttl: Option<u64>,
    /// Answer an error status with a page beneath the root, as nginx's `error_page` (repeatable; 403, 404, 500, 503), e.g. "404=/errors/404.html"
    #[arg(long = "error-page", value_name = "STATUS=PATH")]
    pub error_page: Vec<String>,
    /// A rule by path (repeatable; replaces the config file's [[rules]]): "GLOB; cache-control=VALUE; content-type=VALUE; header=Name: value; allow=CIDR,...; deny=CIDR,...; redirect=STATUS TARGET; fallback=PATH; referers=none,blocked,*.example.org; secure-link=SECRET-FILE; auth=htpasswd:FILE; realm=NAME", e.g. "/assets/**; cache-control=max-age=31536000; header=Access-Control-Allow-Origin: *"
    #[arg(long = "rule", value_name = "RULE")]
    pub rule: Vec<String>,
    /// The charset named on text types; "" for none [default: utf-8]
    #[arg(long, value_name = "NAME")]
    pub charset: Option<String>,
    /// A virtual host: requests whose Host is one of NAMES (comma-separated; "*.example.org" for its subdomains) are served from ROOT (repeatable); other hosts get the main ROOT
    #[arg(long = "vhost", value_name = "NAMES=ROOT")]
    pub vhost: Vec<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics, on a listener of their own (never a public one) [default: off]
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Obtain and renew a certificate for these names by ACME (repeatable: one certificate each; "a.org,www.a.org" puts two names on one), served on --tls-listen; HTTP-01 is answered on --listen
    #[arg(long, value_name = "NAMES")]
    pub acme_domain: Vec<String>,
    /// Contact address given to the ACME CA (expiry notices)
    #[arg(long, value_name = "ADDR")]
    pub acme_email: Option<String>,
    /// The ACME CA's directory URL [default: Let's Encrypt, https://acme-v02.api.letsencrypt.org/directory]
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,
    /// PEM roots to trust for the ACME directory's own HTTPS, beside the system's (a private or test CA)
    #[arg(long, value_name = "FILE")]
    pub acme_ca: Option<PathBuf>,
    /// Where the ACME account key, certificates and keys are kept (mode 0600) [default: /var/lib/spindle/acme]
    #[arg(long, value_name = "DIR")]
    pub acme_state: Option<PathBuf>,
}

/// A virtual host, checked.
#[derive(Debug, Clone)]
pub struct VirtualHost {
    /// Lower-case names; `*.example.org` for its subdomains.
    pub names: Vec<String>,
    pub root: PathBuf,
}

/// Most virtual hosts.
pub const MAX_HOSTS: usize = 1024;

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub root: PathBuf,
    pub listen: Vec<SocketAddr>,
    /// Plain HTTP listeners behind a load balancer: a connection is
    /// accepted only from `proxy_from` and must open with a PROXY header.
    pub proxy_listen: Vec<SocketAddr>,
    pub proxy_from: Vec<spindle_core::proxy::Cidr>,
    /// HTTPS listeners, and the certificates they serve (the first is the
    /// default; `tls.rs`).
    pub tls_listen: Vec<SocketAddr>,
    pub tls_certs: Vec<crate::tls::CertSpec>,
    pub workers: u32,
    pub backend: BackendKind,
    /// The backend was chosen by default, not by the user (so a fallback is allowed).
    pub backend_is_default: bool,
    pub chunk_size: u64,
    pub max_inflight: u32,
    pub depth: Depth,
    pub io_threads: u32,
    pub access_log: Option<String>,
    /// Switch to this user after binding (when started as root).
    pub user: Option<String>,
    pub keepalive_timeout: Duration,
    pub header_timeout: Duration,
    pub send_timeout: Duration,
    pub drain_timeout: Duration,
    pub max_connections: u32,
    pub max_header_size: usize,
    /// 0: no limit.
    pub max_connections_per_ip: u32,
    pub log_format: spindle_core::accesslog::LogFormat,
    /// `--error-log`: None for stderr (or the journal).
    pub error_log: Option<String>,
    pub log_level: crate::errlog::Level,
    /// Body bytes per second per response; 0: no limit.
    pub limit_rate: u64,
    pub limit_rate_after: u64,
    pub dotfiles: bool,
    /// List directories without an index file (`lister.rs`).
    pub autoindex: bool,
    pub open_file_cache: usize,
    pub open_file_cache_valid: Duration,
    pub small_file_cache: u64,
    pub first_miss: FirstMiss,
    /// Large cached bodies go by `sendfile(2)` (zero-copy). Off: every body
    /// is read into a buffer and sent from there, so that a file changed in
    /// place mid-response can never reach bytes already queued.
    pub sendfile: bool,
    /// HTTP/2: ALPN `h2` on HTTPS listeners and prior knowledge (h2c) on
    /// plain ones, where the backend serves it (io-uring, posix-aio).
    pub http2: bool,
    /// `--http3`: QUIC on the first HTTPS listener's UDP port.
    pub http3: bool,
    /// The UDP port HTTP/3 was bound to (set once it is): advertised by
    /// `Alt-Svc` on HTTPS responses.
    pub http3_port: Option<u16>,
    /// `--redirect-https`: plain listeners redirect to HTTPS.
    pub redirect_https: bool,
    /// `--add-header` fields, checked and parsed.
    pub extra_headers: spindle_core::Fields,
    /// Codings served from precompressed sidecars, preferred first.
    pub precompressed: Vec<spindle_core::Encoding>,
    /// Compression on the fly (`--compress`); `None`: off.
    pub compress: Option<CompressSettings>,
    /// A caching edge in front of an origin (`--origin`); `None`: off.
    pub edge: Option<EdgeSettings>,
    /// Pages for error statuses, as paths relative to the root.
    pub error_pages: Vec<(u16, std::ffi::CString)>,
    pub charset: String,
    pub rules: std::sync::Arc<spindle_core::rules::Rules>,
    /// Virtual hosts; their roots are numbered from 1 in this order.
    pub hosts: Vec<VirtualHost>,
    /// The command line this came from, read again with the config file
    /// on SIGHUP (`reload.rs`); `None` for a configuration made otherwise.
    pub source: Option<Cli>,
    /// Where to serve Prometheus metrics (`metrics.rs`); `None`: nowhere.
    pub metrics: Option<SocketAddr>,
    /// Automatic HTTPS (`--acme-domain`, `acme/`); `None`: off.
    pub acme: Option<crate::acme::AcmeConfig>,
}

impl Config {
    /// Merges defaults, the config file (if any) and the command line, and
    /// checks every value. Errors are one line, meant for the user.
    pub fn from_cli(cli: Cli) -> Result<Config, String> {
        let source = cli.clone();
        let file = match &cli.config {
            None => FileConfig::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
                parse_file(&text, &path.display().to_string())?
            }
        };
        let mut cfg = Config::merge(cli, file)?;
        cfg.source = Some(source);
        Ok(cfg)
    }

    /// The configuration a config file's text gives on its own, with no
    /// options on the command line (the fuzzer's way in).
    pub fn from_toml_text(text: &str) -> Result<Config, String> {
        let cli = <Cli as clap::Parser>::try_parse_from(["spindle"]).map_err(|e| e.to_string())?;
        Config::merge(cli, parse_file(text, "(text)")?)
    }

    fn merge(mut cli: Cli, mut file: FileConfig) -> Result<Config, String> {
        let limits = Limits::merge(&cli, &file)?;
        let Limits {
            chunk_size,
            workers,
            max_inflight,
            io_threads,
            max_connections,
            max_header_size,
            open_file_cache,
            small_file_cache,
        } = limits;
        let [listen, proxy_listen, tls_listen] = addresses(&mut cli, &mut file)?;
        let proxy_from = proxy_from(
            if cli.proxy_from.is_empty() {
                file.proxy_from.as_deref().unwrap_or(&[])
            } else {
                &cli.proxy_from
            },
            &proxy_listen,
        )?;
        let acme = acme::acme(&mut cli, &mut file, &listen, &tls_listen)?;
        let tls_certs = tls_certs(&mut cli, &mut file, &tls_listen, acme.is_some())?;
        acme::check_names_free(acme.as_ref(), &tls_certs)?;
        let limit_rate = size(cli.limit_rate, &file.limit_rate, 0)?;
        let limit_rate_after = size(cli.limit_rate_after, &file.limit_rate_after, 0)?;
        let metrics = metrics_address(
            cli.metrics.or(file.metrics),
            [&listen, &proxy_listen, &tls_listen],
        )?;
        let (log_format, error_log, log_level) = logging(&mut cli, &mut file)?;
        let backend_choice = cli.backend.or(file.backend);
        // In the order their errors were checked in before (the first
        // one is the one reported).
        let user = user(cli.user.take().or(file.user.take()))?;
        let timeouts = Timeouts::merge(&cli, &file)?;
        let responses = Responses::merge(&mut cli, &mut file)?;
        let compress = compress::merge(&mut cli, &mut file)?;
        let edge = edge::merge(&mut cli, &mut file)?;
        let hosts = vhosts(&cli.vhost, file.hosts)?;
        Ok(Config {
            root: cli.root.or(file.root).unwrap_or_else(|| PathBuf::from(".")),
            listen,
            proxy_listen,
            proxy_from,
            tls_listen,
            tls_certs,
            workers,
            backend: backend_choice.unwrap_or(BackendKind::IoUring),
            backend_is_default: backend_choice.is_none(),
            chunk_size,
            max_inflight,
            depth: cli.depth.or(file.depth).unwrap_or(Depth::Adaptive),
            io_threads,
            access_log: cli.access_log.or(file.access_log),
            user,
            keepalive_timeout: timeouts.keepalive,
            header_timeout: timeouts.header,
            send_timeout: timeouts.send,
            drain_timeout: timeouts.drain,
            max_connections,
            max_header_size,
            max_connections_per_ip: cli
                .max_connections_per_ip
                .or(file.max_connections_per_ip)
                .unwrap_or(0),
            limit_rate,
            limit_rate_after,
            log_format,
            error_log,
            log_level,
            dotfiles: cli.dotfiles || file.dotfiles.unwrap_or(false),
            autoindex: cli.autoindex || file.autoindex.unwrap_or(false),
            open_file_cache,
            open_file_cache_valid: timeouts.open_file_cache_valid,
            small_file_cache,
            first_miss: cli
                .first_miss
                .or(file.first_miss)
                .unwrap_or(FirstMiss::Auto),
            sendfile: !cli.no_sendfile && file.sendfile.unwrap_or(true),
            http2: !cli.no_http2 && file.http2.unwrap_or(true),
            http3: cli.http3 || file.http3.unwrap_or(false),
            http3_port: None,
            redirect_https: cli.redirect_https || file.redirect_https.unwrap_or(false),
            extra_headers: responses.extra_headers,
            precompressed: responses.precompressed,
            compress,
            edge,
            error_pages: responses.error_pages,
            charset: responses.charset,
            rules: responses.rules,
            hosts,
            metrics,
            acme,
            source: None,
        })
    }

    /// Gives the open-file caches at most half the descriptor limit (the
    /// soft limit, once raised): at start, and to a reloaded configuration
    /// before it is compared with the running one.
    pub fn cap_open_file_cache(&mut self) {
        let nofile = crate::sys::nofile_limit();
        let per_worker = (nofile / 2 / u64::from(self.workers.max(1))) as usize;
        self.open_file_cache = self.open_file_cache.min(per_worker);
    }

    /// What the chosen backend cannot do ([`Cap::Https`], [`Cap::Buffers`]
    /// for `sendfile = false`). `https`: an HTTPS listener is configured (or
    /// passed by systemd).
    pub fn check_backend_serves(&self, https: bool) -> Result<(), String> {
        if https && !self.backend.has(Cap::Https) {
            return Err(format!(
                "tls-listen: HTTPS is served by the {} backends (backend {} sends files with sendfile(2), which cannot encrypt)",
                BackendKind::names_with(Cap::Https, "and"),
                self.backend.name()
            ));
        }
        if !self.sendfile && !self.backend.has(Cap::Buffers) {
            return Err(format!(
                "sendfile = false: backend {} is built on sendfile(2); use {}",
                self.backend.name(),
                BackendKind::names_with(Cap::Buffers, "or")
            ));
        }
        Ok(())
    }

    /// Whether HTTP/2 is served: on (`http2`) and a backend that serves it
    /// ([`Cap::Http2`]).
    pub fn serves_http2(&self) -> bool {
        self.http2 && self.backend.has(Cap::Http2)
    }

    /// `--add-header`'s fields, and `Alt-Svc: h3` (RFC 7838, RFC 9114
    /// §3.1.1) once HTTP/3 is bound: for responses over TLS on TCP. A day
    /// of `ma`, as Caddy and nginx's examples advertise.
    fn https_extra_headers(&self) -> spindle_core::Fields {
        let mut f = self.extra_headers.clone();
        if let Some(port) = self.http3_port {
            f.push("Alt-Svc", format!("h3=\":{port}\"; ma=86400").as_bytes());
        }
        f
    }

    /// Connections one worker may hold.
    pub fn max_connections_per_worker(&self) -> usize {
        (self.max_connections / self.workers) as usize
    }

    /// Each document root's tag for the compression cache's names: of
    /// its canonical path, as `fs::Root::open` resolves it.
    fn root_tags(&self) -> Vec<u64> {
        std::iter::once(&self.root)
            .chain(self.hosts.iter().map(|h| &h.root))
            .map(|p| {
                let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                spindle_core::compress::root_tag(std::os::unix::ffi::OsStrExt::as_bytes(
                    p.as_os_str(),
                ))
            })
            .collect()
    }

    pub fn session_config(&self) -> spindle_core::SessionConfig {
        spindle_core::SessionConfig {
            max_header_bytes: self.max_header_size,
            max_request_line: self
                .max_header_size
                .min(spindle_core::limits::DEFAULT_MAX_REQUEST_LINE),
            allow_dotfiles: self.dotfiles,
            autoindex: self.autoindex,
            extra_headers: self.extra_headers.clone(),
            https_extra_headers: self.https_extra_headers(),
            precompressed: self.precompressed.clone(),
            compress: self
                .compress
                .as_ref()
                .map(|c| spindle_core::compress::CompressConfig {
                    codings: c.codings.clone(),
                    min_size: c.min_size,
                    max_size: c.max_size,
                    types: c.types.clone(),
                    root_tags: self.root_tags(),
                }),
            error_pages: self.error_pages.clone(),
            charset: self.charset.clone(),
            rules: self.rules.clone(),
            // To the first HTTPS listener's port (443 when TLS ends in
            // front of spindle).
            redirect_https: self
                .redirect_https
                .then(|| self.tls_listen.first().map_or(443, |a| a.port())),
            hosts: self
                .hosts
                .iter()
                .enumerate()
                .flat_map(|(i, h)| {
                    h.names
                        .iter()
                        .map(move |n| (n.as_bytes().to_vec(), i as u16 + 1))
                })
                .collect(),
            acme_http01: self.acme.as_ref().map(|_| crate::acme::http01_tokens()),
            edge: self.edge.is_some(),
            boundary_seed: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                std::process::id(),
            ),
            ..Default::default()
        }
    }
}

/// `--user`: a name, if given.
fn user(u: Option<String>) -> Result<Option<String>, String> {
    match u {
        Some(u) if u.is_empty() || u.contains('\0') => Err("user: give a user name".into()),
        u => Ok(u),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512k"), Ok(512 * 1024));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999g").is_err());
        let e = parse_size("ch\nk").unwrap_err();
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn metrics_address() {
        let c = Config::from_toml_text("metrics = \"127.0.0.1:9100\"\n").unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(Config::from_toml_text("").unwrap().metrics, None);
        for text in [
            "metrics = \"127.0.0.1:8080\"\n",
            "listen = [\"0.0.0.0:9100\"]\nmetrics = \"127.0.0.1:9100\"\n",
            "listen = [\"127.0.0.1:9100\"]\nmetrics = \"0.0.0.0:9100\"\n",
        ] {
            let e = Config::from_toml_text(text).unwrap_err();
            assert!(
                e.contains("where HTTP is served") && !e.contains('\n'),
                "{e}"
            );
        }
        // Port 0 on both: two different ephemeral ports.
        Config::from_toml_text("listen = [\"127.0.0.1:0\"]\nmetrics = \"127.0.0.1:0\"\n").unwrap();
    }

    #[test]
    fn proxy_keys_in_the_config_file() {
        let c = Config::from_toml_text(
            "proxy-listen = [\"127.0.0.1:0\"]\nproxy-from = [\"10.0.0.0/8\", \"::1\"]\n",
        )
        .unwrap();
        assert_eq!(c.proxy_listen.len(), 1);
        assert!(c.listen.is_empty(), "no default plain listener beside it");
        assert_eq!(c.proxy_from.len(), 2);
        for (text, needle) in [
            ("proxy-listen = [\"127.0.0.1:0\"]\n", "needs proxy-from"),
            ("proxy-from = [\"10.0.0.0/8\"]\n", "used by proxy-listen"),
            (
                "proxy-listen = [\"127.0.0.1:0\"]\nproxy-from = [\"10.0.0.0/33\"]\n",
                "prefix length",
            ),
        ] {
            let e = Config::from_toml_text(text).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{text}: {e}");
        }
    }
}
