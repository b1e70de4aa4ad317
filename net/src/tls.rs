//! TLS: what a process presents and trusts, the acceptors its listeners use, and the one
//! connector its outgoing connections use.
//!
//! - A **member** (broker, coordinator) has a certificate signed by the cluster's CA. Its
//!   client, Kafka and admin listeners present it; its peer listener presents it *and requires
//!   one* from the connecting side, signed by the same CA: that is how members authenticate
//!   to each other, and why a stranger who reaches a peer port cannot register as a broker or
//!   read credentials.
//! - A **client** trusts the CA and, where it has one, presents a certificate too.
//! - A process speaks TLS to every server it connects to, or to none: the connector is set once
//!   for the process ([`set_outgoing`]), as the source address is ([`crate::source`]).
//!
//! Certificates are checked against the name in the address dialled (an IP address or a DNS
//! name), as browsers and Kafka clients do. The crypto is rustls with ring.

use crate::stream::Stream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Where a process's TLS material lives (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The authority whose certificates this process trusts.
    pub ca_path: PathBuf,
    /// This process's certificate chain and private key; a plain client may have none.
    pub cert_path: Option<PathBuf>,
    pub key_path: Option<PathBuf>,
}

/// One listener's TLS.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    /// Whether the connecting side must present a certificate from the cluster's CA.
    pub requires_certificate: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("requires_certificate", &self.requires_certificate)
            .finish()
    }
}

/// A member's listeners' acceptors and its outgoing connector.
#[derive(Clone)]
pub struct MemberTls {
    /// Client, Kafka and admin listeners: the member proves itself; clients need no certificate.
    pub clients: ServerTls,
    /// Peer listeners: both sides prove themselves with certificates from the cluster's CA.
    pub peers: ServerTls,
    /// Every outgoing connection: trusts the CA and presents this member's certificate.
    pub connector: TlsConnector,
}

impl std::fmt::Debug for MemberTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberTls")
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("parsing certificates in {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certificates)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("reading a private key from {}: {e}", path.display()))
}

fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path)? {
        roots
            .add(certificate)
            .map_err(|e| format!("trusting {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// The certificate and key a member must have.
fn identity(
    files: &TlsFiles,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let (Some(cert_path), Some(key_path)) = (&files.cert_path, &files.key_path) else {
        return Err("a server needs tls.cert_path and tls.key_path".into());
    };
    Ok((read_certificates(cert_path)?, read_key(key_path)?))
}

/// Loads a member's TLS from `files`: every file must exist and parse.
pub fn member(files: &TlsFiles) -> Result<MemberTls, String> {
    let roots = read_roots(&files.ca_path)?;
    let (chain, key) = identity(files)?;
    let tls_error = |e: rustls::Error| format!("tls: {e}");
    let clients = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(tls_error)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| {
            format!(
                "tls: checking peers against {}: {e}",
                files.ca_path.display()
            )
        })?;
    let peers = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(tls_error)?;
    let connector = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(tls_error)?;
    Ok(MemberTls {
        clients: ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(clients)),
            requires_certificate: false,
        },
        peers: ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(peers)),
            requires_certificate: true,
        },
        connector: TlsConnector::from(Arc::new(connector)),
    })
}

