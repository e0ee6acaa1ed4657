//! Binary handover: SIGUSR2 starts a new spindle (the binary at the path
//! this one was started from, which may have been replaced since, with the
//! same command line) and passes it every listening socket, as nginx's
//! binary upgrade does. Once the new process serves, it says so on a pipe,
//! and this one stops accepting and finishes its responses as on SIGTERM
//! (`--drain-timeout`); the sockets never close, so no connection waiting
//! in a queue is lost, and downloads under way run to their end in the old
//! process. If the new process fails (a bad binary, a configuration that no
//! longer loads), it exits, and this one says so and keeps serving.
//!
//! The sockets go through `exec` under their own numbers, named in
//! `SPINDLE_HANDOVER`: the parent's pid, the pipe's write end, then per
//! group `kind,configured-address,fd:fd:...` (`-` for a socket systemd
//! passed). The child believes the variable only when that pid is its
//! parent's, as `LISTEN_PID` works for systemd.
//!
//! Under systemd, the old process tells the manager the new main pid
//! (`MAINPID=`) before it drains, so the service stays up; the manager
//! takes notifications only from the main pid, so the new process sends no
//! `READY=1` and the old one no `STOPPING=1` (server.rs).

use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use std::sync::Arc;

use crate::conn::AcceptGate;
use crate::listen::{Group, Kind, Listeners};
use crate::net;

/// The environment variable that carries the sockets.
const VAR: &str = "SPINDLE_HANDOVER";
/// Most descriptors one handover passes (the limit on what the child
/// accepts from the variable).
pub const MAX_HANDOVER_FDS: usize = 4096;

/// What a new process was given: the groups, and the pipe to say it serves.
pub struct Inherited {
    pub groups: Vec<Group>,
    pub ready: OwnedFd,
}

/// The sockets the parent passed, if this process was started by a
/// handover. The variable is removed either way.
pub fn inherited() -> Result<Option<Inherited>, String> {
    let Some(v) = std::env::var_os(VAR) else {
        return Ok(None);
    };
    std::env::remove_var(VAR);
    let v = v.into_string().map_err(|_| format!("{VAR}: not text"))?;
    let bad = |why: &str| format!("{VAR}={v:?}: {why}");
    let mut parts = v.split(';');
    let ppid: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| bad("no parent pid"))?;
    if ppid != std::os::unix::process::parent_id() {
        // A variable left over from somewhere else: not ours to use.
        return Ok(None);
    }
    let ready_fd: RawFd = parts
        .next()
        .and_then(|p| p.parse().ok())
        .filter(|&fd| fd > 2)
        .ok_or_else(|| bad("no pipe"))?;
    let mut groups = Vec::new();
    let mut taken = Vec::new();
    for g in parts {
        let mut f = g.splitn(3, ',');
        let (Some(kind), Some(addr), Some(fds)) = (f.next(), f.next(), f.next()) else {
            return Err(bad("a group is not kind,address,fds"));
        };
        let kind = Kind::parse(kind).ok_or_else(|| bad("unknown listener kind"))?;
        let configured = match addr {
            "-" => None,
            a => Some(a.parse::<SocketAddr>().map_err(|_| bad("bad address"))?),
        };
        let mut socks = Vec::new();
        for fd in fds.split(':') {
            let fd: RawFd = fd.parse().map_err(|_| bad("bad descriptor"))?;
            if fd <= 2 || fd == ready_fd || taken.contains(&fd) || taken.len() >= MAX_HANDOVER_FDS {
                return Err(bad("bad descriptor"));
            }
            taken.push(fd);
            socks.push(net::take_listening(fd, "from the previous spindle")?);
        }
        let actual = net::local_addr(socks[0].as_raw_fd())
            .map_err(|e| format!("socket from the previous spindle: {e}"))?;
        groups.push(Group {
            kind,
            configured,
            actual,
            socks,
        });
    }
    let ready = net::take_pipe_end(ready_fd).map_err(|e| bad(&e))?;
    Ok(Some(Inherited { groups, ready }))
}

/// Tells the parent that this process serves (after its startup line).
pub fn say_ready(ready: OwnedFd) {
    let mut f = std::fs::File::from(ready);
    // The parent may be gone; nothing to do then.
    let _ = std::io::Write::write_all(&mut f, b"1");
}

/// Set while a new process is starting, so that a second SIGUSR2 waits.
static STARTING: AtomicBool = AtomicBool::new(false);

/// The pid of the process this one handed its sockets to, 0 before that.
static HANDED_TO: AtomicU32 = AtomicU32::new(0);

/// The pid of the new process, once this one has handed over to it (its
/// drain then follows, by the SIGTERM [`watch`] raises).
pub fn handed_to() -> Option<u32> {
    match HANDED_TO.load(Ordering::Acquire) {
        0 => None,
        pid => Some(pid),
    }
}

