//! The error log: a timestamp, a level and the pid on every line;
//! `--error-log FILE`, reopened on SIGUSR1; `--log-level`; the journal's
//! `<N>` prefixes under systemd; and SIGHUP moving the access log to the
//! path a reloaded config file names.

mod common;

use std::os::linux::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn wait_contains(path: &Path, needle: &str) -> String {
    let t = Instant::now();
    loop {
        let s = std::fs::read_to_string(path).unwrap_or_default();
        if s.contains(needle) {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "no {needle:?} in {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `2026-11-25T04:21:17.123Z [info] spindle[4242]: ...`
fn well_formed(line: &str, pid: u32) -> bool {
    let Some((ts, rest)) = line.split_once(' ') else {
        return false;
    };
    let b = ts.as_bytes();
    ts.len() == 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && ts.ends_with('Z')
        && ["[error] ", "[warn] ", "[info] "]
            .iter()
            .any(|l| rest.starts_with(l))
        && rest.contains(&format!(" spindle[{pid}]: "))
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

#[test]
fn error_log_lines_carry_time_level_and_pid_and_sigusr1_reopens_the_file() {
    let root = DocRoot::new(false);
    let dir = root.path("../");
    let id = std::process::id();
    let errlog = dir.join(format!("errlog-{id}.log"));
    let access = dir.join(format!("errlog-access-{id}.log"));
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--error-log", errlog.to_str().unwrap()])
        .args(["--access-log", access.to_str().unwrap()])
        .arg(&root.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let log = wait_contains(&errlog, "]: serving ");
    assert!(log.lines().all(|l| well_formed(l, pid)), "{log}");
    assert!(log.contains("[info] "), "{log}");

    // logrotate: move the file away, SIGUSR1, and the next lines (the
    // access log's reopen is one) go to a new file at the old path.
    let rotated = errlog.with_extension("log.1");
    std::fs::rename(&errlog, &rotated).unwrap();
    kill(pid, libc::SIGUSR1);
    let new = wait_contains(&errlog, "reopened");
    assert!(new.lines().all(|l| well_formed(l, pid)), "{new}");
    assert!(!std::fs::read_to_string(&rotated)
        .unwrap()
        .contains("reopened"));

    kill(pid, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // Nothing went to stderr.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(std::fs::read_to_string(&errlog)
        .unwrap()
        .contains("[info] "));
    for p in [&errlog, &rotated, &access] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn log_level_warn_keeps_errors_and_drops_the_lifecycle() {
    let root = DocRoot::new(false);
    let toml = root
        .path("../")
        .join(format!("errlog-level-{}.toml", std::process::id()));
    std::fs::write(&toml, format!("root = {:?}\n", root.dir.to_str().unwrap())).unwrap();
    let port = free_port();
    let err = toml.with_extension("err");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--config", toml.to_str().unwrap(), "--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    // A bad file on SIGHUP is an error line; the info lines are not there.
    std::fs::write(&toml, "root = [not toml\n").unwrap();
    kill(child.id(), libc::SIGHUP);
    let log = wait_contains(&err, "keeping the running configuration");
    assert!(log.contains("[error] "), "{log}");
    assert!(
        !log.contains("[info] ") && !log.contains("serving"),
        "{log}"
    );
    kill(child.id(), libc::SIGTERM);
    child.wait().unwrap();
    let _ = std::fs::remove_file(&toml);
    let _ = std::fs::remove_file(&err);
}

#[test]
fn stderr_that_is_the_journal_gets_syslog_prefixes() {
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    let root = DocRoot::new(false);
    // systemd connects a service's stderr to journald by a stream socket and
    // names it in JOURNAL_STREAM (device:inode); a socket, not a file, as
    // here (a file passed this test while the real journal was missed).
    let (ours, theirs) = UnixStream::pair().unwrap();
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", theirs.as_raw_fd())).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg(&root.dir)
        .env(
            "JOURNAL_STREAM",
            format!("{}:{}", meta.st_dev(), meta.st_ino()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(OwnedFd::from(theirs)))
        .spawn()
        .unwrap();
    let mut ours = ours;
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut log = String::new();
    let mut buf = [0u8; 4096];
    while !log.contains("serving ") {
        let n = ours
            .read(&mut buf)
            .expect("spindle's stderr before it serves");
        assert!(n > 0, "stderr closed before serving: {log}");
        log.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    kill(child.id(), libc::SIGTERM);
    child.wait().unwrap();
    let first = log.lines().next().unwrap();
    assert!(first.starts_with("<6>"), "{log}");
    assert!(log.lines().all(|l| l.starts_with('<')), "{log}");

    // A JOURNAL_STREAM that names another file is ignored.
    let srv = Server::start("io-uring", &root.dir, &[]);
    assert!(!srv.stderr().starts_with('<'), "{}", srv.stderr());
}

#[test]
fn sighup_moves_the_access_log_to_the_path_the_config_names() {
    let root = DocRoot::new(false);
    let dir = root.path("../");
    let id = std::process::id();
    let (a, b) = (
        dir.join(format!("hup-a-{id}.log")),
        dir.join(format!("hup-b-{id}.log")),
    );
    let toml = dir.join(format!("hup-{id}.toml"));
    let write = |log: &Path| {
        std::fs::write(
            &toml,
            format!(
                "root = {:?}\naccess-log = {:?}\n",
                root.dir.to_str().unwrap(),
                log.to_str().unwrap()
            ),
        )
        .unwrap()
    };
    write(&a);
    let srv = Server::start_with("io-uring", None, &["--config", toml.to_str().unwrap()]);
    assert_eq!(get(&srv, "/f1").status, 200);
    assert_eq!(wait_log_lines(&a, 1).len(), 1);
    write(&b);
    kill(srv.child.id(), libc::SIGHUP);
    let t = Instant::now();
    while !srv
        .stderr()
        .contains(&format!("access log {} reopened", b.display()))
    {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The access log's path is no longer a restart-only key.
    assert!(
        !srv.stderr().contains("only at a restart"),
        "{}",
        srv.stderr()
    );
    assert_eq!(get(&srv, "/f4096").status, 200);
    let lines = wait_log_lines(&b, 1);
    assert!(
        lines.len() == 1 && lines[0].contains("GET /f4096 "),
        "{lines:?}"
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap().lines().count(), 1);
    drop(srv);
    for p in [&a, &b, &toml] {
        let _ = std::fs::remove_file(p);
    }
}
