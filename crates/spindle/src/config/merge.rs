//! The pieces of [`Config::merge`](super::Config): each group of values
//! from the command line, else the config file, else the default, checked
//! with the one-line error a user reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::checks::*;
use super::file::{self, FileConfig, SizeValue};
use super::*;

/// The metrics' address must not be one where HTTP is served: the same
/// port on an address a public listener covers would put the metrics in
/// the public's reach (or fail to bind).
pub(super) fn check_metrics_address(m: SocketAddr, public: &[&SocketAddr]) -> Result<(), String> {
    let clash = public.iter().find(|a| {
        a.port() == m.port()
            && m.port() != 0
            && (a.ip() == m.ip() || a.ip().is_unspecified() || m.ip().is_unspecified())
    });
    match clash {
        Some(a) => Err(format!(
            "metrics: {m} is where HTTP is served ({a}); give the metrics an address of their own, e.g. --metrics 127.0.0.1:9100"
        )),
        None => Ok(()),
    }
}

/// The metrics' address, if any, checked against every listener's
/// ([`check_metrics_address`]).
pub(super) fn metrics_address(
    metrics: Option<SocketAddr>,
    listeners: [&[SocketAddr]; 3],
) -> Result<Option<SocketAddr>, String> {
    if let Some(m) = metrics {
        let public: Vec<&SocketAddr> = listeners.into_iter().flatten().collect();
        check_metrics_address(m, &public)?;
    }
    Ok(metrics)
}

/// A number of seconds from the command line, else the file, else the
/// default, checked by [`secs`].
pub(super) fn seconds(
    name: &str,
    cli: Option<f64>,
    file: Option<f64>,
    default: f64,
) -> Result<Duration, String> {
    secs(name, cli.or(file).unwrap_or(default))
}

/// The access log's format, the error log's path and its level.
pub(super) fn logging(
    cli: &mut Cli,
    file: &mut FileConfig,
) -> Result<
    (
        spindle_core::accesslog::LogFormat,
        Option<String>,
        crate::errlog::Level,
    ),
    String,
> {
    let format = match cli.log_format {
        Some(f) => f,
        None => file
            .log_format
            .as_deref()
            .map(parse_log_format)
            .transpose()?
            .unwrap_or_default(),
    };
    let error_log = match cli.error_log.take().or(file.error_log.take()) {
        Some(p) if p.is_empty() || p.contains('\0') => {
            return Err("error-log: give a file path".into())
        }
        p => p,
    };
    let level = match cli.log_level {
        Some(l) => l,
        None => file
            .log_level
            .as_deref()
            .map(|s| crate::errlog::parse_level(s).map_err(|e| format!("log-level: {e}")))
            .transpose()?
            .unwrap_or(crate::errlog::Level::Info),
    };
    Ok((format, error_log, level))
}

/// The timeouts, each from the command line, else the file, else the
/// default, checked by [`secs`].
pub(super) struct Timeouts {
    pub(super) keepalive: Duration,
    pub(super) header: Duration,
    pub(super) send: Duration,
    pub(super) drain: Duration,
    pub(super) open_file_cache_valid: Duration,
}

impl Timeouts {
    pub(super) fn merge(cli: &Cli, file: &FileConfig) -> Result<Timeouts, String> {
        Ok(Timeouts {
            keepalive: seconds(
                "keepalive-timeout",
                cli.keepalive_timeout,
                file.keepalive_timeout,
                DEFAULT_KEEPALIVE_TIMEOUT_SECS,
            )?,
            header: seconds(
                "header-timeout",
                cli.header_timeout,
                file.header_timeout,
                DEFAULT_HEADER_TIMEOUT_SECS,
            )?,
            send: seconds(
                "send-timeout",
                cli.send_timeout,
                file.send_timeout,
                DEFAULT_SEND_TIMEOUT_SECS,
            )?,
            drain: seconds(
                "drain-timeout",
                cli.drain_timeout,
                file.drain_timeout,
                DEFAULT_DRAIN_TIMEOUT_SECS,
            )?,
            open_file_cache_valid: seconds(
                "open-file-cache-valid",
                cli.open_file_cache_valid,
                file.open_file_cache_valid,
                DEFAULT_OPEN_FILE_CACHE_VALID_SECS,
            )?,
        })
    }
}

