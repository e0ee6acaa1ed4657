//! Running under systemd: readiness and stopping notices (`sd_notify`), socket
//! activation (with systemd's own `systemd-socket-activate`), `--user`, and the
//! example units in contrib/ (checked by `systemd-analyze verify`). Tests that need
//! root or a systemd tool say SKIPPED without it.

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const SPINDLE: &str = env!("CARGO_BIN_EXE_spindle");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

#[test]
fn tells_systemd_when_ready_and_when_stopping() {
    let root = DocRoot::new(false);
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = free_port();
    let mut child = Killed(
        Command::new(SPINDLE)
            .args(["--workers", "2", "--listen", &format!("127.0.0.1:{port}")])
            .arg(&root.dir)
            .env("NOTIFY_SOCKET", &sock_path)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
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

#[test]
fn serves_the_socket_systemd_passes() {
    let Some(tool) = [
        "/usr/bin/systemd-socket-activate",
        "/bin/systemd-socket-activate",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        eprintln!("SKIPPED serves_the_socket_systemd_passes: no systemd-socket-activate");
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
    if !is_root() {
        eprintln!("SKIPPED user_drops_root_after_binding: not root");
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
        eprintln!("SKIPPED example_units_pass_systemd_analyze_verify: no systemd-analyze");
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
