//! `--origin` and its keys: spindle as a caching edge in front of an
//! origin (issue 49), merged from the command line and the config file,
//! checked, with their defaults (`crate::edge`).

use std::path::PathBuf;

use spindle_core::edge::sigv4::Credentials;

use super::file::FileConfig;
use super::merge::size;
use super::Cli;
use crate::edge::fetch::OriginUrl;

/// Most `--origin`s.
pub const MAX_ORIGINS: usize = 16;
/// Lifetime of an object whose origin says nothing of it (nginx's
/// `proxy_cache_valid`; Traffic Server's heuristic bounds start at an
/// hour): a package mirror's index must not go stale for long.
pub const DEFAULT_TTL: u64 = 60;
/// The most `stale-if-error` granted, whatever the origin says.
pub const STALE_MAX: u64 = 24 * 3600;

/// The edge, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    pub origins: Vec<OriginUrl>,
    pub cache_dir: PathBuf,
    pub cache_size: u64,
    /// Certificates trusted for HTTPS origins (DER); the system's when
    /// `--origin-ca` is not given.
    pub roots: Vec<Vec<u8>>,
    /// `--origin-s3-region` and the key: sign every request (SigV4).
    pub s3: Option<(String, Credentials)>,
    pub ttl: u64,
}

/// The `--origin*` and `--cache-*` options and keys; `None`: no origin.
pub(super) fn merge(cli: &mut Cli, file: &mut FileConfig) -> Result<Option<EdgeSettings>, String> {
    let urls = if cli.origin.is_empty() {
        file.origin.take().unwrap_or_default()
    } else {
        std::mem::take(&mut cli.origin)
    };
    let cache_dir = cli.cache_dir.take().or(file.cache_dir.take());
    let cache_size = match (cli.cache_size, &file.cache_size) {
        (None, None) => None,
        (c, f) => Some(size(c, f, 0)?),
    };
    if urls.is_empty() {
        if cache_dir.is_some() || cache_size.is_some() {
            return Err("cache-dir and cache-size are the edge's: give --origin too".into());
        }
        return Ok(None);
    }
    if urls.len() > MAX_ORIGINS {
        return Err(format!("origin: at most {MAX_ORIGINS}"));
    }
    let origins = urls
        .iter()
        .map(|u| OriginUrl::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    let (Some(cache_dir), Some(cache_size)) = (cache_dir, cache_size) else {
        return Err("origin: give --cache-dir and --cache-size with it".into());
    };
    if cache_dir.as_os_str().is_empty() || (cache_dir.exists() && !cache_dir.is_dir()) {
        return Err(format!(
            "cache-dir: {} is not a directory",
            cache_dir.display()
        ));
    }
    if cache_size < spindle_core::edge::slice::SLICE_SIZE {
        return Err(format!(
            "cache-size: at least one slice ({} bytes)",
            spindle_core::edge::slice::SLICE_SIZE
        ));
    }
    let mut roots = Vec::new();
    match cli.origin_ca.take().or(file.origin_ca.take()) {
        Some(ca) => crate::tls::add_pem_roots(&mut roots, &ca, true, "origin-ca")?,
        None => {
            let system = std::path::Path::new(crate::acme::SYSTEM_ROOTS);
            crate::tls::add_pem_roots(&mut roots, system, false, "origin-ca")?;
            if roots.is_empty() && urls.iter().any(|u| u.starts_with("https:")) {
                return Err(format!(
                    "origin: no trusted roots for an HTTPS origin (none in {}; give --origin-ca FILE)",
                    crate::acme::SYSTEM_ROOTS
                ));
            }
        }
    }
    let region = cli.origin_s3_region.take().or(file.origin_s3_region.take());
    let creds_file = cli
        .origin_s3_credentials
        .take()
        .or(file.origin_s3_credentials.take());
    let s3 = match (region, creds_file) {
        (None, None) => None,
        (None, Some(_)) => return Err("origin-s3-credentials: give --origin-s3-region too".into()),
        (Some(r), f) => Some((r, credentials(f)?)),
    };
    let ttl = cli.origin_ttl.or(file.origin_ttl).unwrap_or(DEFAULT_TTL);
    Ok(Some(EdgeSettings {
        origins,
        cache_dir,
        cache_size,
        roots,
        s3,
        ttl,
    }))
}

/// The key: from an AWS credentials file (`FILE` or `FILE:PROFILE`,
/// profile `default`), else the usual environment variables.
fn credentials(file: Option<String>) -> Result<Credentials, String> {
    let Some(spec) = file else {
        return match Credentials::from_env(|k| std::env::var(k).ok()) {
            Some(c) => c.map_err(|e| format!("origin-s3 credentials: {e}")),
            None => Err("origin-s3-region: give --origin-s3-credentials, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into()),
        };
    };
    let (path, profile) = match spec.rsplit_once(':') {
        Some((p, prof)) if !prof.contains('/') => (p.to_string(), prof.to_string()),
        _ => (spec.clone(), "default".to_string()),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("origin-s3-credentials: {path}: {e}"))?;
    Credentials::from_file(&text, &profile)
        .map_err(|e| format!("origin-s3-credentials: {path}: {e}"))
}
