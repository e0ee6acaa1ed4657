//! SIGHUP reloads the config file: a new root, new header fields and new
//! limits apply to the next requests, a download in progress finishes
//! byte for byte, a bad file keeps the running configuration, and keys
//! that need a restart are named.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn hup_and_wait(srv: &Server, needle: &str, count: usize) {
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
    let t = Instant::now();
    while srv.stderr().matches(needle).count() < count {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// GETs `path` until `ok` holds (workers take a reload on their next
/// 250 ms tick), at most 3 s.
fn until(srv: &Server, path: &str, ok: impl Fn(&Resp) -> bool) -> Resp {
    let t = Instant::now();
    loop {
        let r = get(srv, path);
        if ok(&r) || t.elapsed() > Duration::from_secs(3) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_reloads_the_config_file_on_every_backend() {
    for b in backends() {
        let a = DocRoot::new(true);
        let other = DocRoot::new(false);
        std::fs::write(a.path("who.txt"), "A\n").unwrap();
        std::fs::write(other.path("who.txt"), "B\n").unwrap();
        let toml = a.dir.join(format!("../reload-{b}.toml"));
        let write = |root: &std::path::Path, gen: u32, extra: &str| {
            std::fs::write(
                &toml,
                format!(
                    "root = {:?}\nworkers = 2\nadd-headers = [\"X-Gen: {gen}\"]\n{extra}",
                    root.to_str().unwrap()
                ),
            )
            .unwrap();
        };
        write(&a.dir, 1, "");
        let srv = Server::start_with(&b, None, &["--config", toml.to_str().unwrap()]);
        let r = get(&srv, "/who.txt");
        assert_eq!(
            (&r.body[..], r.header("x-gen")),
            (&b"A\n"[..], Some("1")),
            "{b}"
        );

        // A download of the old root's 64 MiB file, paced, across the reload.
        let out = a.dir.join("../big.out");
        let mut dl = Command::new("curl")
            .args(["-sS", "--limit-rate", "32M", "-o"])
            .arg(&out)
            .arg(srv.url("/big"))
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));

        write(&other.dir, 2, "limit-rate = \"1m\"\n");
        hup_and_wait(&srv, "configuration reloaded", 1);
        let r = until(&srv, "/who.txt", |r| r.body == b"B\n");
        assert_eq!(
            (&r.body[..], r.header("x-gen")),
            (&b"B\n"[..], Some("2")),
            "{b}"
        );
        // The new limit applies to new responses.
        std::fs::write(other.path("mid.bin"), random_bytes(600_000, 5)).unwrap();
        let t = Instant::now();
        assert_eq!(get(&srv, "/mid.bin").body.len(), 600_000);
        assert!(
            t.elapsed() > Duration::from_millis(200),
            "{b}: limit-rate not applied"
        );

        let st = dl.wait().unwrap();
        assert!(st.success(), "{b}: the download failed across the reload");
        assert!(
            std::fs::read(&out).unwrap() == a.read("big"),
            "{b}: the download's bytes differ"
        );
        let _ = std::fs::remove_file(&out);

        // A bad file: one line, and the running configuration stays.
        std::fs::write(&toml, "root = [not toml\n").unwrap();
        hup_and_wait(&srv, "keeping the running configuration", 1);
        let r = get(&srv, "/who.txt");
        assert_eq!(
            (&r.body[..], r.header("x-gen")),
            (&b"B\n"[..], Some("2")),
            "{b}"
        );
        // A root that does not exist: the same.
        write(std::path::Path::new("/no/such/root"), 3, "");
        hup_and_wait(&srv, "keeping the running configuration", 2);
        assert_eq!(get(&srv, "/who.txt").header("x-gen"), Some("2"), "{b}");

        // Keys that take a restart are named; the rest applies.
        std::fs::write(
            &toml,
            format!(
                "root = {:?}\nworkers = 1\nadd-headers = [\"X-Gen: 4\"]\n",
                a.dir.to_str().unwrap()
            ),
        )
        .unwrap();
        hup_and_wait(&srv, "take effect only at a restart", 1);
        assert!(srv.stderr().contains("workers"), "{b}: {}", srv.stderr());
        let r = until(&srv, "/who.txt", |r| r.header("x-gen") == Some("4"));
        assert_eq!(
            (&r.body[..], r.header("x-gen")),
            (&b"A\n"[..], Some("4")),
            "{b}"
        );
        // Listings take a restart (their helper threads start with the
        // server): turning them on is named, and a directory stays
        // unlisted instead of reaching a worker that has no helpers.
        std::fs::create_dir_all(a.path("listme")).unwrap();
        std::fs::write(
            &toml,
            format!(
                "root = {:?}\nworkers = 2\nautoindex = true\nadd-headers = [\"X-Gen: 5\"]\n",
                a.dir.to_str().unwrap()
            ),
        )
        .unwrap();
        hup_and_wait(&srv, "take effect only at a restart", 2);
        assert!(srv.stderr().contains("autoindex"), "{b}: {}", srv.stderr());
        let r = until(&srv, "/who.txt", |r| r.header("x-gen") == Some("5"));
        assert_eq!(r.header("x-gen"), Some("5"), "{b}");
        for _ in 0..4 {
            assert_eq!(get(&srv, "/listme/").status, 404, "{b}: {}", srv.stderr());
        }
        assert_eq!(get(&srv, "/who.txt").status, 200, "{b}: {}", srv.stderr());
        let _ = std::fs::remove_file(&toml);
    }
}
