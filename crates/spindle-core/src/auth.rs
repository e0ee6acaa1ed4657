//! HTTP Basic authentication (RFC 7617) against an htpasswd file
//! (`auth = "htpasswd:PATH"` in a rule): the file's entries, the
//! `Authorization` field's credentials, and the password check.
//!
//! A check costs milliseconds (bcrypt at `htpasswd -B`'s cost 5, 5,000
//! rounds of SHA-crypt, 1,000 of Apache MD5), so a driver never runs
//! [`Htpasswd::verify`] on its event loop: the session asks for it with
//! [`Step::Authenticate`](crate::Step::Authenticate), and the driver runs
//! it on a helper thread (or finds the credentials in its cache of recent
//! successes). Every comparison of a computed hash with the stored one is
//! in constant time.

use std::collections::HashMap;

use base64::Engine;
use subtle::ConstantTimeEq;

/// Longest user name taken from a request or a file.
pub const MAX_USER_BYTES: usize = 256;
/// Longest password checked: a longer one is refused at once, unhashed
/// (SHA-crypt's cost grows with the password's length). bcrypt uses the
/// first 72 bytes, as `htpasswd -B` does.
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// Most users in one htpasswd file.
pub const MAX_USERS: usize = 100_000;
/// Highest bcrypt cost taken (`htpasswd -C` allows 4 to 17; each step
/// doubles a check's time: 17 is seconds).
pub const MAX_BCRYPT_COST: u32 = 17;
/// Most SHA-crypt rounds taken (`htpasswd -r`; 5,000 by default).
pub const MAX_SHA_CRYPT_ROUNDS: u64 = 1_000_000;
/// Largest htpasswd file read.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// How one user's password is stored.
#[derive(Debug, Clone)]
enum Stored {
    /// `$2y$`, `$2b$`, `$2a$` (bcrypt; `htpasswd -B`).
    Bcrypt(String),
    /// `$5$`, `$6$` (SHA-256-crypt, SHA-512-crypt; `htpasswd -2`, `-5`).
    ShaCrypt(String),
    /// `$apr1$SALT$HASH` (Apache MD5, `htpasswd -m`, its default).
    Apr1 { salt: String, hash: String },
}

/// The users of an htpasswd file.
#[derive(Debug, Clone, Default)]
pub struct Htpasswd {
    users: HashMap<Vec<u8>, Stored>,
}

/// A bcrypt hash of a password nobody has, at `htpasswd -B`'s cost: an
/// unknown user costs a check as a known one does, so the time of a 401
/// does not tell which user names exist.
const UNKNOWN_USER: &str = "$2y$05$JMQSGz8zlHIl/Uw29kQW5.cr5ILca6Jyp2YHVtfOZIXdzkWHuyz66";

