//! From a request target to a path beneath the document root.
//!
//! This is the first half of the security boundary; the second half is the
//! driver opening the result with `openat2(RESOLVE_BENEATH)` relative to a
//! directory descriptor of the root, which also stops symlinks that point
//! outside it.
//!
//! The policy, applied after percent-decoding:
//! - `%` not followed by two hex digits, a decoded NUL, or an encoded `/`
//!   (`%2F`) is malformed: 400;
//! - a `..` segment (written plainly or as `%2e%2e`) is refused: 400;
//! - empty and `.` segments are dropped (as nginx merges slashes);
//! - a segment that starts with `.` (a dotfile or dot-directory) is hidden
//!   unless dotfiles are enabled: 404. The one exception is a first segment
//!   of exactly `.well-known` (RFC 8615: ACME challenges, `security.txt`),
//!   which exists to be served; dot-names beneath it are still hidden.

/// Why a target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Malformed or an escape attempt: 400.
    BadRequest,
    /// A hidden path (dotfile): 404.
    Hidden,
}

/// A target resolved to a relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The relative path to open beneath the root, without a leading `/`.
    /// For a target that ends in `/`, this already names `index.html`.
    pub rel: Vec<u8>,
    /// The target named a directory (it ended with `/`).
    pub is_dir_request: bool,
}

/// The index file served for a directory.
pub const INDEX_FILE: &[u8] = b"index.html";

/// Splits the path out of an origin-form or absolute-form target: strips
/// `scheme://authority` and the query. Returns `None` for other forms
/// (`*`, authority-form).
pub fn target_path(target: &[u8]) -> Option<&[u8]> {
    let path = if target.first() == Some(&b'/') {
        target
    } else {
        let rest = strip_http_scheme(target)?;
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => &rest[i..],
            None => b"/",
        }
    };
    let end = path
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(path.len());
    Some(&path[..end])
}

/// What follows `http://` or `https://` (in any case) at the start of
/// `url`; `None` if it starts otherwise.
pub(crate) fn strip_http_scheme(url: &[u8]) -> Option<&[u8]> {
    let starts = |p: &[u8]| url.len() >= p.len() && url[..p.len()].eq_ignore_ascii_case(p);
    if starts(b"http://") {
        Some(&url[7..])
    } else if starts(b"https://") {
        Some(&url[8..])
    } else {
        None
    }
}

/// Decodes and checks `path` (which starts with `/`).
pub fn resolve(path: &[u8], allow_dotfiles: bool) -> Result<Resolved, PathError> {
    // Most targets have nothing to decode: check them in place, after one
    // scan (a raw NUL is refused by the loop below).
    if !path.iter().any(|&b| b == b'%' || b == 0) {
        return normalize(path, allow_dotfiles);
    }
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let hi = path.get(i + 1).and_then(|&c| hex(c));
            let lo = path.get(i + 2).and_then(|&c| hex(c));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::BadRequest);
            };
            let v = hi << 4 | lo;
            if v == b'/' || v == 0 {
                return Err(PathError::BadRequest);
            }
            decoded.push(v);
            i += 3;
        } else {
            if b == 0 {
                return Err(PathError::BadRequest);
            }
            decoded.push(b);
            i += 1;
        }
    }
    normalize(&decoded, allow_dotfiles)
}

/// The top-level directory of well-known URIs (RFC 8615), served even
/// when other dot-names are hidden.
const WELL_KNOWN: &[u8] = b".well-known";

/// Applies the segment rules to a decoded path.
fn normalize(decoded: &[u8], allow_dotfiles: bool) -> Result<Resolved, PathError> {
    let is_dir_request = decoded.last() == Some(&b'/');
    // Exactly the room of a clean path (`/a/b` gives `a/b`, `/a/` gives
    // `a/index.html`) and its NUL: the session's `CString` of it then
    // takes this allocation as it is, with no shrink.
    let index = if is_dir_request { INDEX_FILE.len() } else { 0 };
    let mut rel = Vec::with_capacity(decoded.len() + index);
    for seg in decoded.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => continue,
            b".." => return Err(PathError::BadRequest),
            WELL_KNOWN if rel.is_empty() => rel.extend_from_slice(seg),
            _ if seg[0] == b'.' && !allow_dotfiles => return Err(PathError::Hidden),
            _ => {
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(seg);
            }
        }
    }
    if is_dir_request || rel.is_empty() {
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(INDEX_FILE);
        return Ok(Resolved {
            rel,
            is_dir_request: true,
        });
    }
    Ok(Resolved {
        rel,
        is_dir_request: false,
    })
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(p: &str) -> (String, bool) {
        let r = resolve(p.as_bytes(), false).unwrap();
        (String::from_utf8(r.rel).unwrap(), r.is_dir_request)
    }

    #[test]
    fn plain_paths() {
        assert_eq!(ok("/"), ("index.html".into(), true));
        assert_eq!(ok("/a/b.txt"), ("a/b.txt".into(), false));
        assert_eq!(ok("//a///b"), ("a/b".into(), false));
        assert_eq!(ok("/a/./b"), ("a/b".into(), false));
        assert_eq!(ok("/dir/"), ("dir/index.html".into(), true));
        assert_eq!(ok("/sp%20ace"), ("sp ace".into(), false));
        assert_eq!(ok("/caf%C3%A9"), ("café".into(), false));
    }

    #[test]
    fn refusals() {
        for bad in [
            "/..",
            "/../etc/passwd",
            "/a/../b",
            "/%2e%2e/x",
            "/%2E%2e/",
            "/a%2fb",
            "/a%2F..",
            "/a%00b",
            "/%",
            "/%4",
            "/%zz",
            "/a\0b",
        ] {
            assert_eq!(
                resolve(bad.as_bytes(), false),
                Err(PathError::BadRequest),
                "{bad:?}"
            );
        }
        assert_eq!(resolve(b"/.git/config", false), Err(PathError::Hidden));
        assert_eq!(resolve(b"/a/.htpasswd", false), Err(PathError::Hidden));
        assert_eq!(resolve(b"/%2egit", false), Err(PathError::Hidden));
        // RFC 8615's directory is served; dot-names under it are not, nor
        // a .well-known below the top.
        assert_eq!(
            resolve(b"/.well-known/acme-challenge/tok", false).map(|r| r.rel),
            Ok(b".well-known/acme-challenge/tok".to_vec())
        );
        assert_eq!(
            resolve(b"//./.well-known/x", false).map(|r| r.rel),
            Ok(b".well-known/x".to_vec())
        );
        assert_eq!(resolve(b"/.well-known/.git", false), Err(PathError::Hidden));
        assert_eq!(resolve(b"/a/.well-known/x", false), Err(PathError::Hidden));
        assert!(resolve(b"/.well-known/x", true).is_ok());
    }

    #[test]
    fn target_forms() {
        assert_eq!(target_path(b"/a?b=c"), Some(&b"/a"[..]));
        assert_eq!(target_path(b"http://h:80/x/y?q"), Some(&b"/x/y"[..]));
        assert_eq!(target_path(b"HTTP://h"), Some(&b"/"[..]));
        assert_eq!(target_path(b"*"), None);
        assert_eq!(target_path(b"h:80"), None);
    }

    #[test]
    fn a_clean_path_leaves_room_for_its_nul_alone() {
        for target in ["/", "/a/b.txt", "/a/", "/x%41y"] {
            let rel = resolve(target.as_bytes(), false).unwrap().rel;
            assert_eq!(rel.capacity(), rel.len() + 1, "{target}");
        }
    }
}
