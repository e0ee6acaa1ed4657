//! Compression on the fly: which responses may be compressed, in which
//! coding, and the name of the stored result.
//!
//! A compressible file is compressed once per version and coding, off the
//! worker, into a cache directory; later requests are served from that
//! file like any other (ranges, conditionals, `sendfile`). The core does
//! no I/O: the session asks the driver to open the stored result beneath
//! the cache directory ([`CACHE_ROOT`]) and, when it is not there yet,
//! answers with the file itself and leaves a [`Job`] for the driver.
//!
//! A stored result's name is the version it was made from: the tag of the
//! document root (a hash of its path, so that two roots' files never
//! share a name), the inode, size and modification time of the file, and
//! the coding. A file changed in any of these gets another name, so the
//! old version's bytes can never go out under the new version's
//! validators; the compressor checks the version again before and after
//! it reads the file.

use std::ffi::CString;

use crate::encoding::Encoding;
use crate::file::FileMeta;

/// The root number of the compression cache directory in an
/// [`OpenRequest`](crate::OpenRequest) (document roots count from 0).
pub const CACHE_ROOT: u16 = u16::MAX;

/// Smallest body compressed by default: below about 256 bytes a coding's
/// own framing (gzip 18 bytes, zstd 9 to 13) and the response's head
/// outweigh what is saved, and a packet carries it either way (nginx
/// `gzip_min_length` is 20, H2O's 100, lighttpd's `deflate.min-compress-size`
/// 256; Caddy's `minimum_length` 512).
pub const DEFAULT_MIN_SIZE: u64 = 256;
/// Largest file compressed by default: a result is made by reading the
/// whole file on a helper thread, and one file larger than this (a log,
/// a database dump) would hold a helper for minutes and fill the cache.
pub const DEFAULT_MAX_SIZE: u64 = 64 << 20;

/// The types compressed by default: text, and the structured or
/// uncompressed binary formats a site serves (JavaScript, JSON, XML, SVG,
/// WebAssembly, web manifests, TrueType and OpenType fonts, icons).
/// A `type/*` entry covers every subtype. Already compressed formats
/// (images, video, archives, WOFF2) gain nothing and are left out.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/javascript",
    "application/x-javascript",
    "application/json",
    "application/ld+json",
    "application/geo+json",
    "application/manifest+json",
    "application/x-ndjson",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/wasm",
    "application/vnd.ms-fontobject",
    "font/ttf",
    "font/otf",
    "image/svg+xml",
    "image/x-icon",
    "image/vnd.microsoft.icon",
];

/// What the session compresses (`--compress`); `None` in the session's
/// configuration: nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressConfig {
    /// The codings made, in the server's order of preference.
    pub codings: Vec<Encoding>,
    /// Bodies of fewer bytes are sent as they are.
    pub min_size: u64,
    /// Files of more bytes are sent as they are.
    pub max_size: u64,
    /// Media types (`type/subtype`, or `type/*`), lower case.
    pub types: Vec<String>,
    /// Per document root number, the tag its stored results are named by
    /// ([`root_tag`] of its path).
    pub root_tags: Vec<u64>,
}

impl CompressConfig {
    /// With the defaults, for document roots tagged `root_tags`.
    pub fn new(root_tags: Vec<u64>) -> CompressConfig {
        CompressConfig {
            codings: vec![Encoding::Zstd, Encoding::Br, Encoding::Gzip],
            min_size: DEFAULT_MIN_SIZE,
            max_size: DEFAULT_MAX_SIZE,
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
            root_tags,
        }
    }

    /// Whether a file of `size` bytes served as `content_type` (with or
    /// without parameters) may be compressed.
    pub fn covers(&self, content_type: &str, size: u64) -> bool {
        self.sized(size) && self.typed(content_type)
    }

    /// Whether `size` is within the bounds.
    pub fn sized(&self, size: u64) -> bool {
        (self.min_size..=self.max_size).contains(&size)
    }

    /// Whether `content_type` is among the types.
    pub fn typed(&self, content_type: &str) -> bool {
        let mime = content_type.split(';').next().unwrap_or("").trim();
        let Some((main, _)) = mime.split_once('/') else {
            return false;
        };
        self.types.iter().any(|t| match t.strip_suffix("/*") {
            Some(m) => m.eq_ignore_ascii_case(main),
            None => t.eq_ignore_ascii_case(mime),
        })
    }