impl Htpasswd {
    /// Reads an htpasswd file's contents. Blank lines and lines starting
    /// with `#` are skipped. Plain text, `crypt()` DES and unsalted SHA-1
    /// (`{SHA}`) are refused: an error that names the line and says how
    /// to write it instead.
    pub fn parse(text: &[u8]) -> Result<Htpasswd, String> {
        let mut users = HashMap::new();
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let at = |what: &str| format!("line {}: {what}", n + 1);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(at("not USER:HASH"));
            };
            let (user, hash) = (&line[..colon], &line[colon + 1..]);
            if user.is_empty() || user.len() > MAX_USER_BYTES {
                return Err(at(&format!(
                    "a user name of 1 to {MAX_USER_BYTES} bytes is needed"
                )));
            }
            let shown = String::from_utf8_lossy(user);
            let Ok(hash) = std::str::from_utf8(hash) else {
                return Err(at(&format!("user {shown:?}: the hash is not text")));
            };
            // Apache's own format ends a hash at the next `:` (a comment
            // field some tools write).
            let hash = hash.split(':').next().unwrap_or("");
            let stored = classify(hash).map_err(|why| at(&format!("user {shown:?}: {why}")))?;
            if users.insert(user.to_vec(), stored).is_some() {
                return Err(at(&format!("user {shown:?} appears twice")));
            }
            if users.len() > MAX_USERS {
                return Err(format!("more than {MAX_USERS} users"));
            }
        }
        if users.is_empty() {
            return Err("no users in it".into());
        }
        Ok(Htpasswd { users })
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `password` is `user`'s (slow: see the module's comment).
    pub fn verify(&self, user: &[u8], password: &[u8]) -> bool {
        if password.len() > MAX_PASSWORD_BYTES {
            return false;
        }
        match self.users.get(user) {
            Some(Stored::Bcrypt(h)) => bcrypt::verify(password, h).unwrap_or(false),
            Some(Stored::ShaCrypt(h)) => {
                use sha_crypt::PasswordVerifier;
                sha_crypt::ShaCrypt::default()
                    .verify_password(password, h.as_str())
                    .is_ok()
            }
            Some(Stored::Apr1 { salt, hash }) => apr1(password, salt.as_bytes())
                .as_bytes()
                .ct_eq(hash.as_bytes())
                .into(),
            None => {
                let _ = bcrypt::verify(password, UNKNOWN_USER);
                false
            }
        }
    }
}

/// What kind of hash `hash` is, or why it is refused.
fn classify(hash: &str) -> Result<Stored, String> {
    let how = "write it with `htpasswd -B` (bcrypt), `-5` (SHA-512-crypt) or `-m` (Apache MD5)";
    if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
        return match hash.parse::<bcrypt::HashParts>() {
            Ok(p) if (4..=MAX_BCRYPT_COST).contains(&p.get_cost()) => {
                Ok(Stored::Bcrypt(hash.to_string()))
            }
            Ok(p) => Err(format!(
                "bcrypt cost {} is outside 4 to {MAX_BCRYPT_COST}",
                p.get_cost()
            )),
            Err(e) => Err(format!("a bad bcrypt hash ({e})")),
        };
    }
    if hash.starts_with("$5$") || hash.starts_with("$6$") {
        let fields: Vec<&str> = hash.split('$').collect();
        let rounds = match fields.get(2).and_then(|f| f.strip_prefix("rounds=")) {
            Some(r) => r.parse::<u64>().ok(),
            None => Some(5000),
        };
        let ok = sha_crypt::PasswordHashRef::new(hash).is_ok() && fields.len() >= 4;
        return match rounds {
            _ if !ok => Err("a bad SHA-crypt hash".into()),
            Some(r) if r <= MAX_SHA_CRYPT_ROUNDS => Ok(Stored::ShaCrypt(hash.to_string())),
            _ => Err(format!(
                "SHA-crypt rounds must be a number of at most {MAX_SHA_CRYPT_ROUNDS}"
            )),
        };
    }
    if let Some(rest) = hash.strip_prefix("$apr1$") {
        return match rest.split_once('$') {
            Some((salt, h))
                if salt.len() <= 8 && h.len() == 22 && is_crypt64(salt) && is_crypt64(h) =>
            {
                Ok(Stored::Apr1 {
                    salt: salt.to_string(),
                    hash: h.to_string(),
                })
            }
            _ => Err("a bad Apache MD5 ($apr1$) hash".into()),
        };
    }
    if hash.starts_with("{SHA}") {
        return Err(format!("unsalted SHA-1 ({{SHA}}) is refused; {how}"));
    }
    if hash.len() == 13 && is_crypt64(hash) {
        return Err(format!("crypt() DES is refused; {how}"));
    }
    Err(format!(
        "not a bcrypt, SHA-crypt or Apache MD5 hash (plain text is refused); {how}"
    ))
}

/// crypt()'s base 64 alphabet.
const CRYPT64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn is_crypt64(s: &str) -> bool {
    s.bytes().all(|b| CRYPT64.contains(&b))
}

