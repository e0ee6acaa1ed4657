//! Starting and stopping a slowdisk daemon as a child process (for the bench harness).
//!
//! ```no_run
//! use std::process::Command;
//! use slowdisk::{MountHandle, MountOptions};
//! # fn main() -> anyhow::Result<()> {
//! let mut cmd = Command::new("target/release/spindle-bench");
//! cmd.arg("slowdisk");
//! let opts = MountOptions::new("/srv/data", "/mnt/slow", "/tmp/slowdisk-stats.json");
//! let disk = MountHandle::spawn(cmd, &opts)?; // returns once the mount is live
//! let before = disk.snapshot()?;
//! // ... run the benchmark against /mnt/slow ...
//! let after = disk.snapshot()?;
//! println!("{}", after.since(&before).table());
//! let total = disk.stop()?; // SIGTERM, clean unmount, final statistics
//! # let _ = total; Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::fault::FaultArgs;
use crate::model::ModelArgs;
use crate::mounts;
use crate::stats::Stats;
use crate::sys;

/// How long `stop` waits for the daemon after SIGTERM before it uses SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `snapshot` waits for the daemon to write a new snapshot.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(5);
/// Poll interval while waiting for the daemon.
const POLL: Duration = Duration::from_millis(10);

/// What to mount, where, and with which model.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Directory to mirror.
    pub backing: PathBuf,
    /// Mount point (created if missing).
    pub mount: PathBuf,
    /// Where the daemon writes its statistics (JSON).
    pub stats: PathBuf,
    /// The disk model.
    pub model: ModelArgs,
    /// Faults to inject (none by default; see [`crate::fault`]). The named files are
    /// checked when the daemon starts: a missing one makes `spawn` fail.
    pub faults: FaultArgs,
    /// How long to wait for the mount to go live (the layout walk of a large data set
    /// takes a while).
    pub ready_timeout: Duration,
    /// Pass `--exit-with-parent`: the daemon unmounts and exits if this process dies.
    pub exit_with_parent: bool,
}

impl MountOptions {
    /// Options with the default model.
    pub fn new(
        backing: impl Into<PathBuf>,
        mount: impl Into<PathBuf>,
        stats: impl Into<PathBuf>,
    ) -> MountOptions {
        MountOptions {
            backing: backing.into(),
            mount: mount.into(),
            stats: stats.into(),
            model: ModelArgs::default(),
            faults: FaultArgs::default(),
            ready_timeout: Duration::from_secs(120),
            exit_with_parent: true,
        }
    }
}

/// A running slowdisk daemon. Dropping it stops the daemon (SIGTERM, then SIGKILL and a
/// lazy unmount if it does not stop in time).
#[derive(Debug)]
pub struct MountHandle {
    child: Option<Child>,
    mount: PathBuf,
    stats: PathBuf,
}

impl MountHandle {
    /// Starts `cmd` (e.g. `spindle-bench slowdisk`, or the `slowdisk` binary of this
    /// crate) with the flags from `opts`, and returns once the mount is live. The
    /// caller's settings of `cmd`'s stdout/stderr are kept (the daemon prints a
    /// statistics table to stdout at exit); stdin is closed.
    pub fn spawn(mut cmd: Command, opts: &MountOptions) -> Result<MountHandle> {
        opts.model.validate()?;
        opts.faults.validate()?;
        if std::fs::symlink_metadata(&opts.mount).is_err() {
            std::fs::create_dir_all(&opts.mount)
                .with_context(|| format!("creating {}", opts.mount.display()))?;
        }
        mounts::clean_stale(&opts.mount)?;
        let mount = mounts::canonical_mount_point(&opts.mount)?;
        match std::fs::remove_file(&opts.stats) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("removing old {}", opts.stats.display()))
            }
        }
        cmd.arg("--backing")
            .arg(&opts.backing)
            .arg("--mount")
            .arg(&mount)
            .arg("--stats")
            .arg(&opts.stats)
            .args(opts.model.to_flags())
            .args(opts.faults.to_flags())
            .stdin(Stdio::null());
        if opts.exit_with_parent {
            cmd.arg("--exit-with-parent");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        let mut handle = MountHandle {
            child: Some(child),
            mount,
            stats: opts.stats.clone(),
        };
        let t0 = Instant::now();
        loop {
            if let Some(status) = handle.try_wait()? {
                handle.child = None;
                bail!("slowdisk exited before its mount went live: {status}");
            }
            if handle.is_live() {
                return Ok(handle);
            }
            if t0.elapsed() > opts.ready_timeout {
                bail!(
                    "slowdisk did not mount {} within {:?}",
                    handle.mount.display(),
                    opts.ready_timeout
                );
                // `handle` is dropped here, which stops the child.
            }
            std::thread::sleep(POLL);
        }
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => bail!("slowdisk is not running"),
        }
    }

    fn is_live(&self) -> bool {
        // The daemon writes snapshot 0 right after mounting.
        Stats::read(&self.stats).is_ok()
            && mounts::fuse_mounts_at(&self.mount)
                .map(|m| m.iter().any(|e| e.source == "slowdisk"))
                .unwrap_or(false)
    }

    /// The (canonical) mount point.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// Process id of the daemon.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Asks the daemon for a statistics snapshot (SIGUSR1) and returns it. Use
    /// [`Stats::since`] on two snapshots to get the numbers of a measurement window.
    pub fn snapshot(&self) -> Result<Stats> {
        let pid = self.pid().context("slowdisk is not running")?;
        let before = Stats::read(&self.stats)?.seq;
        sys::kill(pid, libc::SIGUSR1).context("signalling slowdisk")?;
        let t0 = Instant::now();
        loop {
            if let Ok(s) = Stats::read(&self.stats) {
                if s.seq > before {
                    return Ok(s);
                }
            }
            if t0.elapsed() > SNAPSHOT_TIMEOUT {
                bail!("slowdisk wrote no snapshot within {SNAPSHOT_TIMEOUT:?}");
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops the daemon (SIGTERM), waits for it to unmount and exit, and returns its
    /// final statistics.
    pub fn stop(mut self) -> Result<Stats> {
        let status = self.terminate()?;
        if !status.success() {
            bail!("slowdisk exited with {status}");
        }
        if !mounts::fuse_mounts_at(&self.mount)?.is_empty() {
            mounts::clean_stale(&self.mount)?;
            bail!("slowdisk exited but left its mount behind (now removed)");
        }
        let s = Stats::read(&self.stats)?;
        if !s.final_ {
            bail!("slowdisk exited without writing its final statistics");
        }
        Ok(s)
    }

    /// Simulates a crash: SIGKILL, and nothing else. The mount is left behind, dead
    /// (ENOTCONN), for the next `spawn` (or [`crate::mounts::clean_stale`]) to remove.
    pub fn kill(mut self) -> Result<ExitStatus> {
        let mut child = self.child.take().context("slowdisk is not running")?;
        let _ = child.kill();
        Ok(child.wait()?)
    }

    /// SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL and a lazy unmount.
    fn terminate(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("slowdisk is not running");
        };
        if child.try_wait()?.is_none() {
            let _ = sys::kill(child.id(), libc::SIGTERM);
        }
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if t0.elapsed() > STOP_TIMEOUT {
                let _ = child.kill();
                let status = child.wait()?;
                mounts::clean_stale(&self.mount)?;
                bail!("slowdisk did not stop within {STOP_TIMEOUT:?}; killed it ({status})");
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.terminate() {
                eprintln!("slowdisk: {e:#}");
            }
        }
    }
}