/// Loads a client's connector from `files`: the CA, and a certificate where one is given.
pub fn client(files: &TlsFiles) -> Result<TlsConnector, String> {
    let roots = read_roots(&files.ca_path)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots);
    let config = match (&files.cert_path, &files.key_path) {
        (Some(_), Some(_)) => {
            let (chain, key) = identity(files)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("tls: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The first byte of every TLS connection: a handshake record (the ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

static OUTGOING: RwLock<Option<TlsConnector>> = RwLock::new(None);
static MEMBER: RwLock<Option<MemberTls>> = RwLock::new(None);

/// Who a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Facing {
    /// Clients: native, Kafka, admin HTTP.
    Clients,
    /// The cluster's own members: they must present a certificate from its CA.
    Peers,
}

/// Makes this process a member with `tls`: its listeners (those that ask [`listener`]) and
/// its outgoing connections speak TLS from now on.
pub fn install_member(tls: MemberTls) {
    set_outgoing(Some(tls.connector.clone()));
    *MEMBER.write().unwrap_or_else(|p| p.into_inner()) = Some(tls);
}

/// Fails closed: a server whose configuration asks for TLS (`enabled`) must not listen in
/// plain text because nobody installed its certificate ([`install_member`]).
pub fn require_member(enabled: bool) -> Result<(), String> {
    if enabled && listener(Facing::Peers).is_none() {
        return Err(
            "tls.enabled is set, but no member certificate was installed in this process \
             (tls::install_member): refusing to listen in plain text"
                .into(),
        );
    }
    Ok(())
}

/// The TLS a listener facing `facing` uses, if this process is a member with TLS.
pub fn listener(facing: Facing) -> Option<ServerTls> {
    let member = MEMBER.read().unwrap_or_else(|p| p.into_inner());
    member.as_ref().map(|tls| match facing {
        Facing::Clients => tls.clients.clone(),
        Facing::Peers => tls.peers.clone(),
    })
}

/// Makes every later outgoing connection of this process ([`connect`]) speak TLS through
/// `connector`, or plain TCP with `None`.
pub fn set_outgoing(connector: Option<TlsConnector>) {
    *OUTGOING.write().unwrap_or_else(|p| p.into_inner()) = connector;
}

/// The connector outgoing connections use, if TLS is on.
pub fn outgoing() -> Option<TlsConnector> {
    OUTGOING.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The name a certificate must carry for the server at `addr` (`host:port`).
pub fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr}: no name to check a certificate against: {e}"),
        )
    })
}

/// Connects to `addr` (from this process's source address) and, when TLS is on, completes
/// the handshake, checking the server's certificate against the name in `addr`.
pub async fn connect(addr: &str) -> io::Result<Stream> {
    connect_with(addr, outgoing().as_ref()).await
}

/// [`connect`] through `connector` rather than the process's.
pub async fn connect_with(addr: &str, connector: Option<&TlsConnector>) -> io::Result<Stream> {
    let tcp = crate::source::connect(addr).await?;
    match connector {
        None => Ok(Stream::Plain(tcp)),
        Some(connector) => {
            let session = connector.connect(server_name(addr)?, tcp).await?;
            Ok(Stream::TlsClient(Box::new(session)))
        }
    }
}

/// Why [`accept`] made no TLS connection.
#[derive(Debug)]
pub enum Refused {
    /// The client spoke plain text: its connection, handed back so a listener can tell it so
    /// in its own protocol before closing.
    PlainText(TcpStream),
    /// The handshake failed or timed out.
    Failed(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::PlainText(_) => f.write_str(
                "plain text on a TLS listener (the client needs TLS: --tls-dir, or a Kafka \
                 client's security.protocol=SSL / SASL_SSL)",
            ),
            Refused::Failed(error) => write!(f, "{error}"),
        }
    }
}

/// Completes the server side of a handshake on `tcp` through `tls`, within `timeout`; without
/// TLS the connection stays plain.
pub async fn accept(
    tls: Option<&ServerTls>,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<Stream, Refused> {
    let Some(tls) = tls else {
        return Ok(Stream::Plain(tcp));
    };
    let handshake = async {
        // A client speaking plain text is told at once, not left waiting for the rest of what
        // would be a TLS record.
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(0) => {
                return Err(Refused::Failed(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before a handshake",
                )));
            }
            Ok(_) if first[0] != TLS_HANDSHAKE_RECORD => return Err(Refused::PlainText(tcp)),
            Ok(_) => {}
            Err(error) => return Err(Refused::Failed(error)),
        }
        tls.acceptor.accept(tcp).await.map_err(|error| {
            Refused::Failed(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("tls handshake: {error}"),
            ))
        })
    };
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(session)) => Ok(Stream::TlsServer(Box::new(session))),
        Ok(Err(refused)) => Err(refused),
        Err(_) => Err(Refused::Failed(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("tls handshake not done within {} ms", timeout.as_millis()),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host_part() {
        assert!(matches!(
            server_name("127.0.0.1:9000").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("[::1]:9000").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("broker-1.example:9000").unwrap(),
            ServerName::DnsName(_)
        ));
        assert!(server_name(":9000").is_err());
    }

    #[test]
    fn missing_files_are_named_in_the_error() {
        let files = TlsFiles {
            ca_path: "/nonexistent/ca.pem".into(),
            cert_path: None,
            key_path: None,
        };
        let Err(error) = client(&files) else {
            panic!("a missing CA must fail")
        };
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
        let Err(error) = member(&files) else {
            panic!("a missing CA must fail")
        };
        assert!(error.contains("ca.pem"), "{error}");
    }
}
