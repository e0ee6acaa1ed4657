//! `spindle-bench slowdisk`: a FUSE file system that mirrors a backing directory
//! read-only and delays each read by a model of a seek-bound RAID1 of spinning disks.
//!
//! * [`model`]: seek + rotation + transfer for one read on one spindle.
//! * [`disk`]: the queue, the elevator and one thread per spindle.
//! * [`layout`]: where files sit on the imaginary platter.
//! * [`fs`]: the FUSE side (lookup, getattr, open, read, readdir, readlink, statfs).
//! * [`mounts`]: stale-mount detection and cleanup.
//! * [`handle`]: starting and stopping the daemon as a child process (for the harness).
//! * [`fault`]: fault injection for the server's fault tests (off by default): EIO on
//!   chosen files (`--fail-file`) or at a seeded rate (`--fail-rate`, `--fault-seed`),
//!   reads that hang (`--hang-file`, `--hang-secs`), short reads (`--short-file`) and a
//!   file that shrinks under its reader (`--shrink-file`, `--shrink-after`). Fault files
//!   are opened with `FOPEN_DIRECT_IO` so that the page cache cannot hide the faults.
//!
//! See docs/slowdisk.md for the model, the flags and the measured numbers.

pub mod disk;
pub mod fault;
pub mod fs;
pub mod handle;
pub mod layout;
pub mod model;
pub mod mounts;
pub mod stats;
mod sys;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub use fault::FaultArgs;
pub use handle::{MountHandle, MountOptions};
pub use model::{Elevator, ModelArgs};
pub use stats::{SpindleStats, Stats};

/// FUSE session threads reading requests from the kernel. Reads are only queued there
/// (the spindle threads serve them), so two are enough to keep lookups flowing.
pub const SESSION_THREADS: usize = 2;
/// How often the main thread looks at the session and the parent process.
const POLL: Duration = Duration::from_millis(200);
/// How long to wait for the session to end after unmounting.
const UNMOUNT_WAIT: Duration = Duration::from_secs(3);

/// Command-line arguments of `spindle-bench slowdisk`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to mirror (read-only).
    #[arg(long)]
    pub backing: PathBuf,
    /// Where to mount the mirror (created if missing; stale mounts there are removed).
    #[arg(long)]
    pub mount: PathBuf,
    /// Write the statistics as JSON to this file: at mount time (seq 0), on SIGUSR1
    /// (a snapshot) and at exit (final).
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Unmount and exit when the parent process goes away.
    #[arg(long)]
    pub exit_with_parent: bool,
    /// The disk model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Fault injection (all off by default).
    #[command(flatten)]
    pub faults: FaultArgs,
}

fn write_stats(path: &Option<PathBuf>, stats: &Stats) {
    if let Some(p) = path {
        if let Err(e) = stats.write(p) {
            eprintln!("slowdisk: warning: {e:#}");
        }
    }
}