/// The binary and arguments this process was started with, read at start:
/// `/proc/self/exe` names a deleted file once the binary is replaced, and
/// the handover wants the new one at the same path.
pub struct Program {
    exe: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Program {
    pub fn current() -> Program {
        let mut args = std::env::args_os();
        let argv0 = args.next();
        let exe = std::env::current_exe()
            .ok()
            .or_else(|| argv0.map(Into::into))
            .unwrap_or_else(|| "spindle".into());
        Program {
            exe,
            args: args.collect(),
        }
    }
}

/// Longest wait for the workers to stop accepting before a handover.
const GATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// SIGUSR2: closes the accept gate (`backend::AcceptGate`), starts the new
/// process and a thread that waits for it. When it serves, that thread
/// sends this process SIGTERM (the drain); when it exits first, the gate
/// opens again and this process keeps serving. Meanwhile new connections
/// wait in the sockets' queues.
pub fn start(
    program: &Program,
    listeners: &Listeners,
    gate: &Arc<AcceptGate>,
    wake: &Arc<Vec<OwnedFd>>,
    workers: usize,
) {
    if STARTING.swap(true, Ordering::AcqRel) {
        crate::warn!("got SIGUSR2, but a new binary is already starting; ignored");
        return;
    }
    gate.close();
    wake_all(wake);
    let t = std::time::Instant::now();
    while gate.stopped() < workers {
        if t.elapsed() > GATE_TIMEOUT {
            crate::error!(
                "got SIGUSR2, but the workers did not stop accepting within {GATE_TIMEOUT:?}; still serving"
            );
            reopen(gate, wake);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match spawn(program, listeners) {
        Ok((child, ready)) => {
            let pid = child.id();
            crate::info!(
                "got SIGUSR2; started {} as pid {pid}, handing it the listening sockets",
                program.exe.display()
            );
            let (gate, wake) = (gate.clone(), wake.clone());
            let watcher = std::thread::Builder::new()
                .name("spindle-handover".into())
                .spawn(move || watch(child, ready, &gate, &wake));
            if let Err(e) = watcher {
                crate::error!("handover: cannot start a thread to wait for pid {pid}: {e}");
            }
        }
        Err(e) => {
            crate::error!(
                "got SIGUSR2, but cannot start {}: {e}; still serving",
                program.exe.display()
            );
            reopen(gate, wake);
        }
    }
}

fn spawn(
    program: &Program,
    listeners: &Listeners,
) -> std::io::Result<(std::process::Child, OwnedFd)> {
    let (ready_r, ready_w) = net::pipe()?;
    let mut spec = format!("{};{}", std::process::id(), ready_w.as_raw_fd());
    for g in &listeners.groups {
        let fds: Vec<String> = g.socks.iter().map(|s| s.as_raw_fd().to_string()).collect();
        spec.push_str(&format!(
            ";{},{},{}",
            g.kind.name(),
            g.configured.map_or("-".to_string(), |a| a.to_string()),
            fds.join(":")
        ));
    }
    let mut keep = listeners.raw_fds();
    keep.push(ready_w.as_raw_fd());
    let mut cmd = std::process::Command::new(&program.exe);
    cmd.args(&program.args)
        .env(VAR, spec)
        .stdin(std::process::Stdio::null());
    let child = net::spawn_keeping(&mut cmd, keep)?;
    // The child has its copy; ours must go, or the pipe never reads EOF.
    drop(ready_w);
    Ok((child, ready_r))
}

/// The workers accept again; another SIGUSR2 may try again.
fn reopen(gate: &AcceptGate, wake: &[OwnedFd]) {
    gate.open();
    wake_all(wake);
    STARTING.store(false, Ordering::Release);
}

fn wake_all(wake: &[OwnedFd]) {
    for e in wake {
        crate::sys::signal_eventfd(e.as_raw_fd());
    }
}

/// Waits for the child's word (one byte) or its exit (end of file).
fn watch(mut child: std::process::Child, ready: OwnedFd, gate: &AcceptGate, wake: &[OwnedFd]) {
    let pid = child.id();
    let mut byte = [0u8; 1];
    let mut pipe = std::fs::File::from(ready);
    match pipe.read(&mut byte) {
        Ok(1) => {
            crate::info!(
                "pid {pid} serves on the same sockets; this process stops accepting and finishes its responses"
            );
            net::sd_notify(&format!("MAINPID={pid}"));
            HANDED_TO.store(pid, Ordering::Release);
            // The drain, as on SIGTERM (the main thread takes it with
            // sigwait).
            net::signal_self(libc::SIGTERM);
        }
        _ => {
            let status = child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            crate::error!(
                "the new binary (pid {pid}) exited before serving ({status}); still serving"
            );
            reopen(gate, wake);
        }
    }
}
