//! Finding FUSE mounts in /proc/self/mountinfo and removing stale ones.
//!
//! A daemon killed with SIGKILL leaves its mount behind: the kernel aborts the FUSE
//! connection, and every access to the mount point fails with ENOTCONN ("Transport
//! endpoint is not connected") until someone unmounts it. Before mounting, slowdisk
//! detaches every FUSE mount stacked on its mount point.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::sys;

/// Most FUSE mounts stacked on one mount point that a cleanup removes.
pub const MAX_STACKED_MOUNTS: usize = 16;

/// One line of /proc/self/mountinfo (the fields slowdisk needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// File system type, e.g. `fuse` or `fuse.sshfs`.
    pub fstype: String,
    /// Mount source, e.g. `slowdisk`.
    pub source: String,
}

impl MountEntry {
    /// Whether this is a FUSE mount.
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.") || self.fstype == "fuseblk"
    }
}

/// Undoes the octal escapes (`\040` for a space, ...) of mountinfo paths.
fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Parses the text of a mountinfo file.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < dash + 3 {
            continue;
        }
        out.push(MountEntry {
            mount_point: unescape(fields[4]),
            fstype: fields[dash + 1].to_string(),
            source: unescape(fields[dash + 2]).to_string_lossy().into_owned(),
        });
    }
    out
}

/// The mounts of this process's mount namespace.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let text =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text))
}

/// The absolute, symlink-free form of a mount point, even when the mount point itself
/// is a dead FUSE mount that cannot be stat()ed (ENOTCONN).
pub fn canonical_mount_point(path: &Path) -> Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(p),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            let name = path.file_name().with_context(|| {
                format!("mount point {} has no final component", path.display())
            })?;
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let parent = std::fs::canonicalize(parent)
                .with_context(|| format!("resolving {}", parent.display()))?;
            Ok(parent.join(name))
        }
        Err(e) => Err(e).with_context(|| format!("resolving mount point {}", path.display())),
    }
}

/// FUSE mounts whose mount point is exactly `canonical`.
pub fn fuse_mounts_at(canonical: &Path) -> Result<Vec<MountEntry>> {
    Ok(mounts()?
        .into_iter()
        .filter(|m| m.is_fuse() && m.mount_point == canonical)
        .collect())
}

/// Whether `path` is a dead FUSE mount (its daemon is gone). Uses statfs, which always
/// goes to the daemon (stat may be answered from the kernel's attribute cache).
pub fn is_dead(path: &Path) -> bool {
    matches!(sys::statvfs(path), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// Lazily unmounts one mount at `canonical`: umount2(MNT_DETACH), or `fusermount3 -u -z`
/// when the kernel refuses (not root).
pub fn detach(canonical: &Path) -> Result<()> {
    match sys::umount2(canonical, libc::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            let out = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg("--")
                .arg(canonical)
                .output()
                .context("running fusermount3 (Debian package fuse3)")?;
            if !out.status.success() {
                bail!(
                    "fusermount3 -u -z {} failed: {}",
                    canonical.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("umount2({}, MNT_DETACH)", canonical.display())),
    }
}

/// Unmounts `canonical` cleanly: a plain umount, falling back to a lazy detach when the
/// mount is busy (files still open). Returns whether it had to detach.
pub fn unmount(canonical: &Path) -> Result<bool> {
    match sys::umount2(canonical, 0) {
        Ok(()) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            detach(canonical)?;
            Ok(true)
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // Not a mount point (any more): somebody else unmounted it.
            Ok(false)
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            detach(canonical)?;
            Ok(true)
        }
        Err(e) => Err(e).with_context(|| format!("umount2({})", canonical.display())),
    }
}

/// Removes every FUSE mount stacked on `path` (dead ones left by a killed daemon, or live
/// ones of an orphaned daemon, whose session then ends). Returns how many it removed.
pub fn clean_stale(path: &Path) -> Result<usize> {
    let canonical = canonical_mount_point(path)?;
    let mut removed = 0;
    for _ in 0..MAX_STACKED_MOUNTS {
        let found = fuse_mounts_at(&canonical)?;
        let Some(m) = found.last() else {
            return Ok(removed);
        };
        let dead = is_dead(&canonical);
        eprintln!(
            "slowdisk: removing {} FUSE mount at {} (source {}, type {})",
            if dead { "stale" } else { "leftover" },
            canonical.display(),
            m.source,
            m.fstype
        );
        detach(&canonical)?;
        removed += 1;
    }
    if fuse_mounts_at(&canonical)?.is_empty() {
        Ok(removed)
    } else {
        bail!(
            "more than {MAX_STACKED_MOUNTS} FUSE mounts stacked on {}; giving up",
            canonical.display()
        )
    }
}

/// Whether an I/O error means "transport endpoint is not connected".
pub fn is_enotconn(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTCONN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines() {
        let text = "\
36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue
99 36 0:55 / /tmp/x rw,nosuid,nodev,relatime shared:5 - fuse slowdisk rw,user_id=0,group_id=0,allow_other
100 36 0:56 / /tmp/y rw - fuse.sshfs host:/ rw
bogus line
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert!(!m[0].is_fuse());
        assert_eq!(m[1].source, "slowdisk");
        assert!(m[1].is_fuse());
        assert!(m[2].is_fuse());
        assert_eq!(m[2].fstype, "fuse.sshfs");
    }

    #[test]
    fn real_mountinfo_has_root() {
        let m = mounts().unwrap();
        assert!(m.iter().any(|e| e.mount_point == Path::new("/")));
    }
}