/// What the session adds to or chooses for its responses: extra header
/// fields, precompressed variants, error pages, the charset and the access
/// rules. The command line's list of each replaces the file's, as for
/// every other key.
pub(super) struct Responses {
    pub(super) extra_headers: spindle_core::Fields,
    pub(super) precompressed: Vec<spindle_core::Encoding>,
    pub(super) error_pages: Vec<(u16, std::ffi::CString)>,
    pub(super) charset: String,
    pub(super) rules: std::sync::Arc<spindle_core::rules::Rules>,
}

impl Responses {
    pub(super) fn merge(cli: &mut Cli, file: &mut FileConfig) -> Result<Responses, String> {
        Ok(Responses {
            extra_headers: header_fields(
                "add-header",
                if cli.add_header.is_empty() {
                    file.add_headers.as_deref().unwrap_or(&[])
                } else {
                    &cli.add_header
                },
            )?,
            precompressed: precompressed(if cli.precompressed.is_empty() {
                file.precompressed.as_deref().unwrap_or(&[])
            } else {
                &cli.precompressed
            })?,
            error_pages: error_pages(if cli.error_page.is_empty() {
                file.error_pages
                    .iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect()
            } else {
                cli.error_page.clone()
            })?,
            charset: charset(cli.charset.take().or(file.charset.take()))?,
            rules: std::sync::Arc::new(rules(if cli.rule.is_empty() {
                file.rules.take().unwrap_or_default()
            } else {
                cli.rule
                    .iter()
                    .map(|r| rule_arg(r))
                    .collect::<Result<_, _>>()?
            })?),
        })
    }
}

/// The sizes and counts that bound a worker, each checked against its
/// range.
pub(super) struct Limits {
    pub(super) chunk_size: u64,
    pub(super) workers: u32,
    pub(super) max_inflight: u32,
    pub(super) io_threads: u32,
    pub(super) max_connections: u32,
    pub(super) max_header_size: usize,
    pub(super) open_file_cache: usize,
    pub(super) small_file_cache: u64,
}

/// A value from the command line, else the file, else the default, that
/// must lie in `range`.
pub(super) fn bounded<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    cli: Option<T>,
    file: Option<T>,
    default: T,
    range: std::ops::RangeInclusive<T>,
    unit: &str,
) -> Result<T, String> {
    let v = cli.or(file).unwrap_or(default);
    if !range.contains(&v) {
        return Err(format!(
            "{name} must be between {} and {}{unit}, not {v}",
            range.start(),
            range.end()
        ));
    }
    Ok(v)
}

/// A size from the command line, else the file (a number or text such as
/// `512k`), else the default.
pub(super) fn size(
    cli: Option<u64>,
    file: &Option<SizeValue>,
    default: u64,
) -> Result<u64, String> {
    Ok(match (cli, file) {
        (Some(c), _) => c,
        (None, Some(SizeValue::Bytes(b))) => *b,
        (None, Some(SizeValue::Text(t))) => parse_size(t)?,
        (None, None) => default,
    })
}

impl Limits {
    pub(super) fn merge(cli: &Cli, file: &FileConfig) -> Result<Limits, String> {
        let chunk_size = size(cli.chunk_size, &file.chunk_size, DEFAULT_CHUNK_SIZE)?;
        if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size) || chunk_size % 4096 != 0 {
            return Err(format!(
                "chunk-size must be a multiple of 4096 between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE} bytes, not {chunk_size}"
            ));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let workers = bounded(
            "workers",
            cli.workers,
            file.workers,
            cores,
            1..=MAX_WORKERS,
            "",
        )?;
        let max_connections = cli
            .max_connections
            .or(file.max_connections)
            .unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections < workers {
            return Err(format!(
                "max-connections ({max_connections}) must be at least the number of workers ({workers})"
            ));
        }
        let open_file_cache = cli
            .open_file_cache
            .or(file.open_file_cache)
            .unwrap_or(DEFAULT_OPEN_FILE_CACHE);
        if open_file_cache > MAX_OPEN_FILE_CACHE {
            return Err(format!(
                "open-file-cache must be at most {MAX_OPEN_FILE_CACHE}, not {open_file_cache}"
            ));
        }
        let small_file_cache = size(
            cli.small_file_cache,
            &file.small_file_cache,
            DEFAULT_SMALL_FILE_CACHE,
        )?;
        if small_file_cache > MAX_SMALL_FILE_CACHE {
            return Err(format!(
                "small-file-cache must be at most {MAX_SMALL_FILE_CACHE} bytes, not {small_file_cache}"
            ));
        }
        Ok(Limits {
            chunk_size,
            workers,
            max_inflight: bounded(
                "max-inflight",
                cli.max_inflight,
                file.max_inflight,
                DEFAULT_MAX_INFLIGHT,
                1..=MAX_MAX_INFLIGHT,
                "",
            )?,
            io_threads: bounded(
                "io-threads",
                cli.io_threads,
                file.io_threads,
                DEFAULT_IO_THREADS,
                1..=MAX_WORKERS,
                "",
            )?,
            max_connections,
            max_header_size: bounded(
                "max-header-size",
                cli.max_header_size,
                file.max_header_size,
                spindle_core::limits::DEFAULT_MAX_HEADER_BYTES,
                256..=1 << 20,
                " bytes",
            )?,
            open_file_cache,
            small_file_cache,
        })
    }
}

