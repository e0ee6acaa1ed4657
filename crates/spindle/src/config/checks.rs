//! The checks behind [`Config::from_cli`](super::Config::from_cli): each
//! value parsed and bounded on its own (header fields, rules, virtual
//! hosts, error pages, codings, charset, PROXY sources, sizes, seconds),
//! with the one-line error a user reads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{FileConfig, RuleEntry, VirtualHost, MAX_HOSTS, MAX_PROXY_FROM};

/// Most `add-header` fields.
pub const MAX_ADD_HEADERS: usize = 32;
/// Most bytes of all `add-header` fields together.
pub const MAX_ADD_HEADER_BYTES: usize = 4096;

/// Fields that frame the message or the connection: spindle writes them
/// itself, and a second copy would make the response ambiguous.
pub(super) const FRAMING_FIELDS: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "trailer",
    "content-range",
];

/// Most `error-page`s.
pub const MAX_ERROR_PAGES: usize = 8;

/// Checks `--error-page STATUS=PATH`s: a status spindle answers from an
/// open (403, 404, 500, 503) and a path the path policy accepts.
pub(super) fn error_pages(items: Vec<String>) -> Result<Vec<(u16, std::ffi::CString)>, String> {
    if items.len() > MAX_ERROR_PAGES {
        return Err(format!(
            "error-page: {} pages; at most {MAX_ERROR_PAGES}",
            items.len()
        ));
    }
    let mut out: Vec<(u16, std::ffi::CString)> = Vec::new();
    for item in &items {
        let shown = item.escape_debug();
        let Some((st, path)) = item.split_once('=') else {
            return Err(format!(
                "error-page \"{shown}\": write it as STATUS=PATH, e.g. 404=/errors/404.html"
            ));
        };
        let status = match st.trim().parse::<u16>() {
            Ok(s @ (403 | 404 | 500 | 503)) => s,
            _ => {
                return Err(format!(
                    "error-page \"{shown}\": the status must be 403, 404, 500 or 503"
                ))
            }
        };
        if out.iter().any(|(s, _)| *s == status) {
            return Err(format!("error-page: {status} given twice"));
        }
        let path = path.trim();
        let rel = match spindle_core::path::resolve(path.as_bytes(), true) {
            Ok(r) if path.starts_with('/') && !r.is_dir_request => r.rel,
            _ => {
                return Err(format!(
                    "error-page \"{shown}\": the page must be a file's path from the root, e.g. /errors/404.html"
                ))
            }
        };
        let rel = std::ffi::CString::new(rel)
            .map_err(|_| format!("error-page \"{shown}\": NUL in path"))?;
        out.push((status, rel));
    }
    Ok(out)
}

/// Checks `--charset`: a token (RFC 9110 §8.3.2), or empty for none.
pub(super) fn charset(v: Option<String>) -> Result<String, String> {
    let v = v.unwrap_or_else(|| "utf-8".into());
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !v.chars().all(tchar) || v.len() > 40 {
        return Err(format!(
            "charset {:?}: a charset name such as utf-8 or iso-8859-1, or \"\" for none",
            v.escape_debug().to_string()
        ));
    }
    Ok(v.to_ascii_lowercase())
}

