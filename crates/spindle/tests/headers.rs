//! `--add-header`: configured header fields on every response, and bad
//! fields refused at start with one line.

mod common;

use common::*;

#[test]
fn added_headers_go_on_every_response() {
    let root = DocRoot::new(false);
    let toml = root.dir.join("../headers.toml");
    std::fs::write(&toml, "add-headers = [\"X-From-File: yes\"]\n").unwrap();
    for b in backends() {
        let srv = Server::start(
            &b,
            &root.dir,
            &[
                "--add-header",
                "Strict-Transport-Security: max-age=31536000",
                "--add-header",
                "X-Content-Type-Options:nosniff",
            ],
        );
        let ok = get(&srv, "/f4096");
        let etag = ok.header("etag").unwrap().to_string();
        let answers = [
            ok,
            get(&srv, "/no-such-file"),
            request(
                &srv,
                &format!("GET /f4096 HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"),
            ),
            request(&srv, "HEAD /f1 HTTP/1.1\r\nHost: t\r\n\r\n"),
        ];
        for (r, want) in answers.iter().zip([200, 404, 304, 200]) {
            assert_eq!(r.status, want, "{b}");
            assert_eq!(
                r.header("strict-transport-security"),
                Some("max-age=31536000"),
                "{b} {want}"
            );
            assert_eq!(
                r.header("x-content-type-options"),
                Some("nosniff"),
                "{b} {want}"
            );
        }
        // The command line replaces the file's list, as for every key.
        let srv = Server::start(&b, &root.dir, &["--config", toml.to_str().unwrap()]);
        assert_eq!(get(&srv, "/f1").header("x-from-file"), Some("yes"), "{b}");
        let srv = Server::start(
            &b,
            &root.dir,
            &[
                "--config",
                toml.to_str().unwrap(),
                "--add-header",
                "X-Cli: 1",
            ],
        );
        let r = get(&srv, "/f1");
        assert_eq!(
            (r.header("x-cli"), r.header("x-from-file")),
            (Some("1"), None),
            "{b}"
        );
    }
    let _ = std::fs::remove_file(&toml);
}

#[test]
fn bad_added_headers_give_one_line_and_exit_1() {
    for (field, needle) in [
        ("NoColon", "write it as"),
        ("Bad Name: x", "the name must be"),
        ("X-A: one\u{1}two", "control character"),
        ("Content-Length: 5", "set by spindle itself"),
        ("transfer-encoding: chunked", "set by spindle itself"),
    ] {
        startup_error(&["--listen", "127.0.0.1:0", "--add-header", field], needle);
    }
    let many: Vec<String> = (0..33).map(|i| format!("X-{i}: v")).collect();
    let mut args = vec!["--listen", "127.0.0.1:0"];
    for m in &many {
        args.extend(["--add-header", m.as_str()]);
    }
    startup_error(&args, "at most 32");
}
