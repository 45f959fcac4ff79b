//! TLS shared by the sinks that use rustls (HTTP, MQTT): building a client configuration from
//! a sink's [`TlsConfig`], and telling a refused handshake from a network failure.
//!
//! Entry points: [`client_config`] and [`refusal`]. A refused handshake (a server
//! certificate kubecast does not trust, a client certificate the server refuses) on a sink's
//! first connection stops kubecast, as refused credentials do: retrying cannot help, and a
//! user should hear of it at once. Once a sink has been connected, the same refusal is
//! retried (a certificate may be being rotated) and logged at ERROR.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsConfig;

/// Why a TLS configuration could not be built. Fatal: the files are the user's to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} holds no {what}", path.display())]
    Empty { path: PathBuf, what: &'static str },
    #[error("the certificates of {} are not usable", path.display())]
    Rustls {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.to_path_buf(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

/// A rustls client configuration: the CA of `tls.ca_file` (else the system's roots), the
/// client certificate of `cert_file`/`key_file` when given (ALPN is the connector's
/// business). Reads the files (at the sink's start).
pub fn client_config(tls: &TlsConfig) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            for c in certs(path)? {
                roots.add(c).map_err(|source| TlsError::Rustls {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        None => {
            // Unreadable system certificates are skipped, as every TLS client does.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    // ring, the one provider kubecast builds with (kube's and rumqttc's), named here so that
    // no process-wide default is needed.
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|source| TlsError::Rustls {
        path: PathBuf::from("(protocol versions)"),
        source,
    })?
    .with_root_certificates(roots);
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certs(cert)?;
            let pem = read(key)?;
            let key_der: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &pem[..])
                .map_err(|source| TlsError::Read {
                    path: key.clone(),
                    source,
                })?
                .ok_or_else(|| TlsError::Empty {
                    path: key.clone(),
                    what: "PEM private key",
                })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|source| TlsError::Rustls {
                    path: cert.clone(),
                    source,
                })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// If `error` (or anything in its chain) is a refused TLS handshake, what failed: the
/// verification of the server's certificate, kubecast's client certificate, or the protocol
/// versions and cipher suites the two sides speak.
pub fn refusal(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = next {
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(t) = tls
            && let Some(why) = refused(t)
        {
            return Some(why);
        }
        // Some clients keep only the text of the TLS error (rumqttc's packet errors); it is
        // rustls' own.
        if let Some(why) = refused_text(&e.to_string()) {
            return Some(why);
        }
        next = e.source();
    }
    None
}

/// [`refused`] from rustls' words for the error.
fn refused_text(text: &str) -> Option<String> {
    if let Some(at) = text.find("invalid peer certificate: ") {
        let what = &text[at + "invalid peer certificate: ".len()..];
        return Some(untrusted(what));
    }
    if let Some(at) = text.find("peer is incompatible: ") {
        return Some(mismatch(&text[at + "peer is incompatible: ".len()..]));
    }
    let at = text.find("received fatal alert: ")?;
    let alert = text[at + "received fatal alert: ".len()..]
        .split_whitespace()
        .next()?;
    by_alert(alert)
}

/// What a fatal alert from the server says failed, for the alerts that refuse a handshake.
fn by_alert(alert: &str) -> Option<String> {
    match alert {
        "BadCertificate" | "CertificateRequired" | "UnknownCA" | "CertificateUnknown"
        | "UnsupportedCertificate" | "CertificateRevoked" | "CertificateExpired"
        | "AccessDenied" => Some(format!(
            "the server refused the TLS handshake: it refused kubecast's client certificate ({alert}) and wants one it trusts; check tls.cert_file and tls.key_file"
        )),
        "ProtocolVersion" | "InsufficientSecurity" => Some(mismatch(alert)),
        // Servers send it for either cause.
        "HandshakeFailure" => Some(
            "the server refused the TLS handshake (HandshakeFailure): no TLS version or cipher suite in common (kubecast speaks TLS 1.2 and 1.3), or it refused kubecast's client certificate (or its absence); check the server's TLS settings, tls.cert_file and tls.key_file".to_string(),
        ),
        _ => None,
    }
}

fn untrusted(what: &str) -> String {
    format!(
        "certificate verification failed: the server's certificate is not trusted ({what}); check tls.ca_file and the server's name"
    )
}

fn mismatch(what: &str) -> String {
    format!(
        "protocol or cipher mismatch: the server and kubecast have no TLS version or cipher suite in common ({what}); kubecast speaks TLS 1.2 and 1.3"
    )
}

fn refused(e: &rustls::Error) -> Option<String> {
    match e {
        rustls::Error::InvalidCertificate(c) => Some(untrusted(&format!("{c:?}"))),
        rustls::Error::PeerIncompatible(p) => Some(mismatch(&format!("{p:?}"))),
        rustls::Error::AlertReceived(a) => by_alert(&format!("{a:?}")),
        _ => None,
    }
}

/// Connects to `host:port` and runs a TLS handshake with `config`, then waits up to `wait`
/// for the server's first word: with TLS 1.3 a server refuses a client certificate only
/// after the handshake, with an alert, which an HTTP client's pool may report as a mere
/// closed connection. `Ok` when nothing was refused in that time.
pub async fn handshake(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
    wait: std::time::Duration,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(wait, tls.read(&mut byte)).await {
        Ok(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    #[test]
    fn a_refusal_names_what_failed() {
        let cases = [
            (
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
                "certificate verification failed",
            ),
            (
                rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
                "refused kubecast's client certificate",
            ),
            (
                rustls::Error::AlertReceived(rustls::AlertDescription::ProtocolVersion),
                "protocol or cipher mismatch",
            ),
            (
                rustls::Error::PeerIncompatible(rustls::PeerIncompatible::NoCipherSuitesInCommon),
                "protocol or cipher mismatch",
            ),
            (
                rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure),
                "no TLS version or cipher suite in common",
            ),
        ];
        for (e, want) in cases {
            let io = std::io::Error::other(e.clone());
            let why = refusal(&io).unwrap_or_default();
            assert!(why.contains(want), "{e:?}: {why}");
        }
        assert_eq!(refusal(&std::io::Error::other("connection reset")), None);
        let text = std::io::Error::other("TLS error: received fatal alert: HandshakeFailure");
        assert!(
            refusal(&text)
                .unwrap_or_default()
                .contains("HandshakeFailure")
        );
    }
}