/// Checks virtual hosts: names are host names (letters, digits, `-`,
/// `.`), or `*.` and one, each given once.
pub(super) fn hosts(entries: Vec<(Vec<String>, PathBuf)>) -> Result<Vec<VirtualHost>, String> {
    if entries.len() > MAX_HOSTS {
        return Err(format!(
            "hosts: {} hosts; at most {MAX_HOSTS}",
            entries.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (names, root) in entries {
        if names.is_empty() {
            return Err(format!("host {}: no names", root.display()));
        }
        let mut clean = Vec::with_capacity(names.len());
        for n in names {
            let n = n.trim().trim_end_matches('.').to_ascii_lowercase();
            let bare = n.strip_prefix("*.").unwrap_or(&n);
            let ok = !bare.is_empty()
                && bare.len() <= 253
                && bare.split('.').all(|l| {
                    !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            if !ok {
                return Err(format!(
                    "host name {n:?}: a DNS name such as example.org, or *.example.org for its subdomains"
                ));
            }
            if !seen.insert(n.clone()) {
                return Err(format!("host name {n} given twice"));
            }
            clean.push(n);
        }
        out.push(VirtualHost { names: clean, root });
    }
    Ok(out)
}

/// Reads `--rule "GLOB; cache-control=V; content-type=V; header=N: V;
/// allow=CIDR,CIDR; deny=CIDR; redirect=STATUS TARGET; fallback=PATH;
/// referers=none,*.example.org; secure-link=PATH; auth=htpasswd:PATH;
/// realm=NAME"`:
/// the glob, then `key=value` items split at the `;` before a known key (a
/// header value may hold `;` itself).
pub(super) fn rule_arg(arg: &str) -> Result<RuleEntry, String> {
    const KEYS: [&str; 11] = [
        "auth=",
        "realm=",
        "secure-link=",
        "referers=",
        "cache-control=",
        "content-type=",
        "header=",
        "allow=",
        "deny=",
        "redirect=",
        "fallback=",
    ];
    let mut items: Vec<String> = Vec::new();
    for part in arg.split(';') {
        let t = part.trim_start();
        match items.last_mut() {
            // A `;` inside a header's value (CSP, say).
            Some(last) if last.starts_with("header=") && !KEYS.iter().any(|k| t.starts_with(k)) => {
                last.push(';');
                last.push_str(part);
            }
            _ => items.push(t.to_string()),
        }
    }
    let mut it = items.into_iter();
    let pattern = it.next().unwrap_or_default().trim().to_string();
    let mut e = RuleEntry {
        pattern,
        cache_control: None,
        content_type: None,
        headers: Vec::new(),
        allow: Vec::new(),
        deny: Vec::new(),
        redirect: None,
        fallback: None,
        referers: None,
        secure_link: None,
        auth: None,
        realm: None,
    };
    let list = |v: &str| {
        v.split(',')
            .map(|c| c.trim().to_string())
            .collect::<Vec<_>>()
    };
    for item in it {
        let item = item.trim();
        if let Some(v) = item.strip_prefix("allow=") {
            e.allow.extend(list(v));
        } else if let Some(v) = item.strip_prefix("deny=") {
            e.deny.extend(list(v));
        } else if let Some(v) = item.strip_prefix("redirect=") {
            e.redirect = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("auth=") {
            e.auth = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("realm=") {
            e.realm = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("secure-link=") {
            e.secure_link = Some(v.into());
        } else if let Some(v) = item.strip_prefix("referers=") {
            e.referers.get_or_insert_with(Vec::new).extend(list(v));
        } else if let Some(v) = item.strip_prefix("fallback=") {
            e.fallback = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("cache-control=") {
            e.cache_control = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("content-type=") {
            e.content_type = Some(v.to_string());
        } else if let Some(v) = item.strip_prefix("header=") {
            e.headers.push(v.to_string());
        } else {
            return Err(format!(
                "rule {:?}: write it as \"GLOB; KEY=VALUE; ...\", KEY one of cache-control, content-type, header, allow, deny, redirect, fallback, referers, secure-link, auth, realm",
                arg.escape_debug().to_string()
            ));
        }
    }
    Ok(e)
}

/// Compiles the `[[rules]]` tables.
pub(super) fn rules(entries: Vec<RuleEntry>) -> Result<spindle_core::rules::Rules, String> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let what = format!("rules[{i}] ({:?})", e.pattern);
        let one = |name: &str, v: &Option<String>| -> Result<Option<String>, String> {
            match v {
                None => Ok(None),
                Some(v) => {
                    header_fields(&what, &[format!("{name}: {v}")])?;
                    Ok(Some(v.trim().to_string()))
                }
            }
        };
        let blocks = |key: &str, list: &[String]| {
            list.iter()
                .map(|c| {
                    spindle_core::proxy::Cidr::parse(c.trim())
                        .map_err(|err| format!("{what}: {key}: {err}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        out.push(spindle_core::rules::Rule {
            cache_control: one("Cache-Control", &e.cache_control)?,
            content_type: one("Content-Type", &e.content_type)?,
            headers: header_fields(&what, &e.headers)?,
            allow: blocks("allow", &e.allow)?,
            deny: blocks("deny", &e.deny)?,
            redirect: e
                .redirect
                .as_deref()
                .map(spindle_core::rules::Redirect::parse)
                .transpose()
                .map_err(|err| format!("{what}: {err}"))?,
            fallback: e
                .fallback
                .as_deref()
                .map(|f| fallback(&what, f))
                .transpose()?,
            referers: e
                .referers
                .as_deref()
                .map(spindle_core::access::Referers::parse)
                .transpose()
                .map_err(|err| format!("{what}: {err}"))?,
            secure_link: e
                .secure_link
                .as_deref()
                .map(|path| {
                    std::fs::read(path)
                        .map_err(|err| err.to_string())
                        .and_then(|secret| spindle_core::access::SecureLink::new(&secret))
                        .map_err(|err| format!("{what}: secure-link {}: {err}", path.display()))
                })
                .transpose()?,
            auth: auth(&what, e.auth.as_deref(), e.realm)?,
            pattern: e.pattern,
        });
    }
    spindle_core::rules::Rules::new(out)
}

/// The realm a rule with `auth` and no `realm` names.
const DEFAULT_REALM: &str = "restricted";

/// A rule's `auth = "htpasswd:PATH"` and `realm`: the file read and
/// checked now (at start, and on each reload).
fn auth(
    what: &str,
    auth: Option<&str>,
    realm: Option<String>,
) -> Result<Option<std::sync::Arc<spindle_core::auth::Auth>>, String> {
    use spindle_core::auth::{self, Auth, Htpasswd};
    let Some(spec) = auth else {
        return match realm {
            Some(_) => Err(format!("{what}: realm without auth")),
            None => Ok(None),
        };
    };
    let Some(path) = spec.strip_prefix("htpasswd:").filter(|p| !p.is_empty()) else {
        return Err(format!(
            "{what}: auth {:?}: write it as \"htpasswd:PATH\" (a file made by Apache's htpasswd)",
            spec.escape_debug().to_string()
        ));
    };
    let realm = realm.unwrap_or_else(|| DEFAULT_REALM.to_string());
    auth::check_realm(&realm).map_err(|e| format!("{what}: {e}"))?;
    let read = || -> Result<Htpasswd, String> {
        let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        if len > auth::MAX_FILE_BYTES {
            return Err(format!("{len} bytes; at most {}", auth::MAX_FILE_BYTES));
        }
        let mut text = Vec::with_capacity(len as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(f, auth::MAX_FILE_BYTES), &mut text)
            .map_err(|e| e.to_string())?;
        Htpasswd::parse(&text)
    };
    let users = read().map_err(|e| format!("{what}: auth htpasswd:{path}: {e}"))?;
    Ok(Some(std::sync::Arc::new(Auth::new(realm, users))))
}

/// A rule's `fallback`: a file beneath the root, written from it
/// (`/index.html`), as the path to open (`index.html`).
fn fallback(what: &str, f: &str) -> Result<std::ffi::CString, String> {
    let usage = || {
        format!(
            "{what}: fallback {:?}: give a file's path from the root, e.g. \"/index.html\"",
            f.escape_debug().to_string()
        )
    };
    if !f.starts_with('/') || f.contains(['%', '?', '#', '\0']) {
        return Err(usage());
    }
    match spindle_core::path::resolve(f.as_bytes(), true) {
        Ok(r) if !r.is_dir_request && !r.rel.is_empty() => {
            std::ffi::CString::new(r.rel).map_err(|_| usage())
        }
        _ => Err(usage()),
    }
}

/// Checks `--precompressed` names (`br`, `zstd`, `gzip`; `zst` and `gz`
/// too), each at most once; an empty list, or `off`, turns it off.
pub(super) fn precompressed(names: &[String]) -> Result<Vec<spindle_core::Encoding>, String> {
    if names.len() == 1 && names[0].trim() == "off" {
        return Ok(Vec::new());
    }
    codings("precompressed", names)
}

/// A list of codings for `key` (`br`, `zstd`, `gzip`; `zst` and `gz`
/// too), each at most once; blank items are skipped.
pub(super) fn codings(key: &str, names: &[String]) -> Result<Vec<spindle_core::Encoding>, String> {
    let mut out = Vec::new();
    for n in names.iter().filter(|n| !n.trim().is_empty()) {
        let Some(e) = spindle_core::Encoding::from_name(n) else {
            return Err(format!(
                "{key}: unknown coding {:?}; use br, zstd or gzip (e.g. --{key} br,gzip)",
                n.escape_debug().to_string()
            ));
        };
        if out.contains(&e) {
            return Err(format!("{key}: {} named twice", e.token()));
        }
        out.push(e);
    }
    Ok(out)
}

/// Checks `--add-header` values and parses them, once, into the fields
/// each response appends.
pub(super) fn header_fields(what: &str, fields: &[String]) -> Result<spindle_core::Fields, String> {
    if fields.len() > MAX_ADD_HEADERS {
        return Err(format!(
            "{what}: {} fields; at most {MAX_ADD_HEADERS}",
            fields.len()
        ));
    }
    let mut out = Vec::new();
    for f in fields {
        let shown = f.escape_debug();
        let Some((name, value)) = f.split_once(':') else {
            return Err(format!("{what} \"{shown}\": write it as \"Name: value\""));
        };
        let value = value.trim_matches([' ', '\t']);
        let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(tchar) {
            return Err(format!(
                "{what} \"{shown}\": the name must be letters, digits or !#$%&'*+-.^_`|~"
            ));
        }
        if value.chars().any(|c| c.is_ascii_control() && c != '\t') {
            return Err(format!(
                "{what} \"{shown}\": the value holds a control character"
            ));
        }
        if FRAMING_FIELDS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{what} \"{shown}\": {name} is set by spindle itself"
            ));
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if out.len() > MAX_ADD_HEADER_BYTES {
        return Err(format!(
            "{what}: {} bytes of fields; at most {MAX_ADD_HEADER_BYTES}",
            out.len()
        ));
    }
    Ok(spindle_core::Fields::from_lines(&out))
}

/// Checks `--proxy-from` against `--proxy-listen`: each needs the other.
pub(super) fn proxy_from(
    blocks: &[String],
    proxy_listen: &[SocketAddr],
) -> Result<Vec<spindle_core::proxy::Cidr>, String> {
    if blocks.len() > MAX_PROXY_FROM {
        return Err(format!(
            "proxy-from: {} address blocks; at most {MAX_PROXY_FROM}",
            blocks.len()
        ));
    }
    let cidrs = blocks
        .iter()
        .map(|b| spindle_core::proxy::Cidr::parse(b).map_err(|e| format!("proxy-from: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if !proxy_listen.is_empty() && cidrs.is_empty() {
        return Err(
            "proxy-listen needs proxy-from: the address blocks of the proxies whose PROXY headers to believe (e.g. --proxy-from 10.0.0.0/8)"
                .into(),
        );
    }
    if proxy_listen.is_empty() && !cidrs.is_empty() {
        return Err(
            "proxy-from is used by proxy-listen: give an address to serve PROXY-protocol connections on"
                .into(),
        );
    }
    Ok(cidrs)
}

/// Parses a config file's text; `name` says which file in the error.
pub(super) fn parse_file(text: &str, name: &str) -> Result<FileConfig, String> {
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let msg = e.message().replace('\n', " ");
        format!("config file {name}: {msg}")
    })
}

/// Parses `512k`, `1m`, `4096`, `1g` (binary multiples).
/// `combined` or `json`.
pub fn parse_log_format(s: &str) -> Result<spindle_core::accesslog::LogFormat, String> {
    use spindle_core::accesslog::LogFormat;
    match s {
        "combined" => Ok(LogFormat::Combined),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!(
            "log-format {:?}: combined or json",
            s.escape_debug().to_string()
        )),
    }
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        // Escaped: a value from the config file may hold a newline, and the
        // error must stay one line (found by the `config` fuzz target).
        .ok_or_else(|| {
            format!(
                "'{}' is not a size (examples: 4096, 512k, 1m)",
                s.escape_debug()
            )
        })
}

pub(super) fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if !(v > 0.0 && v <= 86_400.0) {
        return Err(format!(
            "{name} must be between 0 and 86400 seconds, not {v}"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}