/// The plain, PROXY and HTTPS listening addresses, in that order. With HTTPS or PROXY
/// listeners only, no plain one is added.
pub(super) fn addresses(
    cli: &mut Cli,
    file: &mut FileConfig,
) -> Result<[Vec<SocketAddr>; 3], String> {
    let pick = |c: &mut Vec<SocketAddr>, f: &mut Option<Vec<SocketAddr>>| {
        if c.is_empty() {
            f.take()
        } else {
            Some(std::mem::take(c))
        }
    };
    let tls_listen = pick(&mut cli.tls_listen, &mut file.tls_listen).unwrap_or_default();
    let proxy_listen = pick(&mut cli.proxy_listen, &mut file.proxy_listen).unwrap_or_default();
    let listen = pick(&mut cli.listen, &mut file.listen).unwrap_or_else(|| {
        if tls_listen.is_empty() && proxy_listen.is_empty() {
            vec![DEFAULT_LISTEN.parse().expect("valid default")]
        } else {
            Vec::new()
        }
    });
    if listen.is_empty() && tls_listen.is_empty() && proxy_listen.is_empty() {
        return Err("listen: give at least one address".into());
    }
    Ok([listen, proxy_listen, tls_listen])
}

/// The HTTPS certificates: `tls-cert` and `tls-key`, and the file's
/// `tls-certificates` by name.
pub(super) fn tls_certs(
    cli: &mut Cli,
    file: &mut FileConfig,
    tls_listen: &[SocketAddr],
    acme: bool,
) -> Result<Vec<crate::tls::CertSpec>, String> {
    let mut certs = match (
        cli.tls_cert.take().or(file.tls_cert.take()),
        cli.tls_key.take().or(file.tls_key.take()),
    ) {
        (Some(cert), Some(key)) => vec![crate::tls::CertSpec {
            names: Vec::new(),
            cert,
            key,
        }],
        (None, None) => Vec::new(),
        (Some(_), None) => {
            return Err("tls-cert needs tls-key (the certificate's private key)".into())
        }
        (None, Some(_)) => {
            return Err("tls-key needs tls-cert (the certificate it belongs to)".into())
        }
    };
    for e in file.tls_certificates.take().unwrap_or_default() {
        if e.names.is_empty()
            || e.names
                .iter()
                .any(|n| n.is_empty() || n.contains(['/', ' ', '\0']))
        {
            return Err(format!(
                "tls-certificates: {} needs names, each a host name (or *.domain)",
                e.cert.display()
            ));
        }
        certs.push(crate::tls::CertSpec {
            names: e.names,
            cert: e.cert,
            key: e.key,
        });
    }
    if !tls_listen.is_empty() && certs.is_empty() && !acme {
        return Err("tls-listen needs a certificate: give tls-cert FILE and tls-key FILE".into());
    }
    if tls_listen.is_empty() && !certs.is_empty() {
        return Err(
            "tls-cert and tls-key are used by tls-listen: give an address to serve HTTPS on".into(),
        );
    }
    Ok(certs)
}

/// The virtual hosts: `--vhost NAMES=ROOT`s, else the file's `[[hosts]]`.
pub(super) fn vhosts(
    cli: &[String],
    file: Option<Vec<file::HostEntry>>,
) -> Result<Vec<VirtualHost>, String> {
    if cli.is_empty() {
        return hosts(
            file.unwrap_or_default()
                .into_iter()
                .map(|h| (h.names, h.root))
                .collect(),
        );
    }
    let mut v = Vec::new();
    for item in cli {
        let Some((names, root)) = item.split_once('=') else {
            return Err(format!(
                "vhost {:?}: write it as NAMES=ROOT, e.g. example.org,www.example.org=/srv/example",
                item.escape_debug().to_string()
            ));
        };
        v.push((
            names.split(',').map(str::to_string).collect(),
            PathBuf::from(root),
        ));
    }
    hosts(v)
}
