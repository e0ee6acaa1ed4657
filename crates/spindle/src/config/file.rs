//! The config file's schema: the TOML tables and keys as they are read,
//! before `Config::load` checks them and merges them with the command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{BackendKind, Depth, FirstMiss};

/// One more certificate in the config file, for the host names it serves
/// (`tls-certificates = [{ names = ["example.org", "*.example.org"], cert =
/// "...", key = "..." }]`); `tls-cert`/`tls-key` stay the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CertEntry {
    pub(super) names: Vec<String>,
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

/// The config file: the same keys as the long options.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) tls_certificates: Option<Vec<CertEntry>>,
    pub(super) root: Option<PathBuf>,
    pub(super) listen: Option<Vec<SocketAddr>>,
    pub(super) proxy_listen: Option<Vec<SocketAddr>>,
    pub(super) proxy_from: Option<Vec<String>>,
    pub(super) tls_listen: Option<Vec<SocketAddr>>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) workers: Option<u32>,
    pub(super) backend: Option<BackendKind>,
    pub(super) chunk_size: Option<SizeValue>,
    pub(super) max_inflight: Option<u32>,
    pub(super) depth: Option<Depth>,
    pub(super) io_threads: Option<u32>,
    pub(super) access_log: Option<String>,
    pub(super) user: Option<String>,
    pub(super) keepalive_timeout: Option<f64>,
    pub(super) header_timeout: Option<f64>,
    pub(super) send_timeout: Option<f64>,
    pub(super) drain_timeout: Option<f64>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_header_size: Option<usize>,
    pub(super) max_connections_per_ip: Option<u32>,
    pub(super) log_format: Option<String>,
    pub(super) error_log: Option<String>,
    pub(super) log_level: Option<String>,
    pub(super) limit_rate: Option<SizeValue>,
    pub(super) limit_rate_after: Option<SizeValue>,
    pub(super) dotfiles: Option<bool>,
    pub(super) autoindex: Option<bool>,
    pub(super) open_file_cache: Option<usize>,
    pub(super) open_file_cache_valid: Option<f64>,
    pub(super) small_file_cache: Option<SizeValue>,
    pub(super) first_miss: Option<FirstMiss>,
    pub(super) sendfile: Option<bool>,
    pub(super) http2: Option<bool>,
    pub(super) http3: Option<bool>,
    pub(super) redirect_https: Option<bool>,
    pub(super) add_headers: Option<Vec<String>>,
    pub(super) precompressed: Option<Vec<String>>,
    pub(super) compress: Option<bool>,
    pub(super) compress_codings: Option<Vec<String>>,
    pub(super) compress_types: Option<Vec<String>>,
    pub(super) compress_min_size: Option<SizeValue>,
    pub(super) compress_max_size: Option<SizeValue>,
    pub(super) compress_cache: Option<PathBuf>,
    pub(super) compress_cache_size: Option<SizeValue>,
    pub(super) compress_threads: Option<u32>,
    pub(super) compress_levels: Option<std::collections::BTreeMap<String, i64>>,
    pub(super) origin: Option<Vec<String>>,
    pub(super) cache_dir: Option<PathBuf>,
    pub(super) cache_size: Option<SizeValue>,
    pub(super) origin_ca: Option<PathBuf>,
    pub(super) origin_s3_region: Option<String>,
    pub(super) origin_s3_credentials: Option<String>,
    pub(super) origin_ttl: Option<u64>,
    pub(super) error_pages: Option<std::collections::BTreeMap<String, String>>,
    pub(super) charset: Option<String>,
    pub(super) rules: Option<Vec<RuleEntry>>,
    pub(super) hosts: Option<Vec<HostEntry>>,
    pub(super) metrics: Option<SocketAddr>,
    pub(super) acme_domain: Option<Vec<String>>,
    pub(super) acme_email: Option<String>,
    pub(super) acme_directory: Option<String>,
    pub(super) acme_ca: Option<PathBuf>,
    pub(super) acme_state: Option<PathBuf>,
}

/// One `[[hosts]]` table: a virtual host's names and document root.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HostEntry {
    pub(super) names: Vec<String>,
    pub(super) root: PathBuf,
}

/// One `[[rules]]` table: what the files whose path matches `match` get.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct RuleEntry {
    #[serde(rename = "match")]
    pub(super) pattern: String,
    pub(super) cache_control: Option<String>,
    pub(super) content_type: Option<String>,
    #[serde(default)]
    pub(super) headers: Vec<String>,
    #[serde(default)]
    pub(super) allow: Vec<String>,
    #[serde(default)]
    pub(super) deny: Vec<String>,
    pub(super) redirect: Option<String>,
    pub(super) fallback: Option<String>,
    pub(super) referers: Option<Vec<String>>,
    pub(super) secure_link: Option<PathBuf>,
    /// `htpasswd:PATH`.
    pub(super) auth: Option<String>,
    pub(super) realm: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum SizeValue {
    Bytes(u64),
    Text(String),
}
