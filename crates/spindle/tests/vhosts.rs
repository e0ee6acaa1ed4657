//! Virtual hosts (`--vhost NAMES=ROOT`, `[[hosts]]`): a document root per
//! `Host`, each its own `openat2` boundary; other hosts get the main root.

mod common;

use common::*;

fn host_get(srv: &Server, host: &str, path: &str) -> Resp {
    request(srv, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"))
}

#[test]
fn each_host_its_root_on_every_backend() {
    let main = DocRoot::new(false);
    let a = DocRoot::new(false);
    let b = DocRoot::new(false);
    std::fs::write(main.path("who.txt"), "main\n").unwrap();
    std::fs::write(a.path("who.txt"), "a\n").unwrap();
    std::fs::write(b.path("who.txt"), "b\n").unwrap();
    std::fs::write(a.path("only-a.txt"), "only a\n").unwrap();
    // A symlink out of a host's root, into the main one.
    std::os::unix::fs::symlink(main.path("who.txt"), a.path("out")).unwrap();
    let toml = main.dir.join("../vhosts.toml");
    std::fs::write(
        &toml,
        format!(
            "[[hosts]]\nnames = [\"b.test\", \"*.b.test\"]\nroot = {:?}\n",
            b.dir.to_str().unwrap()
        ),
    )
    .unwrap();
    for be in backends() {
        let vhost = format!("a.test,www.a.test={}", a.dir.display());
        let srv = Server::start(&be, &main.dir, &["--vhost", &vhost]);
        let cases = [
            ("a.test", "a\n"),
            ("A.Test:8080", "a\n"),
            ("www.a.test.", "a\n"),
            ("other.test", "main\n"),
            ("127.0.0.1:8080", "main\n"),
            ("[::1]:8080", "main\n"),
            ("x.a.test", "main\n"),
        ];
        // Twice round, so the open-file cache answers the second time: the
        // same path under two roots must not mix.
        for _ in 0..2 {
            for (host, want) in cases {
                let r = host_get(&srv, host, "/who.txt");
                assert_eq!(
                    (r.status, &r.body[..]),
                    (200, want.as_bytes()),
                    "{be} {host}"
                );
            }
        }
        assert_eq!(host_get(&srv, "a.test", "/only-a.txt").status, 200, "{be}");
        assert_eq!(
            host_get(&srv, "main.test", "/only-a.txt").status,
            404,
            "{be}"
        );
        assert_eq!(
            host_get(&srv, "a.test", "/out").status,
            404,
            "{be}: left its root"
        );
        assert_eq!(host_get(&srv, "a.test", "/../who.txt").status, 400, "{be}");
        // Listings are of the host's own root, cached apart.
        let srv2 = Server::start(&be, &main.dir, &["--vhost", &vhost, "--autoindex"]);
        std::fs::create_dir_all(a.path("d")).unwrap();
        std::fs::create_dir_all(main.path("d")).unwrap();
        std::fs::write(a.path("d/in-a.txt"), "x").unwrap();
        std::fs::write(main.path("d/in-main.txt"), "x").unwrap();
        for _ in 0..2 {
            let la = String::from_utf8(host_get(&srv2, "a.test", "/d/").body).unwrap();
            let lm = String::from_utf8(host_get(&srv2, "other.test", "/d/").body).unwrap();
            assert!(
                la.contains("in-a.txt") && !la.contains("in-main.txt"),
                "{be}: {la}"
            );
            assert!(
                lm.contains("in-main.txt") && !lm.contains("in-a.txt"),
                "{be}: {lm}"
            );
        }
        // HTTP/1.0 without Host: the main root.
        let r = request(&srv, "GET /who.txt HTTP/1.0\r\n\r\n");
        assert_eq!(r.body, b"main\n", "{be}");
        // The config file's hosts, with a wildcard.
        let srv = Server::start(&be, &main.dir, &["--config", toml.to_str().unwrap()]);
        for (host, want) in [
            ("b.test", "b\n"),
            ("x.y.b.test", "b\n"),
            ("a.test", "main\n"),
        ] {
            assert_eq!(
                host_get(&srv, host, "/who.txt").body,
                want.as_bytes(),
                "{be} {host}"
            );
        }
    }
    let _ = std::fs::remove_file(&toml);
}

#[test]
fn bad_hosts_give_one_line_and_exit_1() {
    let root = DocRoot::new(false);
    let r = root.dir.to_str().unwrap();
    startup_error(
        &["--listen", "127.0.0.1:0", "--vhost", "a.test=/no/such/dir"],
        "host a.test: root directory",
    );
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--vhost",
            &format!("bad_name!={r}"),
        ],
        "a DNS name",
    );
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--vhost",
            &format!("a.test={r}"),
            "--vhost",
            &format!("A.test={r}"),
        ],
        "given twice",
    );
    startup_error(
        &["--listen", "127.0.0.1:0", "--vhost", "a.test"],
        "NAMES=ROOT",
    );
}