/// Runs `spindle-bench slowdisk` in the foreground until SIGINT, SIGTERM or SIGHUP.
pub fn run(args: Args) -> Result<()> {
    let parent = sys::getppid();
    args.model.validate()?;
    args.faults.validate()?;
    let backing = std::fs::canonicalize(&args.backing)
        .with_context(|| format!("--backing {}", args.backing.display()))?;
    if !backing.is_dir() {
        bail!("--backing {} is not a directory", backing.display());
    }
    let mut faults = fault::Faults::resolve(&args.faults, &backing)?;
    match std::fs::symlink_metadata(&args.mount) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&args.mount)
                .with_context(|| format!("creating --mount {}", args.mount.display()))?;
        }
        _ => {}
    }
    mounts::clean_stale(&args.mount)?;
    let mount = std::fs::canonicalize(&args.mount)
        .with_context(|| format!("--mount {}", args.mount.display()))?;
    if !mount.is_dir() {
        bail!("--mount {} is not a directory", mount.display());
    }
    if mount.starts_with(&backing) {
        bail!(
            "--mount {} is inside --backing {}; the mirror would contain itself",
            mount.display(),
            backing.display()
        );
    }
    if backing.starts_with(&mount) {
        bail!(
            "--backing {} is inside --mount {}; the mount would hide it",
            backing.display(),
            mount.display()
        );
    }
    sys::raise_nofile_limit();

    let t0 = Instant::now();
    let layout = layout::Layout::walk(&backing)?;
    eprintln!(
        "slowdisk: laid out {} files, {:.1} MB, in {:.2} s{}",
        layout.files(),
        layout.platter_bytes() as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        if layout.truncated() {
            " (walk stopped at its limit; later files get hashed positions)"
        } else {
            ""
        }
    );

    // Every thread started from here on inherits the mask: only this thread sees them.
    sys::block_signals().context("blocking signals")?;

    let model = model::Model::new(args.model.clone(), layout.platter_bytes());
    let (disk, mut spindles) = disk::Disk::start(model).context("starting spindle threads")?;
    faults.start().context("starting the fault timer thread")?;
    let fs = fs::SlowFs::new(&backing, layout, disk.clone(), args.model.max_background)
        .with_context(|| format!("--backing {}", backing.display()))?
        .with_faults(faults);

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::RO,
        fuser::MountOption::FSName("slowdisk".into()),
        fuser::MountOption::Subtype("slowdisk".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoAtime,
    ];
    // Servers drop privileges (nginx workers run as www-data): let every user in, and
    // let the kernel check permission bits (default_permissions).
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(SESSION_THREADS);
    let session = fuser::Session::new(fs, &mount, &config).with_context(|| {
        format!(
            "mounting FUSE at {} (needs /dev/fuse, root or fusermount3 from the fuse3 package)",
            mount.display()
        )
    })?;
    let bg = session.spawn().context("starting the FUSE session")?;

    let mut seq = 0u64;
    let mut snap = disk.stats();
    snap.seq = seq;
    write_stats(&args.stats, &snap);
    eprintln!(
        "slowdisk: {} mirrored read-only at {} ({} spindles, {} ms seek, {} rpm, {} MB/s, {})",
        backing.display(),
        mount.display(),
        args.model.spindles,
        args.model.seek_ms,
        args.model.rpm,
        args.model.mbps,
        args.model.elevator.as_str()
    );
    if args.faults.any() {
        eprintln!(
            "slowdisk: injecting faults: {}",
            args.faults.to_flags().join(" ")
        );
    }

    loop {
        match sys::wait_signal(POLL) {
            Some(libc::SIGUSR1) => {
                seq += 1;
                let mut s = disk.stats();
                s.seq = seq;
                write_stats(&args.stats, &s);
            }
            Some(sig) => {
                eprintln!("slowdisk: signal {sig}, unmounting {}", mount.display());
                break;
            }
            None => {
                if bg.guard.is_finished() {
                    eprintln!("slowdisk: {} was unmounted from outside", mount.display());
                    break;
                }
                if args.exit_with_parent && sys::getppid() != parent {
                    eprintln!(
                        "slowdisk: parent process exited, unmounting {}",
                        mount.display()
                    );
                    break;
                }
            }
        }
    }

    let mut result = Ok(());
    match mounts::unmount(&mount) {
        Ok(true) => eprintln!(
            "slowdisk: {} was busy; detached it lazily (open files get ENOTCONN)",
            mount.display()
        ),
        Ok(false) => {}
        Err(e) => result = Err(e),
    }
    let waited = Instant::now();
    while !bg.guard.is_finished() && waited.elapsed() < UNMOUNT_WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    spindles.shutdown();
    let mut fin = disk.stats();
    fin.seq = seq + 1;
    fin.final_ = true;
    print!("{}", fin.table());
    write_stats(&args.stats, &fin);
    if bg.guard.is_finished() {
        if let Err(e) = bg.join() {
            eprintln!("slowdisk: FUSE session ended with: {e}");
        }
    } else {
        // The session is still attached to open files of a detached mount; exiting
        // closes /dev/fuse, which aborts the connection. Dropping the session here
        // would try to unmount the path again, which may be someone else's mount now.
        std::mem::forget(bg);
    }
    result
}
