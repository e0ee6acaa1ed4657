//! `--acme-*` and the file's `acme-*` keys, checked into an
//! [`AcmeConfig`](crate::acme::AcmeConfig).

use std::net::SocketAddr;
use std::path::PathBuf;

use super::file::FileConfig;
use super::Cli;
use crate::acme::{AcmeConfig, DEFAULT_STATE, LETS_ENCRYPT, MAX_CERTS, MAX_NAMES_PER_CERT};

/// Longest DNS name (RFC 1035) and label.
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

/// The ACME settings; `None` without `acme-domain`. Errors are one line.
pub(super) fn acme(
    cli: &mut Cli,
    file: &mut FileConfig,
    listen: &[SocketAddr],
    tls_listen: &[SocketAddr],
) -> Result<Option<AcmeConfig>, String> {
    let domains = if cli.acme_domain.is_empty() {
        file.acme_domain.take().unwrap_or_default()
    } else {
        std::mem::take(&mut cli.acme_domain)
    };
    let email = cli.acme_email.take().or(file.acme_email.take());
    let directory = cli.acme_directory.take().or(file.acme_directory.take());
    let ca = cli.acme_ca.take().or(file.acme_ca.take());
    let state = cli.acme_state.take().or(file.acme_state.take());
    if domains.is_empty() {
        if email.is_some() || directory.is_some() || ca.is_some() || state.is_some() {
            return Err(
                "acme-email, acme-directory, acme-ca and acme-state are used by acme-domain: give the names to certify".into(),
            );
        }
        return Ok(None);
    }
    if domains.len() > MAX_CERTS {
        return Err(format!(
            "acme-domain: {} certificates; at most {MAX_CERTS}",
            domains.len()
        ));
    }
    let mut certs: Vec<Vec<String>> = Vec::new();
    for d in &domains {
        let names: Vec<String> = d
            .split(',')
            .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
            .collect();
        if names.len() > MAX_NAMES_PER_CERT {
            return Err(format!(
                "acme-domain {d:?}: {} names; at most {MAX_NAMES_PER_CERT} on one certificate",
                names.len()
            ));
        }
        for n in &names {
            check_name(n)?;
            if certs.iter().flatten().any(|m| m == n) {
                return Err(format!("acme-domain: {n} is given twice"));
            }
        }
        if names
            .iter()
            .enumerate()
            .any(|(i, n)| names[..i].contains(n))
        {
            return Err(format!("acme-domain {d:?}: a name is given twice"));
        }
        certs.push(names);
    }
    if tls_listen.is_empty() {
        return Err(
            "acme-domain needs tls-listen: the certificates are served there (e.g. --tls-listen 0.0.0.0:443)".into(),
        );
    }
    if let Some(e) = &email {
        if !e.contains('@') || e.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(format!("acme-email {e:?}: not an e-mail address"));
        }
    }
    let directory = directory.unwrap_or_else(|| LETS_ENCRYPT.to_string());
    if !directory.starts_with("https://") || directory.contains(char::is_whitespace) {
        return Err(format!(
            "acme-directory {directory:?}: give the CA's https:// directory URL"
        ));
    }
    Ok(Some(AcmeConfig {
        certs,
        email,
        directory,
        ca,
        state: state.unwrap_or_else(|| PathBuf::from(DEFAULT_STATE)),
        http01: !listen.is_empty(),
    }))
}

/// A name a CA can check by HTTP-01: letters, digits and hyphens in
/// labels, no wildcard, no address.
fn check_name(n: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= MAX_LABEL
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if n.starts_with("*.") {
        return Err(format!(
            "acme-domain {n}: a wildcard needs the DNS-01 challenge, which spindle does not answer; name each host"
        ));
    }
    if n.len() > MAX_NAME || !n.split('.').all(label_ok) || n.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!("acme-domain {n:?}: not a host name"));
    }
    Ok(())
}

/// A name certified by ACME may not also be a `tls-certificates` name.
/// (The default `tls-cert` names no host in the configuration; the server
/// checks its certificate's names at start.)
pub(super) fn check_names_free(
    acme: Option<&AcmeConfig>,
    certs: &[crate::tls::CertSpec],
) -> Result<(), String> {
    let Some(acme) = acme else { return Ok(()) };
    for c in certs {
        if let Some(n) = c.names.iter().find(|n| {
            acme.certs
                .iter()
                .flatten()
                .any(|a| a.eq_ignore_ascii_case(n))
        }) {
            return Err(format!(
                "acme-domain {n}: the certificate {} is given for it too (tls-certificates); drop one",
                c.cert.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "listen = [\"127.0.0.1:0\"]\ntls-listen = [\"127.0.0.1:0\"]\n";

    #[test]
    fn keys_in_the_config_file() {
        let c = Config::from_toml_text(&format!(
            "{BASE}acme-domain = [\"Example.org,www.example.org\", \"b.example\"]\nacme-email = \"a@example.org\"\nacme-state = \"/tmp/x\"\n"
        ))
        .unwrap();
        let a = c.acme.unwrap();
        assert_eq!(
            a.certs,
            vec![
                vec!["example.org".to_string(), "www.example.org".to_string()],
                vec!["b.example".to_string()]
            ]
        );
        assert_eq!(a.directory, crate::acme::LETS_ENCRYPT);
        assert_eq!(a.state, std::path::PathBuf::from("/tmp/x"));
        assert!(c.tls_certs.is_empty(), "no tls-cert needed beside ACME");
    }

    #[test]
    fn bad_settings_are_one_line() {
        for (text, needle) in [
            ("acme-domain = [\"*.example.org\"]\n", "DNS-01"),
            ("acme-domain = [\"a..b\"]\n", "not a host name"),
            ("acme-domain = [\"127.0.0.1\"]\n", "not a host name"),
            ("acme-domain = [\"a.org\", \"a.org\"]\n", "given twice"),
            ("acme-domain = [\"a.org\"]\nacme-email = \"x\"\n", "e-mail"),
            (
                "acme-domain = [\"a.org\"]\nacme-directory = \"http://x/\"\n",
                "https://",
            ),
            ("acme-email = \"a@b.org\"\n", "used by acme-domain"),
            (
                "acme-domain = [\"a.org\"]\ntls-cert = \"c.pem\"\ntls-key = \"c.key\"\ntls-certificates = [{ names = [\"A.org\"], cert = \"a.pem\", key = \"a.key\" }]\n",
                "drop one",
            ),
        ] {
            let e = Config::from_toml_text(&format!("{BASE}{text}")).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{text}: {e}");
        }
        let e = Config::from_toml_text("acme-domain = [\"a.org\"]\n").unwrap_err();
        assert!(e.contains("needs tls-listen") && !e.contains('\n'), "{e}");
        // TLS-ALPN-01 alone, without a plain listener.
        let only_tls = "tls-listen = [\"127.0.0.1:0\"]\nacme-domain = [\"a.org\"]\n";
        assert!(
            !Config::from_toml_text(only_tls)
                .unwrap()
                .acme
                .unwrap()
                .http01
        );
    }
}
