//! The ACME state directory (`--acme-state`): the account key and URL per
//! directory, each certificate's chain and key, and the lock that lets one
//! process at a time order (a binary handover starts a second one beside
//! the first). Every file is written whole to a temporary name with mode
//! 0600, synced, then renamed over the old one, so a crash leaves the old
//! file or the new one, never half of either.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Largest state file read (a chain of a few certificates, a key, a URL).
pub const MAX_STATE_FILE: u64 = 1 << 20;
/// The lock file's name in the state directory.
const LOCK_FILE: &str = "lock";

/// Whether this process holds the state directory's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// This process may order and write certificates.
    Held,
    /// Another process (the one before a handover, or a second server on
    /// the same directory) holds it: this one reads what it writes.
    HeldElsewhere,
}

/// The state directory, checked writable at start.
pub struct Store {
    dir: PathBuf,
    /// The CA's own subdirectory (its host and port): its account, and
    /// the certificates it issued, so that a certificate from a staging
    /// CA is never served once the production one is configured.
    ca_dir: PathBuf,
    lock_file: File,
    lock: Lock,
}

impl Store {
    /// Creates the directory and the subdirectory of the CA at
    /// `directory_url` (mode 0700) if they are missing and opens the lock
    /// file, which proves it writable; `owner` (uid, gid): the user
    /// spindle will run as (`--user`), given both and their files.
    /// Errors are one line.
    pub fn open(
        dir: &Path,
        directory_url: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<Store, String> {
        let fail = |e: std::io::Error| {
            format!(
                "acme-state {}: {e}; the directory must be writable by the user spindle runs as",
                dir.display()
            )
        };
        std::fs::create_dir_all(dir).map_err(fail)?;
        let meta = std::fs::metadata(dir).map_err(fail)?;
        if !meta.is_dir() {
            return Err(format!("acme-state {}: not a directory", dir.display()));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            // Keys live here: nobody else may list it.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
        }
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))
            .map_err(fail)?;
        let ca_dir = dir.join(file_name(ca_host(directory_url)));
        match std::fs::DirBuilder::new().mode(0o700).create(&ca_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(fail(e)),
            _ => {}
        }
        // A probe that a file can be written there, as certificates will
        // be (a read-only lock file left by someone else would pass the
        // open above).
        write_atomic(&ca_dir.join(".probe"), b"").map_err(fail)?;
        let _ = std::fs::remove_file(ca_dir.join(".probe"));
        if let Some((uid, gid)) = owner {
            chown_tree(dir, uid, gid, 2).map_err(fail)?;
        }
        let mut store = Store {
            dir: dir.to_path_buf(),
            ca_dir,
            lock_file,
            lock: Lock::HeldElsewhere,
        };
        store.try_lock();
        Ok(store)
    }

    /// Takes the lock if it is free; the state after.
    pub fn try_lock(&mut self) -> Lock {
        if self.lock == Lock::HeldElsewhere {
            self.lock = match self.lock_file.try_lock() {
                Ok(()) => Lock::Held,
                Err(TryLockError::WouldBlock) => Lock::HeldElsewhere,
                Err(TryLockError::Error(e)) => {
                    crate::warn!(
                        "acme-state {}: cannot lock: {e}; not ordering",
                        self.dir.display()
                    );
                    Lock::HeldElsewhere
                }
            };
        }
        self.lock
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a certificate for `names` lives: its chain and its key.
    pub fn cert_paths(&self, names: &[String]) -> (PathBuf, PathBuf) {
        let base = file_name(&names[0]);
        (
            self.ca_dir.join(format!("{base}.crt")),
            self.ca_dir.join(format!("{base}.key")),
        )
    }

    /// The account's key and URL files.
    pub fn account_paths(&self) -> (PathBuf, PathBuf) {
        (
            self.ca_dir.join("account.key"),
            self.ca_dir.join("account.url"),
        )
    }
}

/// The host (and port) of a directory URL.
fn ca_host(directory: &str) -> &str {
    let rest = directory.split_once("://").map_or(directory, |(_, r)| r);
    match rest.split('/').next() {
        Some(h) if !h.is_empty() => h,
        _ => "ca",
    }
}

/// Gives `path`, and what is beneath it down to `depth` levels, to
/// `uid`:`gid` (symbolic links themselves, not what they name).
fn chown_tree(path: &Path, uid: u32, gid: u32, depth: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if depth > 0 && std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid, depth - 1)?;
        }
    }
    Ok(())
}

/// A name as a file name: letters, digits, `.`, `-`; anything else `_`.
fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `bytes` to `path` atomically, mode 0600: a temporary file in the
/// same directory, synced, renamed over `path`, and the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("state"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reads a state file; `Ok(None)` when it does not exist.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
        Ok(m) if m.len() > MAX_STATE_FILE => {
            return Err(format!(
                "{}: {} bytes, more than any ACME state file",
                path.display(),
                m.len()
            ))
        }
        Ok(_) => {}
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_whole_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let ca = "https://127.0.0.1:14000/dir";
        let mut s = Store::open(&dir.path().join("acme"), ca, None).unwrap();
        assert_eq!(s.try_lock(), Lock::Held);
        let (crt, _) = s.cert_paths(&["Example.org".into()]);
        assert!(crt.ends_with("127.0.0.1_14000/example.org.crt"), "{crt:?}");
        write_atomic(&crt, b"one").unwrap();
        write_atomic(&crt, b"two").unwrap();
        assert_eq!(read(&crt).unwrap().unwrap(), b"two");
        let mode = std::fs::metadata(&crt).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(s.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        // A second opener (another process, or a second open here: flock
        // locks belong to the open file) finds it held.
        let mut other = Store::open(s.dir(), ca, None).unwrap();
        assert_eq!(other.try_lock(), Lock::HeldElsewhere);
        drop(s);
        assert_eq!(other.try_lock(), Lock::Held);
        let (key, url) = other.account_paths();
        assert!(key.ends_with("127.0.0.1_14000/account.key"), "{key:?}");
        assert!(url.ends_with("127.0.0.1_14000/account.url"));
        assert_eq!(
            ca_host("https://acme-v02.api.letsencrypt.org/directory"),
            "acme-v02.api.letsencrypt.org"
        );
        assert_eq!(read(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_file_in_the_way_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("file");
        std::fs::write(&f, "x").unwrap();
        for path in [f.clone(), f.join("sub")] {
            let e = Store::open(&path, "https://ca.test/dir", None)
                .err()
                .unwrap();
            assert!(e.starts_with("acme-state ") && !e.contains('\n'), "{e}");
        }
    }
}
