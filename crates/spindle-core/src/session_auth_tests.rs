//! Tests of a session's `auth` rules (`session/auth.rs`).

use super::*;

fn auth_rule() -> crate::rules::Rule {
    let users = crate::auth::Htpasswd::parse(
        b"alice:$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.\n", // "secret pw"
    )
    .unwrap();
    crate::rules::Rule {
        pattern: "/private/**".into(),
        auth: Some(std::sync::Arc::new(crate::auth::Auth::new(
            "Staff".into(),
            users,
        ))),
        ..Default::default()
    }
}

fn basic(user_pass: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(user_pass)
}

#[test]
fn auth_asks_checks_then_opens() {
    let cfg = with_rules(vec![auth_rule()]);
    // No credentials: asked for them, not counted as a refusal.
    let mut s = Session::new();
    s.feed(b"GET /%70rivate/a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let Step::Respond(r) = s.next(&cfg) else {
        panic!("401 expected")
    };
    let h = head_str(&r);
    assert!(h.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{h}");
    assert!(
        h.contains("\r\nWWW-Authenticate: Basic realm=\"Staff\", charset=\"UTF-8\"\r\n"),
        "{h}"
    );
    assert!(r.keep_alive);
    assert_eq!(s.refusal(), None);
    s.sent();
    // Malformed: 401, counted.
    s.feed(b"GET /private/a.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Basic !!\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Respond(r) if r.status == 401));
    assert_eq!(s.refusal(), Some(crate::rules::Refusal::Password));
    s.sent();
    // Credentials: checked by the driver, then the file opens, and the
    // user is logged.
    let granted = |s: &mut Session, how: Checked| {
        s.feed(
            format!(
                "GET /private/a.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
                basic("alice:secret pw")
            )
            .as_bytes(),
        );
        let Step::Authenticate(check) = s.next(&cfg) else {
            panic!("a check expected")
        };
        assert_eq!(check.credentials.user(), b"alice");
        assert!(check.run());
        s.authenticated(&cfg, check, how)
    };
    let Step::Open(o) = granted(&mut s, Checked::Granted) else {
        panic!("open expected")
    };
    assert_eq!(o.path.as_bytes(), b"private/a.txt");
    assert!(s.opened(&cfg, &o, Ok(meta(3))).into_response().is_some());
    assert_eq!(s.user(), Some(&b"alice"[..]));
    s.sent();
    // The same field again on this connection: granted without a check.
    s.feed(
        format!(
            "HEAD /private/b.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
            basic("alice:secret pw")
        )
        .as_bytes(),
    );
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open without a check expected")
    };
    assert!(s.opened(&cfg, &o, Ok(meta(3))).into_response().is_some());
    assert_eq!(s.user(), Some(&b"alice"[..]));
    s.sent();
    // Another password is checked (a new session: this one would be
    // granted again), and a denied one asked again.
    let mut s = Session::new();
    let Step::Respond(r) = granted(&mut s, Checked::Denied) else {
        panic!("401 expected")
    };
    assert_eq!(r.status, 401);
    assert!(head_str(&r).contains("WWW-Authenticate: Basic"));
    assert_eq!(s.user(), None);
    assert_eq!(s.refusal(), Some(crate::rules::Refusal::Password));
    s.sent();
    let Step::Respond(r) = granted(&mut s, Checked::Busy) else {
        panic!("503 expected")
    };
    assert_eq!(r.status, 503);
    assert!(head_str(&r).contains("Retry-After: 1"));
    s.sent();
    // Outside the glob: no question asked.
    s.feed(b"GET /public.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Open(_)));
}

#[test]
fn a_granted_field_is_checked_again_when_it_changes_or_the_file_is_reloaded() {
    let ask = |s: &mut Session, cfg: &SessionConfig, user_pw: &str| {
        s.feed(
            format!(
                "GET /private/a HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
                basic(user_pw)
            )
            .as_bytes(),
        );
        s.next(cfg)
    };
    let cfg = with_rules(vec![auth_rule()]);
    let mut s = Session::new();
    let Step::Authenticate(c) = ask(&mut s, &cfg, "alice:secret pw") else {
        panic!("a check")
    };
    let Step::Open(o) = s.authenticated(&cfg, c, Checked::Granted) else {
        panic!("open")
    };
    s.opened(&cfg, &o, Ok(meta(1)));
    s.sent();
    // Another field: checked.
    let Step::Authenticate(c) = ask(&mut s, &cfg, "alice:secret pW") else {
        panic!("a check for another password")
    };
    assert!(
        matches!(s.authenticated(&cfg, c, Checked::Denied), Step::Respond(r) if r.status == 401)
    );
    s.sent();
    // The granted one again: no check. After a reload (a new loading of
    // the file): checked.
    assert!(matches!(
        ask(&mut s, &cfg, "alice:secret pw"),
        Step::Open(_)
    ));
    s.opened(&cfg, &o, Ok(meta(1)));
    s.sent();
    let reloaded = with_rules(vec![auth_rule()]);
    assert!(matches!(
        ask(&mut s, &reloaded, "alice:secret pw"),
        Step::Authenticate(_)
    ));
}

#[test]
fn a_redirect_answers_before_auth_asks() {
    let cfg = with_rules(vec![
        auth_rule(),
        crate::rules::Rule {
            pattern: "/private/old/**".into(),
            redirect: Some(crate::rules::Redirect::parse("301 /new{path}").unwrap()),
            ..Default::default()
        },
    ]);
    let mut s = Session::new();
    s.feed(b"GET /private/old/a HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Respond(r) if r.status == 301));
}

#[test]
fn two_authorization_fields_are_a_bad_request() {
    let cfg = with_rules(vec![auth_rule()]);
    let mut s = Session::new();
    s.feed(b"GET /private/a HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YTpi\r\nAuthorization: Basic YTpi\r\n\r\n");
    assert!(matches!(s.next(&cfg), Step::Respond(r) if r.status == 400 && !r.keep_alive));
}
