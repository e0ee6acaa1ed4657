//! HTTPS for the harness: one ECDSA P-256 certificate that every server uses
//! (spindle, nginx and lighttpd with mod_openssl), signed by a throwaway CA that
//! the load generator trusts. Made with the `openssl` command at the start of a
//! run, so nothing secret is committed and nothing outlives the run's work dir.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Days the run's certificate is valid (a run takes minutes).
const CERT_DAYS: &str = "2";

/// The run's certificate: leaf and key for the servers, CA for the client.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (install the openssl package)")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Makes a CA and a P-256 certificate for 127.0.0.1 and localhost in `dir`.
pub fn make(dir: &Path) -> Result<TlsFiles> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Absolute: nginx reads paths against its own prefix directory.
    let dir = &std::fs::canonicalize(dir)?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-days",
        CERT_DAYS,
        "-subj",
        "/CN=spindle-bench CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(dir, &ca)?;
    let mut csr = vec!["req", "-new"];
    csr.extend(ec);
    csr.extend([
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
    ]);
    openssl(dir, &csr)?;
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            CERT_DAYS,
            "-extfile",
            "leaf.ext",
            "-out",
            "cert.pem",
        ],
    )?;
    Ok(TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        ca: dir.join("ca.pem"),
    })
}

/// Keeps the servers that can serve HTTPS (spindle's two sendfile backends
/// cannot encrypt), with a note for each one left out.
pub fn https_only(
    servers: &mut Vec<(crate::servers::Server, String)>,
    notes: &mut Vec<String>,
) -> Result<()> {
    servers.retain(|(s, _)| {
        let name = s.name();
        let ok = !matches!(
            name.as_str(),
            "spindle-linux-sendfile" | "spindle-linux-aio-sendfile"
        );
        if !ok {
            notes.push(format!("{name} skipped: it cannot serve HTTPS"));
        }
        ok
    });
    if servers.is_empty() {
        bail!("none of the servers serves HTTPS");
    }
    Ok(())
}

/// The report note that says how HTTPS was set up.
pub fn note() -> String {
    format!(
        "HTTPS: one ECDSA P-256 certificate for every server, made for the run; nginx with TLS 1.2 and 1.3, `ssl_session_cache shared:SSL:10m` and tickets; lighttpd with mod_openssl and its defaults; spindle with its defaults (rustls, {}). The client (spindle-load, rustls) negotiates TLS 1.3",
        spindle::tls::PROVIDER_NAME
    )
}
