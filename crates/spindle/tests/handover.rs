//! Binary handover (SIGUSR2): a new spindle takes the listening sockets
//! while the old one finishes its downloads. Clients connecting all through
//! it get every answer, and a download that spans it gets every byte. A new
//! process that cannot start leaves the old one serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn wait_for(srv: &Server, needle: &str, secs: u64) -> String {
    let t = Instant::now();
    loop {
        let log = srv.stderr();
        if log.contains(needle) {
            return log;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "no {needle:?} in {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (10 s at most) for the server this test started to exit once it
/// has handed over.
fn old_exits(srv: &mut Server, b: &str) {
    let t = Instant::now();
    while srv.alive() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{b}: the old process did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid in `... started PATH as pid N, ...`.
fn new_pid(log: &str) -> i32 {
    let at = log.find(" as pid ").expect("a started line") + " as pid ".len();
    log[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised name; Z is a zombie.
        Ok(s) => !s.rsplit(") ").next().unwrap_or("").starts_with('Z'),
        Err(_) => false,
    }
}

/// SIGTERM to a spindle that is not our child; waits until it is gone.
fn stop(pid: i32) {
    // SAFETY: kill(2) on a pid this test started (through the old server).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t = Instant::now();
    while running(pid) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "pid {pid} did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// New connections, one request each, until `stop`: counts answers that
/// came whole and anything else.
fn hammer(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    bad: Arc<AtomicU64>,
) -> Vec<String> {
    let mut errors = Vec::new();
    let want = b"plain text\n";
    while !stop.load(Ordering::Relaxed) {
        let r = (|| -> std::io::Result<Vec<u8>> {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"GET /page.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")?;
            let mut v = Vec::new();
            s.read_to_end(&mut v)?;
            Ok(v)
        })();
        match r {
            Ok(v) if v.starts_with(b"HTTP/1.1 200 ") && v.ends_with(want) => {
                ok.fetch_add(1, Ordering::Relaxed);
            }
            other => {
                bad.fetch_add(1, Ordering::Relaxed);
                if errors.len() < 5 {
                    errors.push(match other {
                        Ok(v) => format!("{:?}", String::from_utf8_lossy(&v[..v.len().min(80)])),
                        Err(e) => e.to_string(),
                    });
                }
            }
        }
    }
    errors
}

#[test]
fn a_new_binary_takes_over_the_sockets_without_losing_a_connection_or_a_byte() {
    let root = DocRoot::new(true);
    for b in backends() {
        let mut srv = Server::start(&b, &root.dir, &["--workers", "2", "--drain-timeout", "60"]);
        let old = srv.child.id() as i32;

        // A download of the 64 MiB file, paced so that it spans the
        // handover, on a connection the old process accepted.
        let out = root.dir.join(format!("../handover-{b}.out"));
        let mut dl = Command::new("curl")
            .args(["-sS", "--limit-rate", "40M", "-o"])
            .arg(&out)
            .arg(srv.url("/big"))
            .spawn()
            .unwrap();
        // Clients connecting all through the handover.
        let stop_flag = Arc::new(AtomicBool::new(false));
        let (ok, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let clients: Vec<_> = (0..3)
            .map(|_| {
                let (s, o, x, a) = (stop_flag.clone(), ok.clone(), bad.clone(), srv.addr);
                std::thread::spawn(move || hammer(a, s, o, x))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(400));

        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(old, libc::SIGUSR2) };
        let log = wait_for(&srv, "serves on the same sockets", 10);
        let new = new_pid(&log);
        assert!(
            log.contains(&format!("spindle[{new}]: took over")),
            "{b}: {log}"
        );
        // The old process drains: it lives while the download runs ...
        assert!(
            srv.alive(),
            "{b}: the old process left before its download ended"
        );
        // ... and leaves when it is done.
        let st = dl.wait().unwrap();
        assert!(st.success(), "{b}: the download failed across the handover");
        // Its drain says why it drains.
        let log = wait_for(&srv, &format!("handed over to pid {new}, finishing"), 10);
        assert!(!log.contains("got SIGTERM"), "{b}: {log}");
        assert!(
            std::fs::read(&out).unwrap() == root.read("big"),
            "{b}: the download's bytes differ"
        );
        let _ = std::fs::remove_file(&out);
        old_exits(&mut srv, &b);
        assert!(srv.child.wait().unwrap().success(), "{b}: {}", srv.stderr());
        // The new process serves alone for a while, then the clients stop.
        let before = ok.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(300));
        stop_flag.store(true, Ordering::Relaxed);
        let errors: Vec<String> = clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        let (ok, bad) = (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
        assert_eq!(
            bad,
            0,
            "{b}: {bad} requests failed across the handover ({ok} answered): {errors:?}\n{}",
            srv.stderr()
        );
        assert!(ok > before && before > 0, "{b}: {ok} answered");
        assert!(running(new), "{b}: the new process is gone");
        stop(new);
    }
}

#[test]
fn a_new_binary_that_cannot_start_leaves_the_old_one_serving() {
    let root = DocRoot::new(false);
    for b in backends() {
        let toml = root.dir.join(format!("../handover-bad-{b}.toml"));
        std::fs::write(&toml, format!("root = {:?}\n", root.dir.to_str().unwrap())).unwrap();
        let mut srv = Server::start_with(&b, None, &["--config", toml.to_str().unwrap()]);
        // The config the new process will read no longer parses.
        std::fs::write(&toml, "root = [not toml\n").unwrap();
        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGUSR2) };
        let log = wait_for(&srv, "exited before serving", 10);
        assert!(log.contains("still serving"), "{b}: {log}");
        // Accepting again (the gate the handover closed is open): new
        // connections on every worker's socket are answered.
        for _ in 0..20 {
            assert_eq!(get(&srv, "/page.txt").body, b"plain text\n", "{b}");
        }
        assert!(srv.alive());
        // A second try, once the file is good again, hands over.
        std::fs::write(&toml, format!("root = {:?}\n", root.dir.to_str().unwrap())).unwrap();
        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGUSR2) };
        let log = wait_for(&srv, "serves on the same sockets", 10);
        let new = new_pid(&log[log.find("exited before serving").unwrap()..]);
        old_exits(&mut srv, &b);
        for _ in 0..20 {
            assert_eq!(get(&srv, "/page.txt").body, b"plain text\n", "{b}");
        }
        stop(new);
        let _ = std::fs::remove_file(&toml);
    }
}
