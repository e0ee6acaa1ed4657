//! Helpers shared by the slowdisk integration tests: real files, a real FUSE mount, a
//! real daemon process.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use slowdisk::{mounts, FaultArgs, ModelArgs, MountHandle, MountOptions};

/// Removes any FUSE mount left at `path` when dropped, so that a failing test (which
/// may have killed its daemon) leaves no dead mount behind. Declare it after the
/// tempdir, so it is dropped first.
pub struct UnmountGuard(pub PathBuf);

impl Drop for UnmountGuard {
    fn drop(&mut self) {
        if self.0.exists() || mounts::is_dead(&self.0) {
            let _ = mounts::clean_stale(&self.0);
        }
    }
}

/// Timing tests run one at a time, so that they do not steal CPU from each other.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why the FUSE tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    if !test_skip::is_root() {
        return Some("not root (mounting FUSE with allow_other needs root)".into());
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    None
}

/// Returns true when the calling test cannot run here: it says why, and
/// fails under CI ([`test_skip::skip_or_fail`]).
pub fn skip() -> bool {
    match skip_reason() {
        Some(r) => {
            test_skip::skip_or_fail(r);
            true
        }
        None => false,
    }
}

/// The content of file `i`: a recognisable pattern, different for every file.
pub fn pattern(i: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Creates `dirs` directories of `per_dir` files of `size` bytes under `root`; returns
/// the relative paths, in name order.
pub fn make_files(root: &Path, dirs: usize, per_dir: usize, size: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in 0..dirs {
        let dir = root.join(format!("files-{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            let rel = PathBuf::from(format!("files-{d:03}/{f:03}"));
            std::fs::write(root.join(&rel), pattern(d * per_dir + f, size)).unwrap();
            out.push(rel);
        }
    }
    out
}

/// The default model, only faster, so that tests do not wait on it.
pub fn fast_model() -> ModelArgs {
    ModelArgs {
        seek_ms: 1.0,
        seek_min_ms: 0.1,
        rpm: 60_000.0,
        mbps: 1000.0,
        ..ModelArgs::default()
    }
}

/// Starts the daemon (this crate's `slowdisk` binary) on `backing` at `mount`.
pub fn spawn(backing: &Path, mount: &Path, stats: &Path, model: ModelArgs) -> MountHandle {
    spawn_with_faults(backing, mount, stats, model, FaultArgs::default())
}

/// [`spawn`], with faults injected.
pub fn spawn_with_faults(
    backing: &Path,
    mount: &Path,
    stats: &Path,
    model: ModelArgs,
    faults: FaultArgs,
) -> MountHandle {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slowdisk"));
    cmd.stdout(Stdio::null());
    let mut opts = MountOptions::new(backing, mount, stats);
    opts.model = model;
    opts.faults = faults;
    opts.ready_timeout = std::time::Duration::from_secs(30);
    MountHandle::spawn(cmd, &opts).expect("starting slowdisk")
}
