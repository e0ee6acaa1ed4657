//! Raw system calls: unmounting, signals, resource limits. The only module with `unsafe`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `umount2(path, flags)`.
pub fn umount2(path: &Path, flags: libc::c_int) -> io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid NUL-terminated string that lives across the call; the
    // kernel only reads it during the call.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Signals the daemon waits for (all of them blocked in every thread).
pub const WAITED_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1];

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any use and
    // sigaddset only writes inside it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks `WAITED_SIGNALS` in the calling thread; threads started afterwards inherit
/// the mask, so only `wait_signal` ever sees them.
pub fn block_signals() -> io::Result<()> {
    let set = sigset(&WAITED_SIGNALS);
    // SAFETY: `set` is an initialised sigset_t on our stack, read during the call only;
    // the old mask is not requested (null).
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Waits up to `timeout` for one of `WAITED_SIGNALS`; returns it, or None on timeout.
pub fn wait_signal(timeout: Duration) -> Option<libc::c_int> {
    let set = sigset(&WAITED_SIGNALS);
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `ts` live on our stack across the call and are only read; the
    // siginfo pointer is null (not requested).
    let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    if r > 0 {
        Some(r)
    } else {
        None
    }
}

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes plain integers and touches no memory of ours.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The parent process id.
pub fn getppid() -> u32 {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Raises the soft limit on open files to the hard limit (the daemon keeps one backing
/// file open per open file on the mount).
pub fn raise_nofile_limit() {
    // SAFETY: `lim` is a plain struct on our stack, written by getrlimit and read by
    // setrlimit during the calls only.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// What `statfs` on the mount reports: the backing file system's numbers.
pub struct FsStat {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// `statvfs(path)`.
pub fn statvfs(path: &Path) -> io::Result<FsStat> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid C string and `sv` a plain struct on our stack; the kernel
    // reads the one and fills the other during the call only.
    unsafe {
        let mut sv: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut sv) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(FsStat {
            blocks: sv.f_blocks,
            bfree: sv.f_bfree,
            bavail: sv.f_bavail,
            files: sv.f_files,
            ffree: sv.f_ffree,
            bsize: sv.f_bsize as u32,
            namelen: sv.f_namemax as u32,
            frsize: sv.f_frsize as u32,
        })
    }
}
