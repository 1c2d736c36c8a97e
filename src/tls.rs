//! Optional TLS: with `DSH_TLS_CERT` and `DSH_TLS_KEY` (PEM files) the server speaks HTTPS
//! through rustls, and ALPN lets a browser multiplex many event streams over one HTTP/2
//! connection instead of six HTTP/1.1 ones. Both files are read once at start; a missing or
//! unreadable file, or a pair that does not match, stops the start with a message that names
//! the file and never its contents.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// The server's TLS configuration, or `None` to serve plain HTTP.
pub fn server_config(
    cert: Option<&str>,
    key: Option<&str>,
) -> anyhow::Result<Option<ServerConfig>> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        _ => bail!(
            "DSH_TLS_CERT and DSH_TLS_KEY go together: set both to serve HTTPS, or neither for \
             plain HTTP"
        ),
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| unreadable("DSH_TLS_CERT", cert, &e, "a PEM certificate chain"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable("DSH_TLS_CERT", cert, &e, "a PEM certificate chain"))?;
    if chain.is_empty() {
        bail!("DSH_TLS_CERT `{cert}` holds no certificate (expected PEM `-----BEGIN CERTIFICATE-----` blocks)");
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        unreadable(
            "DSH_TLS_KEY",
            key,
            &e,
            "a PEM private key (PKCS#8, PKCS#1 or SEC1)",
        )
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no safe protocol version")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .with_context(|| {
            format!("DSH_TLS_KEY `{key}` is not the private key of DSH_TLS_CERT `{cert}`, or one rustls cannot use")
        })?;
    Ok(Some(config))
}

/// Why a PEM file could not be used. Only an I/O error's own text is shown: the others may
/// quote a line of the file, and a key file's lines are secret.
fn unreadable(setting: &str, path: &str, e: &pem::Error, expected: &str) -> anyhow::Error {
    match e {
        pem::Error::Io(io) => anyhow!("{setting} `{path}` cannot be read: {io}"),
        pem::Error::NoItemsFound => anyhow!("{setting} `{path}` holds no {expected}"),
        _ => anyhow!("{setting} `{path}` is not {expected}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(cert: Option<&str>, key: Option<&str>) -> String {
        server_config(cert, key).unwrap_err().to_string()
    }

    #[test]
    fn no_files_means_plain_http() {
        assert!(server_config(None, None).unwrap().is_none());
    }

    #[test]
    fn half_a_pair_or_missing_files_fail_naming_the_setting() {
        assert!(message(Some("c.pem"), None).contains("go together"));
        assert!(message(None, Some("k.pem")).contains("go together"));
        let missing = message(Some("/nonexistent/cert.pem"), Some("/nonexistent/key.pem"));
        assert!(
            missing.starts_with("DSH_TLS_CERT `/nonexistent/cert.pem` cannot be read"),
            "{missing}"
        );
    }

    #[test]
    fn a_key_file_that_is_no_key_fails_without_quoting_it() {
        let dir = std::env::temp_dir().join(format!("dsh-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let signed = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&cert, signed.cert.pem()).unwrap();
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXNlY3JldA==\n").unwrap();
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        let bad = message(Some(cert), Some(key));
        assert!(bad.contains("DSH_TLS_KEY"), "{bad}");
        assert!(
            !bad.contains("c2VjcmV0"),
            "never the file's contents: {bad}"
        );
        std::fs::write(dir.join("key.pem"), signed.signing_key.serialize_pem()).unwrap();
        assert!(server_config(Some(cert), Some(key)).unwrap().is_some());
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("key.pem"), other.signing_key.serialize_pem()).unwrap();
        let mismatch = message(Some(cert), Some(key));
        assert!(mismatch.contains("is not the private key"), "{mismatch}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
