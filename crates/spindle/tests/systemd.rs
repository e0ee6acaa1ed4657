//! Running under systemd: readiness and stopping notices (`sd_notify`), socket
//! activation (with systemd's own `systemd-socket-activate`), `--user`, and the
//! example units in contrib/ (checked by `systemd-analyze verify`). A test that needs
//! root or a systemd tool says it is skipped without it, and fails under CI.

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const SPINDLE: &str = env!("CARGO_BIN_EXE_spindle");

/// GET `path` on `port` until it answers (the server may still be starting).
fn get_when_up(port: u16, path: &str) -> Resp {
    let t0 = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                .unwrap();
            if let Ok(r) = read_response(&mut BufReader::new(s), false) {
                return r;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no answer on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// spindle with `workers` workers on a free port, telling a notify socket
/// of the test's own (as systemd's `NOTIFY_SOCKET`), which waits up to
/// 10 s per message. Its output goes nowhere, so that a process it starts
/// (a handover's new binary) cannot hold the test's output open.
fn notified(workers: u32, root: &DocRoot) -> (tempfile::TempDir, UnixDatagram, u16, Killed) {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = free_port();
    let child = Command::new(SPINDLE)
        .args(["--workers", &workers.to_string()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg(&root.dir)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (dir, sock, port, Killed(child))
}

#[test]
fn tells_systemd_when_ready_and_when_stopping() {
    let root = DocRoot::new(false);
    let (_dir, sock, port, mut child) = notified(2, &root);
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("READY=1 within 10 s");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.starts_with("READY=1\n"), "{msg}");
    assert!(msg.contains(&format!("MAINPID={}", child.0.id())), "{msg}");
    // Ready means serving: no retry needed.
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("serving once READY=1 is sent");
    s.write_all(b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(
        read_response(&mut BufReader::new(s), false).unwrap().status,
        200
    );
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1 on SIGTERM");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.0.wait().unwrap().success());
}

/// A binary handover under systemd: the manager takes notifications from the
/// main pid only, so the old process names the new one (`MAINPID=`) and then
/// stays silent (no `STOPPING=1`: the service goes on), and the new process
/// sends nothing until it is itself stopped. (Under a real systemd, by
/// `tests/under_systemd.rs`, each extra message was a rejected-notification
/// warning in the journal.)
#[test]
fn a_handover_tells_systemd_the_new_main_pid_and_nothing_else() {
    let root = DocRoot::new(false);
    let (_dir, sock, port, mut old) = notified(1, &root);
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("READY=1 within 10 s");
    assert!(buf[..n].starts_with(b"READY=1\n"));
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(old.0.id() as i32, libc::SIGUSR2) };
    let n = sock.recv(&mut buf).expect("MAINPID= after SIGUSR2");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    let new: i32 = msg
        .strip_prefix("MAINPID=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("expected MAINPID=<pid> alone, got {msg:?}"));
    assert_ne!(new, old.0.id() as i32);
    struct KillOnDrop(i32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // SAFETY: kill(2) on the new process's pid.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let _new_guard = KillOnDrop(new);
    assert!(old.0.wait().unwrap().success());
    assert_eq!(get_when_up(port, "/f1").status, 200);
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    if let Ok(n) = sock.recv(&mut buf) {
        panic!(
            "a message after MAINPID=: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // SAFETY: kill(2) on the pid the old process named (its child).
    unsafe { libc::kill(new, libc::SIGTERM) };
    let n = sock
        .recv(&mut buf)
        .expect("STOPPING=1 from the new main pid");
    assert_eq!(&buf[..n], b"STOPPING=1");
}

#[test]
fn serves_the_socket_systemd_passes() {
    let Some(tool) = [
        "/usr/bin/systemd-socket-activate",
        "/bin/systemd-socket-activate",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        test_skip::skip_or_fail("no systemd-socket-activate (apt-get install systemd)");
        return;
    };
    let root = DocRoot::new(false);
    let port = free_port();
    let log = root
        .path("../")
        .join(format!("activate-{}.err", std::process::id()));
    // spindle's own --listen is another port: the passed socket must win.
    let other = free_port();
    let _child = Killed(
        Command::new(tool)
            .args(["-l", &format!("127.0.0.1:{port}"), SPINDLE, "--listen"])
            .arg(format!("127.0.0.1:{other}"))
            .arg(&root.dir)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let r = get_when_up(port, "/f1");
    assert_eq!(r.status, 200);
    assert!(
        TcpStream::connect(("127.0.0.1", other)).is_err(),
        "--listen is ignored"
    );
    // The workers may answer before the main thread's startup line is
    // written: give it a moment.
    let mut err = String::new();
    for _ in 0..100 {
        err = std::fs::read_to_string(&log).unwrap();
        if err.contains("1 socket passed by systemd") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(err.contains("1 socket passed by systemd"), "{err}");
    let _ = std::fs::remove_file(&log);
}

#[test]
fn user_drops_root_after_binding() {
    if !test_skip::is_root() {
        test_skip::skip_or_fail("not root: there is no root to drop");
        return;
    }
    let root = DocRoot::new(false);
    // The document root must be readable by the user: the tempdir is 0700.
    std::fs::set_permissions(
        &root.dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let srv = Server::start("io-uring", &root.dir, &["--user", "nobody"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", srv.child.id())).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uids.split_whitespace().skip(1).all(|u| u == "65534"),
        "every uid is nobody's: {uids}"
    );
    assert_eq!(get(&srv, "/f1").status, 200);

    let out = Command::new(SPINDLE)
        .args(["--listen", "127.0.0.1:0", "--user", "no-such-user-here"])
        .arg(&root.dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no such user"), "{err}");
}

#[test]
fn example_units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        test_skip::skip_or_fail("no systemd-analyze (apt-get install systemd)");
        return;
    }
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib");
    let dir = tempfile::tempdir().unwrap();
    // The unit as shipped, pointed at this build and at a root that exists.
    let service = std::fs::read_to_string(contrib.join("spindle.service"))
        .unwrap()
        .replace("/usr/local/bin/spindle", SPINDLE)
        .replace("/srv/www", dir.path().to_str().unwrap());
    std::fs::write(dir.path().join("spindle.service"), service).unwrap();
    std::fs::copy(
        contrib.join("spindle.socket"),
        dir.path().join("spindle.socket"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("spindle.socket"))
        .arg(dir.path().join("spindle.service"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // An unknown or misspelt directive is only a warning: none is allowed.
    assert!(err.trim().is_empty(), "warnings: {err}");
}

/// The README's "Under systemd" walkthrough, from the files it installs:
/// contrib/spindle.toml, the units' `ListenStream=`, `ExecStart=` and
/// `ExecReload=`, and contrib/spindle.logrotate, with paths and ports
/// moved to a temporary directory and free ports, under
/// `systemd-socket-activate` in place of systemd. Checked: plain HTTP on
/// the port-80 socket, HTTPS on the port-443 one, a metrics scrape, a
/// reload, and a log rotation by logrotate itself.
#[test]
fn the_readme_walkthrough_runs_from_the_example_files() {
    let Some(tool) = [
        "/usr/bin/systemd-socket-activate",
        "/bin/systemd-socket-activate",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        test_skip::skip_or_fail("no systemd-socket-activate (apt-get install systemd)");
        return;
    };
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib");
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::create_dir_all(d.join("log")).unwrap();
    std::fs::write(d.join("www/index.html"), "hello\n").unwrap();
    let (http, https, metrics) = (free_port(), free_port(), free_port());
    // The machine's paths and ports, as the README installs them, moved.
    let moved = |s: &str| {
        s.replace("/usr/local/bin/spindle", SPINDLE)
            .replace(
                "/etc/spindle/spindle.toml",
                d.join("spindle.toml").to_str().unwrap(),
            )
            .replace("/srv/www", d.join("www").to_str().unwrap())
            .replace(
                "/etc/spindle/tls/fullchain.pem",
                tls.join("p256.pem").to_str().unwrap(),
            )
            .replace(
                "/etc/spindle/tls/privkey.pem",
                tls.join("p256.key").to_str().unwrap(),
            )
            .replace("/var/log/spindle", d.join("log").to_str().unwrap())
            .replace("0.0.0.0:", "127.0.0.1:")
            .replace("[::]:", "[::1]:")
            .replace(":80\"", &format!(":{http}\""))
            .replace(":443\"", &format!(":{https}\""))
            .replace(":9100\"", &format!(":{metrics}\""))
    };
    let toml = moved(&std::fs::read_to_string(contrib.join("spindle.toml")).unwrap());
    std::fs::write(d.join("spindle.toml"), &toml).unwrap();
    let service = moved(&std::fs::read_to_string(contrib.join("spindle.service")).unwrap());
    let directive = |text: &str, key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .map(str::to_string)
            .collect()
    };
    let exec = directive(&service, "ExecStart=").pop().expect("ExecStart=");
    let reload = directive(&service, "ExecReload=")
        .pop()
        .expect("ExecReload=");
    // The socket unit's addresses, with the same ports moved.
    let socket = std::fs::read_to_string(contrib.join("spindle.socket")).unwrap();
    let listen: Vec<String> = directive(&socket, "ListenStream=")
        .iter()
        .map(|a| moved(&format!("{a}\"")).trim_end_matches('"').to_string())
        .collect();
    assert_eq!(listen.len(), 4, "80 and 443, IPv4 and IPv6: {listen:?}");

    let err = d.join("spindle.err");
    let mut cmd = Command::new(tool);
    for a in &listen {
        cmd.args(["-l", a]);
    }
    let child = Killed(
        cmd.args(exec.split_whitespace())
            .env_remove("JOURNAL_STREAM")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let r = get_when_up(http, "/index.html");
    assert_eq!((r.status, &r.body[..]), (200, &b"hello\n"[..]));

    // HTTPS on the socket the TOML's tls-listen names.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(tls.join("ca.pem"))
        .args(["--resolve", &format!("localhost:{https}:127.0.0.1")])
        .arg(format!("https://localhost:{https}/index.html"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello\n");

    // A metrics scrape.
    let m = get_when_up(metrics, "/metrics");
    let text = String::from_utf8_lossy(&m.body);
    assert!(
        text.contains("spindle_requests_total{method=\"GET\",code=\"2xx\"} 2"),
        "{text}"
    );

    // systemctl reload: the unit's ExecReload=.
    let st = Command::new("sh")
        .arg("-c")
        .arg(reload.replace("$MAINPID", &pid.to_string()))
        .status()
        .unwrap();
    assert!(st.success());
    let t = Instant::now();
    while !std::fs::read_to_string(&err)
        .unwrap()
        .contains("configuration reloaded")
    {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{}",
            std::fs::read_to_string(&err).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // logrotate with the shipped file; its postrotate is systemctl kill.
    let access = d.join("log/access.log");
    assert_eq!(wait_log_lines(&access, 2).len(), 2);
    let conf = moved(&std::fs::read_to_string(contrib.join("spindle.logrotate")).unwrap()).replace(
        "systemctl kill -s USR1 spindle.service",
        &format!("kill -USR1 {pid}"),
    );
    std::fs::write(d.join("logrotate.conf"), conf).unwrap();
    let out = Command::new("logrotate")
        .args(["-f", "-s"])
        .arg(d.join("logrotate.state"))
        .arg(d.join("logrotate.conf"))
        .output();
    let out = match out {
        Ok(o) => o,
        Err(_) => {
            test_skip::skip_or_fail(
                "no logrotate: the rotation step is not run (apt-get install logrotate)",
            );
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated = std::fs::read_to_string(d.join("log/access.log.1")).unwrap();
    assert_eq!(rotated.lines().count(), 2, "{rotated}");
    let t = Instant::now();
    while !std::fs::read_to_string(&err).unwrap().contains("reopened") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{}",
            std::fs::read_to_string(&err).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get_when_up(http, "/index.html").status, 200);
    let lines = wait_log_lines(&access, 1);
    assert!(
        lines.len() == 1 && lines[0].contains("GET /index.html"),
        "{lines:?}"
    );
}
