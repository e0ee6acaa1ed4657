//! The bytes that move: one source file of random content on a real disk
//! (the AIO sender reads it with `O_DIRECT`, which tmpfs refuses before
//! Linux 6.6 and which on tmpfs reaches no disk anyway), read once into memory. Socket `k`
//! carries the file's bytes from offset `start(k)` on, wrapping at the end
//! of the file, so every sender (from memory, `sendfile`, splice or AIO)
//! sends the same stream and the receiver's checksum can be checked
//! against it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::digest::Digest;

/// Alignment of file sizes, stream starts and message sizes: the largest
/// message size, so no message ever straddles the end of the file.
pub const MAX_MSG: usize = 1 << 20;
/// Smallest message size (and the `O_DIRECT` alignment the AIO sender needs).
/// Message sizes are powers of two from `MIN_MSG` to `MAX_MSG`.
pub const MIN_MSG: usize = 512;
/// Default size of the source file.
pub const DEFAULT_FILE_LEN: usize = 64 << 20;

/// The source file and its content.
pub struct Source {
    pub path: PathBuf,
    pub content: Vec<u8>,
}

impl Source {
    /// Opens `path`, creating it with random content when it is missing or
    /// has the wrong size, and reads it fully into memory (which also leaves
    /// it in the page cache for the `sendfile` and splice senders).
    pub fn open_or_create(path: &Path, len: usize) -> anyhow::Result<Source> {
        if len == 0 || len & (MAX_MSG - 1) != 0 {
            bail!("source file length must be a positive multiple of 1 MiB, got {len}");
        }
        let ok = std::fs::metadata(path)
            .map(|m| m.is_file() && m.len() == len as u64)
            .unwrap_or(false);
        if !ok {
            if let Some(dir) = path.parent() {
                if !dir.as_os_str().is_empty() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let mut f = std::fs::File::create(&tmp)
                .with_context(|| format!("creating source file {}", tmp.display()))?;
            let mut state = seed_from_time();
            let mut block = vec![0u8; MAX_MSG];
            for _ in 0..len / MAX_MSG {
                for w in block.chunks_exact_mut(8) {
                    w.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
                }
                f.write_all(&block)?;
            }
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)
                .with_context(|| format!("renaming {} into place", tmp.display()))?;
        }
        let mut content = Vec::with_capacity(len);
        std::fs::File::open(path)
            .with_context(|| format!("opening source file {}", path.display()))?
            .read_to_end(&mut content)?;
        if content.len() != len {
            bail!("source file {} changed size while reading", path.display());
        }
        Ok(Source {
            path: path.to_path_buf(),
            content,
        })
    }

    pub fn len(&self) -> usize {
        self.content.len()
    }

    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
    }

    /// File offset where socket `k`'s stream starts.
    pub fn start(&self, k: usize) -> usize {
        (k * 7 * MAX_MSG) % self.len()
    }

    /// File offset of stream position `pos` of socket `k`.
    pub fn offset(&self, k: usize, pos: u64) -> usize {
        ((self.start(k) as u64 + pos) % self.len() as u64) as usize
    }

    /// Length of the next message at stream position `pos` of socket `k`'s
    /// `total`-byte stream: up to the next multiple of `size` (a power of
    /// two, at most `MAX_MSG`), so a short write is completed before the
    /// next message starts and no message straddles the end of the file.
    pub fn msg_len(&self, k: usize, pos: u64, total: u64, size: usize) -> usize {
        let off = self.offset(k, pos);
        let to_boundary = size as u64 - pos % size as u64;
        to_boundary.min(total - pos).min((self.len() - off) as u64) as usize
    }

    /// The checksum of the first `len` bytes of socket `k`'s stream.
    pub fn expected_digest(&self, k: usize, len: u64) -> u64 {
        let mut d = Digest::new();
        let mut pos = 0u64;
        while pos < len {
            let off = self.offset(k, pos);
            let n = ((self.len() - off) as u64).min(len - pos) as usize;
            d.update(&self.content[off..off + n]);
            pos += n as u64;
        }
        d.finish()
    }
}

fn seed_from_time() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