/// Apache's MD5-crypt (`$apr1$`, Poul-Henning Kamp's MD5-crypt with
/// Apache's magic string): the 22 characters after the salt.
fn apr1(password: &[u8], salt: &[u8]) -> String {
    use md5::{Digest, Md5};
    const MAGIC: &[u8] = b"$apr1$";
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);
    let alt = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut f = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(f);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(f);
        } else {
            c.update(password);
        }
        f = c.finalize();
    }
    let mut out = String::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(CRYPT64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let b = |i: usize| u32::from(f[i]);
    for (x, y, z) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put((b(x) << 16) | (b(y) << 8) | b(z), 4);
    }
    put(b(11), 2);
    out
}

/// Why a request's credentials were not even checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadCredentials {
    /// No `Authorization` field.
    Missing,
    /// A scheme other than `Basic`, base64 that does not decode, no `:`,
    /// control characters, an empty or over-long user name, an over-long
    /// password.
    Malformed,
}

/// A request's user and password, decoded: `user:password` in one buffer
/// (one allocation per request), the password's bytes wiped when it goes.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    buf: Vec<u8>,
    colon: usize,
}

impl Credentials {
    pub fn user(&self) -> &[u8] {
        &self.buf[..self.colon]
    }

    pub fn password(&self) -> &[u8] {
        &self.buf[self.colon + 1..]
    }

    /// The user name alone (for the access log), the password wiped.
    pub fn into_user(mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.buf);
        buf[self.colon..].fill(0);
        buf.truncate(self.colon);
        buf
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        self.buf.fill(0);
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &String::from_utf8_lossy(self.user()))
            .field("password", &"(hidden)")
            .finish()
    }
}

/// A request's user and password, from its `Authorization` field's value
/// (RFC 7617 §2: `Basic` and the base64 of `user:password`; the user ends
/// at the first `:`, so a user name cannot hold one).
pub fn credentials(field: Option<&[u8]>) -> Result<Credentials, BadCredentials> {
    let field = field.ok_or(BadCredentials::Missing)?;
    let bad = BadCredentials::Malformed;
    let field = trim(field);
    let sp = field.iter().position(|&b| b == b' ').ok_or(bad)?;
    if !field[..sp].eq_ignore_ascii_case(b"basic") {
        return Err(bad);
    }
    let token = trim(&field[sp..]);
    // base64 of the longest user, `:` and the longest password.
    let most = (MAX_USER_BYTES + 1 + MAX_PASSWORD_BYTES).div_ceil(3) * 4;
    if token.is_empty() || token.len() > most {
        return Err(bad);
    }
    let plain = base64::engine::general_purpose::STANDARD
        .decode(token)
        .map_err(|_| bad)?;
    let colon = plain.iter().position(|&b| b == b':').ok_or(bad)?;
    let (user, password) = (&plain[..colon], &plain[colon + 1..]);
    // RFC 7617 §2: neither may hold a control character.
    let ctl = |s: &[u8]| s.iter().any(|&b| b < 0x20 || b == 0x7f);
    if user.is_empty() || user.len() > MAX_USER_BYTES || ctl(user) || ctl(password) {
        return Err(bad);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(bad);
    }
    Ok(Credentials { buf: plain, colon })
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// A rule's `auth`: the realm, the users, and a number that tells this
/// loading of the file from every other (a driver's cache of successes
/// keys on it, so that a reload forgets them).
#[derive(Debug)]
pub struct Auth {
    pub realm: String,
    pub users: Htpasswd,
    pub generation: u64,
    /// The secret key of [`Auth::memo`] (random, per loading).
    memo_key: std::hash::RandomState,
}

impl PartialEq for Auth {
    fn eq(&self, other: &Auth) -> bool {
        self.generation == other.generation
    }
}

impl Eq for Auth {}

impl Auth {
    /// A new loading of a file's users (each gets a generation of its own).
    pub fn new(realm: String, users: Htpasswd) -> Auth {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Auth {
            realm,
            users,
            generation: NEXT.fetch_add(1, Ordering::Relaxed),
            memo_key: std::hash::RandomState::new(),
        }
    }

    /// A keyed hash (SipHash, with this loading's random key) of an
    /// `Authorization` field's value: what a session remembers of the
    /// credentials it last saw granted, so that the same field on the
    /// next request of the connection needs no check (a browser sends it
    /// with every request). Without the key, finding another value with
    /// the same hash takes about 2^64 tries.
    pub fn memo(&self, field: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.memo_key, field)
    }

    /// The `WWW-Authenticate` field's value for a 401.
    pub fn challenge(&self) -> String {
        let mut r = String::with_capacity(self.realm.len() + 32);
        r.push_str("Basic realm=\"");
        for c in self.realm.chars() {
            if c == '"' || c == '\\' {
                r.push('\\');
            }
            r.push(c);
        }
        r.push_str("\", charset=\"UTF-8\"");
        r
    }
}

