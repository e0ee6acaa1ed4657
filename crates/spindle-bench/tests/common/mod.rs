//! Helpers shared by spindle-bench's integration tests.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The harness binary: `__spindle` runs the server, `slowdisk` the emulated disk.
pub const EXE: &str = env!("CARGO_BIN_EXE_spindle-bench");

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes whatever is left at a mount point when dropped (a killed daemon leaves a
/// dead mount); the live one goes with its `MountHandle`.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if self.0.exists() || slowdisk::mounts::is_dead(&self.0) {
            let _ = slowdisk::mounts::clean_stale(&self.0);
        }
    }
}

/// Starts spindle (`spindle-bench __spindle`) on a free loopback port with one worker,
/// serving `root`, and waits until it accepts connections.
pub fn spindle(backend: &str, root: &Path, extra: &[&str]) -> (Killed, SocketAddr) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = Command::new(EXE)
        .args(["__spindle", "--backend", backend, "--workers", "1"])
        .args(extra)
        .arg("--listen")
        .arg(addr.to_string())
        .arg(root)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let server = Killed(child);
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "spindle did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, addr)
}

/// A slowdisk mount (this binary's `slowdisk` subcommand) of `backing` at `mount`.
/// Fields drop in order: the daemon stops, then whatever it left is unmounted.
pub struct Mounted {
    pub disk: slowdisk::MountHandle,
    _unmount: Unmount,
}

impl Mounted {
    pub fn new(
        backing: &Path,
        mount: &Path,
        model: slowdisk::ModelArgs,
        faults: slowdisk::FaultArgs,
    ) -> Mounted {
        let unmount = Unmount(mount.to_path_buf());
        let mut cmd = Command::new(EXE);
        cmd.arg("slowdisk").stdout(Stdio::null());
        let stats = mount.with_extension("stats.json");
        let mut opts = slowdisk::MountOptions::new(backing, mount, stats);
        opts.model = model;
        opts.faults = faults;
        opts.ready_timeout = Duration::from_secs(30);
        Mounted {
            disk: slowdisk::MountHandle::spawn(cmd, &opts).expect("mounting slowdisk"),
            _unmount: unmount,
        }
    }

    pub fn root(&self) -> &Path {
        self.disk.mount_point()
    }
}

/// Why the emulated disk (a FUSE mount) cannot be had here, if it cannot.
pub fn fuse_missing() -> Option<&'static str> {
    if !test_skip::is_root() {
        Some("needs root (a FUSE mount)")
    } else if !Path::new("/dev/fuse").exists() {
        Some("no /dev/fuse")
    } else {
        None
    }
}

/// A temporary directory with an empty `b` (the backing directory) and the path of
/// `m` (the mount point), or `None` without root or /dev/fuse (the test is skipped,
/// and says why: [`test_skip::skip_or_fail`]).
pub fn fuse_dirs() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if let Some(why) = fuse_missing() {
        test_skip::skip_or_fail(why);
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let backing = tmp.path().join("b");
    std::fs::create_dir_all(&backing).unwrap();
    let mnt = tmp.path().join("m");
    Some((tmp, backing, mnt))
}

/// One response as a client sees it.
pub struct Reply {
    pub status: u16,
    pub head: String,
    /// The Content-Length announced.
    pub length: usize,
    pub body: Vec<u8>,
    /// The server closed the connection after (or during) this response.
    pub closed: bool,
}

/// Sends a GET and reads one response: the head, then up to Content-Length bytes,
/// stopping early if the server closes the connection.
pub fn get(s: &mut TcpStream, path: &str) -> Reply {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "GET {path}: connection closed in the head ({:?})",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .trim()
        .parse()
        .unwrap();
    let mut body = Vec::with_capacity(length);
    let mut closed = false;
    let mut buf = vec![0u8; 64 * 1024];
    while body.len() < length {
        let want = (length - body.len()).min(buf.len());
        match s.read(&mut buf[..want]) {
            Ok(0) | Err(_) => {
                closed = true;
                break;
            }
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    closed |= head.contains("Connection: close");
    Reply {
        status,
        head,
        length,
        body,
        closed,
    }
}