    /// The tag of root `root` (0 for one this configuration does not know).
    pub fn tag(&self, root: u16) -> u64 {
        self.root_tags.get(root as usize).copied().unwrap_or(0)
    }
}

/// A document root's tag: FNV-1a (64 bits) of its path's bytes. Stable
/// across builds and restarts, so that the cache outlives both.
pub fn root_tag(path: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The name, in the cache directory, of `meta`'s version of a file of
/// the root tagged `tag`, compressed with `coding`: `TAG-INO-SIZE-SEC.NSEC.SUFFIX`
/// in hexadecimal, no directory part.
pub fn stored_name(tag: u64, meta: &FileMeta, coding: Encoding) -> CString {
    let s = format!(
        "{tag:016x}-{:x}-{:x}-{:x}.{:x}{}",
        meta.ino,
        meta.size,
        meta.mtime_sec as u64,
        meta.mtime_nsec,
        coding.suffix()
    );
    CString::new(s).expect("hex has no NUL")
}

/// Whether `name` is one that [`stored_name`] makes (what a cache
/// directory's scan keeps; anything else is not the cache's).
pub fn is_stored_name(name: &str) -> bool {
    let Some(stem) = Encoding::ALL
        .iter()
        .find_map(|e| name.strip_suffix(e.suffix()))
    else {
        return false;
    };
    let parts: Vec<&str> = stem.split('-').collect();
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    parts.len() == 4
        && parts[0].len() == 16
        && parts[..3].iter().all(|p| hex(p))
        && parts[3]
            .split_once('.')
            .is_some_and(|(a, b)| hex(a) && hex(b))
}

/// A file to compress: the driver hands it to its compressor, which
/// makes `name` in the cache directory from the file at `path` beneath
/// root `root`, if that file still has the version `src`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub root: u16,
    pub path: CString,
    pub src: FileMeta,
    pub coding: Encoding,
    pub name: CString,
}

/// What a response tells the driver about the cache, taken with
/// [`Session::take_compress_note`](crate::Session::take_compress_note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Sent from the stored result `name` (a hit: it was used).
    Served { name: CString, coding: Encoding },
    /// Not stored yet: the file went as it is, and this would make it.
    Make(Job),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::FileKind;

    fn meta() -> FileMeta {
        FileMeta {
            size: 0x1234,
            mtime_sec: 0x6b0a_6c30,
            mtime_nsec: 0x13c8_276a,
            ino: 0x1_3600,
            kind: FileKind::Regular,
        }
    }

    #[test]
    fn covers_types_sizes_and_wildcards() {
        let c = CompressConfig::new(vec![1]);
        assert!(c.covers("text/html; charset=utf-8", 1000));
        assert!(c.covers("TEXT/CSS", 1000));
        assert!(c.covers("application/javascript", 1000));
        assert!(c.covers("image/svg+xml", DEFAULT_MAX_SIZE));
        assert!(!c.covers("image/png", 1000));
        assert!(!c.covers("application/octet-stream", 1000));
        assert!(!c.covers("text/html", DEFAULT_MIN_SIZE - 1));
        assert!(!c.covers("text/html", DEFAULT_MAX_SIZE + 1));
        assert!(!c.covers("garbage", 1000));
        assert!(!c.covers("", 1000));
    }

    #[test]
    fn names_carry_the_version_and_coding() {
        let n = stored_name(0xabc, &meta(), Encoding::Gzip);
        assert_eq!(
            n.to_str().unwrap(),
            "0000000000000abc-13600-1234-6b0a6c30.13c8276a.gz"
        );
        assert!(is_stored_name(n.to_str().unwrap()));
        let mut m = meta();
        m.mtime_nsec += 1;
        assert_ne!(stored_name(0xabc, &m, Encoding::Gzip), n);
        assert_ne!(stored_name(0xabd, &meta(), Encoding::Gzip), n);
        assert_ne!(stored_name(0xabc, &meta(), Encoding::Br), n);
        for bad in [
            "",
            ".gz",
            "x.gz",
            "0000000000000abc-1-2-3.gz",
            ".tmp-1.gz",
            "a-b-c-d.e.br",
        ] {
            assert!(!is_stored_name(bad), "{bad}");
        }
    }

    #[test]
    fn root_tags_differ_by_path_and_stay_put() {
        assert_eq!(root_tag(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(root_tag(b"/srv/a"), root_tag(b"/srv/b"));
        assert_eq!(root_tag(b"/srv/a"), root_tag(b"/srv/a"));
    }
}
