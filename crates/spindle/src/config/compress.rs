//! `--compress` and its keys: merged from the command line and the config
//! file, checked, with their defaults (`crate::compress`,
//! `spindle_core::compress`).

use std::path::PathBuf;

use spindle_core::compress::{DEFAULT_MAX_SIZE, DEFAULT_MIN_SIZE, DEFAULT_TYPES};
use spindle_core::Encoding;

use super::file::FileConfig;
use super::merge::size;
use super::{Cli, OnOff};
use crate::compress::{
    Levels, Settings, DEFAULT_CACHE_BYTES, DEFAULT_DIR, DEFAULT_THREADS, MAX_THREADS,
};

/// Most media types in `--compress-types`.
pub const MAX_TYPES: usize = 256;

/// Compression on the fly, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressSettings {
    /// Codings made, preferred first.
    pub codings: Vec<Encoding>,
    pub types: Vec<String>,
    pub min_size: u64,
    pub max_size: u64,
    pub cache: Settings,
    /// Asked for by name (`--compress on`, or a key of its own): a cache
    /// that cannot be opened is then an error, not a warning.
    pub explicit: bool,
}

/// The `--compress*` options and keys; `None`: off.
pub(super) fn merge(
    cli: &mut Cli,
    file: &mut FileConfig,
) -> Result<Option<CompressSettings>, String> {
    let on = match (cli.compress, file.compress) {
        (Some(t), _) => t == OnOff::On,
        (None, Some(b)) => b,
        (None, None) => true,
    };
    if !on {
        return Ok(None);
    }
    let explicit = cli.compress.is_some()
        || file.compress.is_some()
        || cli.compress_cache.is_some()
        || file.compress_cache.is_some();
    let codings = codings(if cli.compress_codings.is_empty() {
        file.compress_codings.as_deref().unwrap_or(&[])
    } else {
        &cli.compress_codings
    })?;
    let types = types(if cli.compress_types.is_empty() {
        file.compress_types.as_deref().unwrap_or(&[])
    } else {
        &cli.compress_types
    })?;
    let min_size = size(
        cli.compress_min_size,
        &file.compress_min_size,
        DEFAULT_MIN_SIZE,
    )?;
    let max_size = size(
        cli.compress_max_size,
        &file.compress_max_size,
        DEFAULT_MAX_SIZE,
    )?;
    if min_size > max_size {
        return Err(format!(
            "compress-min-size ({min_size}) is above compress-max-size ({max_size})"
        ));
    }
    let max_bytes = size(
        cli.compress_cache_size,
        &file.compress_cache_size,
        DEFAULT_CACHE_BYTES,
    )?;
    let threads = cli
        .compress_threads
        .or(file.compress_threads)
        .unwrap_or(DEFAULT_THREADS as u32) as usize;
    if threads == 0 || threads > MAX_THREADS {
        return Err(format!("compress-threads: give 1 to {MAX_THREADS}"));
    }
    let levels = levels(if cli.compress_levels.is_empty() {
        file.compress_levels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    } else {
        cli.compress_levels.clone()
    })?;
    let dir = cli
        .compress_cache
        .take()
        .or(file.compress_cache.take())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    if dir.as_os_str().is_empty() {
        return Err("compress-cache: give a directory".into());
    }
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "compress-cache: {} is not a directory",
            dir.display()
        ));
    }
    Ok(Some(CompressSettings {
        codings,
        types,
        min_size,
        max_size,
        cache: Settings {
            dir,
            max_bytes,
            threads,
            levels,
        },
        explicit,
    }))
}

/// `--compress-codings`: each once; empty: all three, smallest first.
fn codings(names: &[String]) -> Result<Vec<Encoding>, String> {
    let list = super::checks::codings("compress-codings", names)?;
    Ok(if list.is_empty() {
        Encoding::ALL.to_vec()
    } else {
        list
    })
}

/// `--compress-types`: `type/subtype` or `type/*`, lower-cased; empty:
/// the defaults.
fn types(list: &[String]) -> Result<Vec<String>, String> {
    if list.iter().all(|t| t.trim().is_empty()) {
        return Ok(DEFAULT_TYPES.iter().map(|t| t.to_string()).collect());
    }
    if list.len() > MAX_TYPES {
        return Err(format!("compress-types: at most {MAX_TYPES} types"));
    }
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    let mut out = Vec::new();
    for t in list.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        let ok = match t.split_once('/') {
            Some((a, "*")) => token(a),
            Some((a, b)) => token(a) && token(b),
            None => false,
        };
        if !ok {
            return Err(format!(
                "compress-types: {:?} is not a media type (e.g. text/*, application/json)",
                t.escape_debug().to_string()
            ));
        }
        out.push(t.to_ascii_lowercase());
    }
    Ok(out)
}

/// `--compress-levels gzip=N,br=N,zstd=N`: any of them; the rest keep
/// their defaults.
fn levels(items: Vec<String>) -> Result<Levels, String> {
    let mut l = Levels::default();
    for item in items.iter().filter(|i| !i.trim().is_empty()) {
        let bad = || {
            format!(
                "compress-levels: {:?} is not CODING=LEVEL (e.g. gzip=9,br=11,zstd=19)",
                item.escape_debug().to_string()
            )
        };
        let (k, v) = item.split_once('=').ok_or_else(bad)?;
        let n: i64 = v.trim().parse().map_err(|_| bad())?;
        match Encoding::from_name(k) {
            Some(Encoding::Gzip) => l.gzip = u32::try_from(n).map_err(|_| bad())?,
            Some(Encoding::Br) => l.br = u32::try_from(n).map_err(|_| bad())?,
            Some(Encoding::Zstd) => l.zstd = i32::try_from(n).map_err(|_| bad())?,
            None => return Err(bad()),
        }
    }
    l.check()?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_levels_are_checked() {
        assert_eq!(codings(&[]).unwrap(), Encoding::ALL.to_vec());
        assert_eq!(
            codings(&["gzip".into(), "zst".into()]).unwrap(),
            vec![Encoding::Gzip, Encoding::Zstd]
        );
        assert!(codings(&["gzip".into(), "gz".into()]).is_err());
        assert!(codings(&["deflate".into()]).is_err());
        assert_eq!(
            types(&["Text/*".into()]).unwrap(),
            vec!["text/*".to_string()]
        );
        assert!(types(&["text".into()]).is_err());
        assert!(types(&["*/*x".into()]).is_err());
        assert_eq!(levels(vec!["gzip=6".into()]).unwrap().gzip, 6);
        assert!(levels(vec!["gzip=10".into()]).is_err());
        assert!(levels(vec!["br=12".into()]).is_err());
        assert!(levels(vec!["zstd".into()]).is_err());
        assert!(levels(vec!["lz4=1".into()]).is_err());
    }
}
