//! Checks at start that io_uring is usable and supports every operation
//! the backend uses.

use io_uring::{opcode, IoUring};

/// Checks that io_uring is usable here and supports every operation the
/// backend uses.
pub fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EPERM) => {
                "it is disabled (sysctl kernel.io_uring_disabled) or blocked by a seccomp filter"
            }
            Some(libc::ENOSYS) => "this kernel was built without it",
            _ => "setup failed",
        };
        format!("io_uring is unavailable: {why} ({e}); choose another --backend")
    })?;
    let mut p = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("io_uring probe failed: {e}"))?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "ACCEPT"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::OpenAt2::CODE, "OPENAT2"),
        (opcode::Read::CODE, "READ"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Shutdown::CODE, "SHUTDOWN"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
    ] {
        if !p.is_supported(code) {
            return Err(format!(
                "io_uring on this kernel lacks {name} (Linux 6.1 or later is needed); choose another --backend"
            ));
        }
    }
    Ok(())
}