/// Checks a realm as configured: printable, at most 200 bytes.
pub fn check_realm(realm: &str) -> Result<(), String> {
    if realm.is_empty() || realm.len() > 200 || realm.chars().any(char::is_control) {
        return Err(format!(
            "realm {:?}: 1 to 200 bytes without control characters",
            realm.escape_debug().to_string()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Written by Debian's `htpasswd -nb FLAG alice 'secret pw'`
    // (apache2-utils 2.4), and by `openssl passwd -apr1`.
    const FILE: &str = "\
# made by htpasswd
alice:$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.
bob:$2y$05$j7inEraRqY/m4d53/tEkHunRC2FI7RdBuAbLUr6r1ll8/keBJ18Ya
carol:$5$6O0/uG1XK8J.jVPh$REKldhTI2Mo9vaFDrIu3g7eswDAsnUWIB9Cbz8qwRAC

dave:$6$8wPoPPlO7CHXhFdc$RVoJN/P9mnRjZZLxOR0zrYw2JF4tsjWVUBBQ4d8Lty6UQSjJxS4Yk0GVoIs3QFQ4kbTl4A5uSHZY/hlwNKIeV1
zed:$6$rounds=6000$NoCEX9NCraAA6u1x$YJdosX67c9sN7Fmmv3bVt6B0k96XDbI7Irs2WUjB5pYLLPXQ0DqI4pI6p06xjKYesxxZHG5J7YD4iDHWrMVIj0
";

    #[test]
    fn every_format_htpasswd_writes_checks() {
        let h = Htpasswd::parse(FILE.as_bytes()).unwrap();
        assert_eq!(h.len(), 5);
        assert!(h.verify(b"zed", b"pw"), "htpasswd -r 6000 -5");
        for u in ["alice", "bob", "carol", "dave"] {
            assert!(h.verify(u.as_bytes(), b"secret pw"), "{u}");
            assert!(!h.verify(u.as_bytes(), b"secret pW"), "{u}");
            assert!(!h.verify(u.as_bytes(), b""), "{u}");
        }
        assert!(!h.verify(b"eve", b"secret pw"));
        assert!(!h.verify(b"alice", &[b'x'; MAX_PASSWORD_BYTES + 1]));
    }

    #[test]
    fn apr1_matches_openssl() {
        // `openssl passwd -apr1 -salt xxxxxxxx password`
        assert_eq!(apr1(b"password", b"xxxxxxxx"), "dxHfLAsjHkDRmG83UXe8K0");
        // A password longer than 16 bytes, and an empty one.
        assert_eq!(
            apr1(b"a much longer password than sixteen", b"abc"),
            "77rKqJqY.58.YAtshgYSi1"
        );
        assert_eq!(apr1(b"", b"salt"), "AnXM5PAEa9T4ruYbwPoUh/");
    }

    #[test]
    fn weak_and_broken_entries_are_refused_with_a_reason() {
        let bad = |line: &str| Htpasswd::parse(line.as_bytes()).unwrap_err();
        assert!(bad("u:secret\n").contains("plain text"));
        assert!(bad("u:abJnggxhB/yWI\n").contains("DES"));
        assert!(bad("u:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n").contains("SHA-1"));
        assert!(bad("u:$apr1$x$short\n").contains("Apache MD5"));
        assert!(bad("u:$2y$05$broken\n").contains("bcrypt"));
        let costly = "u:$2y$18$JMQSGz8zlHIl/Uw29kQW5.cr5ILca6Jyp2YHVtfOZIXdzkWHuyz66\n";
        assert!(bad(costly).contains("cost 18"));
        let rounds = "u:$6$rounds=5000000$8wPoPPlO7CHXhFdc$RVoJN/P9mnRjZZLxOR0zrYw2JF4tsjWVUBBQ4d8Lty6UQSjJxS4Yk0GVoIs3QFQ4kbTl4A5uSHZY/hlwNKIeV1\n";
        assert!(bad(rounds).contains("rounds"));
        assert!(bad("nocolon\n").contains("line 1"));
        assert!(bad(":$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.\n").contains("user name"));
        assert!(bad("").contains("no users"));
        let twice =
            "a:$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.\na:$apr1$/HEYrqn/$PCu/FWxn0kHyP0SqXa6do.\n";
        assert!(bad(twice).contains("line 2"));
    }

    fn basic(s: &[u8]) -> Vec<u8> {
        let mut v = b"Basic ".to_vec();
        v.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(s)
                .as_bytes(),
        );
        v
    }

    fn credentials(field: Option<&[u8]>) -> Result<(Vec<u8>, Vec<u8>), BadCredentials> {
        super::credentials(field).map(|c| (c.user().to_vec(), c.password().to_vec()))
    }

    #[test]
    fn credentials_from_the_authorization_field() {
        assert_eq!(
            credentials(Some(&basic(b"alice:secret pw"))),
            Ok((b"alice".to_vec(), b"secret pw".to_vec()))
        );
        // The user ends at the first colon.
        assert_eq!(
            credentials(Some(&basic(b"a:b:c"))),
            Ok((b"a".to_vec(), b"b:c".to_vec()))
        );
        assert_eq!(
            credentials(Some(b"bAsIc   YTpi  ")),
            Ok((b"a".to_vec(), b"b".to_vec()))
        );
        assert_eq!(credentials(None), Err(BadCredentials::Missing));
        let m = Err(BadCredentials::Malformed);
        for bad in [
            &b"Basic"[..],
            b"Basic ",
            b"Bearer YTpi",
            b"Basic YTpi!",
            b"Basic YTpi=",
            b"Basic %%%%",
            b"BasicYTpi",
        ] {
            assert_eq!(
                credentials(Some(bad)),
                m,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(credentials(Some(&basic(b"nocolon"))), m);
        assert_eq!(credentials(Some(&basic(b":pw"))), m);
        assert_eq!(credentials(Some(&basic(b"a\x01:pw"))), m);
        assert_eq!(credentials(Some(&basic(b"a:p\nw"))), m);
        let mut long = b"a:".to_vec();
        long.extend(std::iter::repeat_n(b'x', 10_000));
        assert_eq!(credentials(Some(&basic(&long))), m);
        let c = super::credentials(Some(&basic(b"al:pw"))).unwrap();
        assert!(
            !format!("{c:?}").contains("pw"),
            "the password is not shown"
        );
        assert_eq!(c.into_user(), b"al");
    }

    #[test]
    fn the_challenge_quotes_the_realm() {
        let a = Auth::new("Staff \"only\"".into(), Htpasswd::default());
        assert_eq!(
            a.challenge(),
            "Basic realm=\"Staff \\\"only\\\"\", charset=\"UTF-8\""
        );
        assert!(check_realm("ok").is_ok());
        assert!(check_realm("").is_err());
        assert!(check_realm("a\nb").is_err());
    }
}
