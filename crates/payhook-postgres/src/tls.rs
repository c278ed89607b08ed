//! TLS to PostgreSQL: libpq's `sslmode` and `sslrootcert`, spoken with rustls (ring).
//!
//! Why one file of about 650 lines: one concern, end to end: the modes, the certificate verifier each needs, and a
//! failed handshake turned into an error that says why (its tests are in `tls/tests.rs`).
//!
//! tokio-postgres's own connection-string parser knows `sslmode=disable|prefer|require` only, and no
//! `sslrootcert`. [`split`] takes both keys out of the string before tokio-postgres sees it; [`TlsOptions`] turns
//! them into a rustls client configuration whose certificate verifier does what libpq's mode promises:
//!
//! | `sslmode` | TLS | chain verified | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | never | | |
//! | `prefer` (the default) | when the server offers it | only with `sslrootcert` | no |
//! | `require` | always | only with `sslrootcert` | no |
//! | `verify-ca` | always | yes | no |
//! | `verify-full` | always | yes | yes |
//!
//! The chain is verified against `sslrootcert` when it is given, else against the webpki-roots bundle (Mozilla's
//! roots, compiled in). A certificate is never accepted without its handshake signature being checked, whatever
//! the mode: "not verified" means that any certificate is trusted, not that the server need not hold its key.
//!
//! A handshake that fails becomes a [`TlsError`] saying why in the operator's words (not trusted, not valid for
//! this host, expired), with the mode, the host and the roots it was checked against, and rustls's error as its
//! source. Connections to a Unix socket never use TLS (the server refuses it there), whatever the mode, as with
//! libpq.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use tokio_postgres::Socket;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much TLS a connection insists on: libpq's `sslmode`, less `allow` (plaintext first, which tokio-postgres
/// does not offer either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, else plaintext. libpq's default, and payhook's.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, with the server's certificate chain verified; the host name is not checked.
    VerifyCa,
    /// TLS, with the chain verified and the certificate valid for the host connected to.
    VerifyFull,
}

impl SslMode {
    /// Every mode, in the order of how much they check.
    pub const ALL: [SslMode; 5] =
        [SslMode::Disable, SslMode::Prefer, SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull];

    /// Its name in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode named `name`, exactly as libpq spells it.
    pub fn parse(name: &str) -> Result<Self, TlsConfigError> {
        Self::ALL.into_iter().find(|m| m.as_str() == name).ok_or_else(|| TlsConfigError::Mode(name.to_owned()))
    }

    /// What tokio-postgres is told: it negotiates TLS, and the verifier decides what is verified.
    pub(crate) fn wire(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            SslMode::Disable => Wire::Disable,
            SslMode::Prefer => Wire::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Wire::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A TLS setting of the connection string that cannot be used. Found when the configuration is read.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// `sslmode` names no mode.
    #[error("sslmode {0:?} is not one of disable, prefer, require, verify-ca, verify-full")]
    Mode(String),
    /// A value is not validly percent-encoded.
    #[error("the value of {0} is not validly percent-encoded UTF-8")]
    Encoding(&'static str),
    /// The `sslrootcert` file cannot be read.
    #[error("cannot read sslrootcert {}", .path.display())]
    ReadRootCert {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `sslrootcert` file holds no PEM certificate.
    #[error("sslrootcert {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", .path.display())]
    EmptyRootCert {
        /// The file.
        path: PathBuf,
    },
    /// The `sslrootcert` file is not valid PEM.
    #[error("sslrootcert {} is not a valid PEM file", .path.display())]
    BadRootCert {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate of the `sslrootcert` file cannot be a trust anchor.
    #[error("sslrootcert {} holds a certificate that cannot be used as a root", .path.display())]
    RejectedRootCert {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// rustls refused the client configuration.
    #[error("cannot set up TLS")]
    Setup(#[source] rustls::Error),
    /// rustls refused the certificate verifier.
    #[error("cannot set up certificate verification")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
}

/// A connection string with `sslmode` and `sslrootcert` taken out, and what they said (the last of each wins, as
/// with libpq).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// The rest, for tokio-postgres's parser.
    pub rest: String,
    /// The value of `sslmode`, if given.
    pub mode: Option<String>,
    /// The value of `sslrootcert`, if given.
    pub root_cert: Option<String>,
}

/// Takes `sslmode` and `sslrootcert` out of a `postgres://` URL's query string, or out of a `key=value` string.
pub(crate) fn split(conn: &str) -> Result<Split, TlsConfigError> {
    if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        split_url(conn)
    } else {
        Ok(split_key_value(conn))
    }
}

fn split_url(url: &str) -> Result<Split, TlsConfigError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Split { rest: url.to_owned(), mode: None, root_cert: None });
    };
    let (mut mode, mut root_cert, mut kept) = (None, None, Vec::new());
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key).as_deref() {
            Some("sslmode") => mode = Some(percent_decode(value).ok_or(TlsConfigError::Encoding("sslmode"))?),
            Some("sslrootcert") => {
                root_cert = Some(percent_decode(value).ok_or(TlsConfigError::Encoding("sslrootcert"))?);
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(Split { rest, mode, root_cert })
}

/// `%XX` escapes decoded; `None` if one is malformed or the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let (bytes, mut out, mut i) = (s.as_bytes(), Vec::with_capacity(s.len()), 0);
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// libpq's `key = value` syntax: pairs separated by whitespace, spaces allowed around `=`, a value in single
/// quotes may hold spaces, and `\` escapes the next character. The pairs kept are copied as they were written. A
/// string this does not understand is left whole, for tokio-postgres to report.
fn split_key_value(conn: &str) -> Split {
    let untouched = || Split { rest: conn.to_owned(), mode: None, root_cert: None };
    let b = conn.as_bytes();
    let skip_space = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let (mut rest, mut mode, mut root_cert, mut i) = (String::new(), None, None, 0);
    loop {
        let start = i;
        let key_start = skip_space(i);
        if key_start == b.len() {
            rest.push_str(&conn[start..]);
            break;
        }
        let mut key_end = key_start;
        while key_end < b.len() && b[key_end] != b'=' && !b[key_end].is_ascii_whitespace() {
            key_end += 1;
        }
        let eq = skip_space(key_end);
        if eq == b.len() || b[eq] != b'=' {
            return untouched();
        }
        let mut j = skip_space(eq + 1);
        let mut value = Vec::new();
        let quoted = j < b.len() && b[j] == b'\'';
        if quoted {
            j += 1;
        }
        loop {
            match b.get(j) {
                None if quoted => return untouched(),
                None => break,
                Some(b'\'') if quoted => {
                    j += 1;
                    break;
                }
                Some(c) if !quoted && c.is_ascii_whitespace() => break,
                Some(b'\\') => {
                    let Some(&next) = b.get(j + 1) else { return untouched() };
                    value.push(next);
                    j += 2;
                }
                Some(&c) => {
                    value.push(c);
                    j += 1;
                }
            }
        }
        // Only ASCII delimiters were removed, so the value is still UTF-8.
        let value = String::from_utf8(value).unwrap_or_default();
        match &conn[key_start..key_end] {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root_cert = Some(value),
            _ => rest.push_str(&conn[start..j]),
        }
        i = j;
    }
    Split { rest: rest.trim().to_owned(), mode, root_cert }
}

/// Every host is a Unix socket (and no `hostaddr` sends the connection over TCP): TLS is never used.
pub(crate) fn unix_sockets_only(config: &tokio_postgres::Config) -> bool {
    let hosts = config.get_hosts();
    !hosts.is_empty()
        && config.get_hostaddrs().is_empty()
        && hosts.iter().all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)))
}

/// What a connection's certificate verifier checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verification {
    /// Any certificate (its handshake signature still checked).
    None,
    /// The chain up to a trusted root, not the host name.
    Chain,
    /// The chain and the host name.
    ChainAndName,
}

/// The TLS half of the connection string: the mode, the roots and the rustls configuration made from them.
/// Cheap to clone.
#[derive(Clone)]
pub struct TlsOptions {
    mode: SslMode,
    root_cert: Option<PathBuf>,
    /// `None` for `disable`.
    connector: Option<MakeTls>,
}

impl TlsOptions {
    /// Reads `root_cert` (PEM, one certificate or more) if given, and builds the client configuration `mode`
    /// calls for. With `prefer` or `require`, a `root_cert` makes the chain verified as with `verify-ca` (libpq
    /// does the same).
    pub fn new(mode: SslMode, root_cert: Option<PathBuf>) -> Result<Self, TlsConfigError> {
        let file_roots = root_cert.as_deref().map(load_roots).transpose()?;
        let verification = match (mode, &file_roots) {
            (SslMode::Prefer | SslMode::Require, None) => Verification::None,
            (SslMode::VerifyFull, _) => Verification::ChainAndName,
            _ => Verification::Chain,
        };
        let trust = match (verification, &root_cert) {
            (Verification::None, _) => "certificate not verified".to_owned(),
            (_, Some(path)) => format!("roots from sslrootcert {}", path.display()),
            (_, None) => "roots from the webpki-roots bundle".to_owned(),
        };
        let connector = match mode {
            SslMode::Disable => None,
            _ => {
                let roots =
                    file_roots.unwrap_or_else(|| RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() });
                let config = client_config(verification, Arc::new(roots))?;
                Some(MakeTls { inner: MakeRustlsConnect::new(config), facts: Arc::new(Facts { mode, trust }) })
            }
        };
        Ok(Self { mode, root_cert, connector })
    }

    /// Its mode.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The file of trusted roots, if one was given.
    pub fn root_cert(&self) -> Option<&Path> {
        self.root_cert.as_deref()
    }

    /// What tokio-postgres needs to start TLS; `None` for `disable`.
    pub(crate) fn connector(&self) -> Option<MakeTls> {
        self.connector.clone()
    }
}

impl Default for TlsOptions {
    /// `prefer`, without `sslrootcert`.
    fn default() -> Self {
        Self::new(SslMode::Prefer, None).expect("the compiled-in roots and rustls's defaults are valid")
    }
}

impl fmt::Display for TlsOptions {
    /// The mode, and the roots file if given: `verify-full with sslrootcert /etc/payhook/ca.pem`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.mode)?;
        if let Some(path) = &self.root_cert {
            write!(f, " with sslrootcert {}", path.display())?;
        }
        Ok(())
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions").field("mode", &self.mode).field("root_cert", &self.root_cert).finish()
    }
}

/// The certificates of a PEM file, as trust anchors.
fn load_roots(path: &Path) -> Result<RootCertStore, TlsConfigError> {
    let pem = std::fs::read(path).map_err(|source| TlsConfigError::ReadRootCert { path: path.to_owned(), source })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|source| TlsConfigError::BadRootCert { path: path.to_owned(), source })?;
        roots.add(cert).map_err(|source| TlsConfigError::RejectedRootCert { path: path.to_owned(), source })?;
    }
    if roots.is_empty() {
        return Err(TlsConfigError::EmptyRootCert { path: path.to_owned() });
    }
    Ok(roots)
}

/// A client configuration on the ring provider, built without touching the process-wide default provider.
fn client_config(verification: Verification, roots: Arc<RootCertStore>) -> Result<ClientConfig, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(TlsConfigError::Setup)?;
    let algorithms = provider.signature_verification_algorithms;
    let webpki = || {
        WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(TlsConfigError::Verifier)
    };
    let config = match verification {
        Verification::ChainAndName => builder.with_webpki_verifier(webpki()?).with_no_client_auth(),
        Verification::Chain => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly { webpki: webpki()? }))
            .with_no_client_auth(),
        Verification::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate { algorithms }))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// `verify-ca`: the chain must lead to a trusted root, the name in the certificate may be any.
#[derive(Debug)]
struct ChainOnly {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // webpki checks the name last, after the chain, its validity dates and its usage: a name mismatch
            // means everything else held.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` and `require` without `sslrootcert`: any certificate, as libpq accepts. The handshake signature is
/// still checked against the certificate's key, so the session is with whoever holds that key.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// What a failed handshake is reported with.
#[derive(Debug)]
struct Facts {
    mode: SslMode,
    /// What the certificate was checked against, in words.
    trust: String,
}

/// tokio-postgres-rustls's connector, with failed handshakes explained (see [`TlsError`]).
#[derive(Clone)]
pub(crate) struct MakeTls {
    inner: MakeRustlsConnect,
    facts: Arc<Facts>,
}

impl fmt::Debug for MakeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeTls").field("facts", &self.facts).finish_non_exhaustive()
    }
}

type RustlsConnect = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;
type RustlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

impl MakeTlsConnect<Socket> for MakeTls {
    type Stream = RustlsStream;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, Self::Error> {
        // tokio-postgres names no host for a Unix socket and never starts TLS on one (the server answers that it
        // does not speak TLS there, and without a host name tokio-postgres refuses the handshake itself), so any
        // valid name stands in rather than failing the connection.
        let name = if host.is_empty() { "localhost" } else { host };
        let inner = <MakeRustlsConnect as MakeTlsConnect<Socket>>::make_tls_connect(&mut self.inner, name)?;
        Ok(Connect { inner, host: host.to_owned(), facts: Arc::clone(&self.facts) })
    }
}

/// One handshake.
pub(crate) struct Connect {
    inner: RustlsConnect,
    host: String,
    facts: Arc<Facts>,
}

type Handshake = Pin<Box<dyn Future<Output = Result<RustlsStream, Box<dyn StdError + Send + Sync>>> + Send>>;

impl TlsConnect<Socket> for Connect {
    type Stream = RustlsStream;
    type Error = Box<dyn StdError + Send + Sync>;
    type Future = Handshake;

    fn connect(self, stream: Socket) -> Handshake {
        let Connect { inner, host, facts } = self;
        let handshake = <RustlsConnect as TlsConnect<Socket>>::connect(inner, stream);
        Box::pin(async move {
            handshake.await.map_err(|e| {
                let rejected = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).cloned();
                match rejected {
                    Some(cause) => Box::new(TlsError::Handshake {
                        problem: TlsProblem::of(&cause),
                        mode: facts.mode,
                        host,
                        trust: facts.trust.clone(),
                        cause,
                    }) as Box<dyn StdError + Send + Sync>,
                    // The connection broke during the handshake: an IO error says it well enough.
                    None => Box::new(e),
                }
            })
        })
    }
}

/// Why a TLS connection to the server could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// The server answered that it does not speak TLS (`ssl = off`), and the mode requires it.
    #[error("the server does not accept TLS connections, and sslmode requires TLS")]
    NotOffered,
    /// The handshake failed: rustls refused the server's certificate, or the server refused the client.
    #[error("{problem} (sslmode={mode}, host {host:?}, {trust})")]
    Handshake {
        /// What went wrong, in words.
        problem: TlsProblem,
        /// The connection's mode.
        mode: SslMode,
        /// The host connected to.
        host: String,
        /// What the certificate was checked against.
        trust: String,
        /// rustls's own error.
        #[source]
        cause: rustls::Error,
    },
}

impl TlsError {
    /// The TLS failure behind a connection error, if that is what it is.
    pub(crate) fn behind(e: &tokio_postgres::Error) -> Option<TlsError> {
        let mut source = e.source();
        while let Some(cause) = source {
            if let Some(tls) = cause.downcast_ref::<TlsError>() {
                return Some(tls.clone());
            }
            // tokio-postgres's answer to a server that declines TLS under `sslmode=require`: its error kinds are
            // private, so its message is all there is to recognize (`tls::tests` pins it).
            if cause.to_string() == NOT_OFFERED {
                return Some(TlsError::NotOffered);
            }
            source = cause.source();
        }
        None
    }
}

/// What tokio-postgres says when the server declines TLS that the mode requires.
const NOT_OFFERED: &str = "server does not support TLS";

/// A failed handshake's cause, in an operator's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProblem {
    /// The chain does not lead to a trusted root (or a signature in it is wrong, or it was revoked).
    Untrusted,
    /// The certificate is trusted but names another host.
    WrongHost,
    /// The certificate is out of its validity period.
    Expired,
    /// Anything else: no common protocol version or cipher suite, an alert from the server.
    Other,
}

impl TlsProblem {
    fn of(e: &rustls::Error) -> Self {
        use CertificateError as C;
        match e {
            rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
                TlsProblem::WrongHost
            }
            rustls::Error::InvalidCertificate(
                C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
            ) => TlsProblem::Expired,
            rustls::Error::InvalidCertificate(_) => TlsProblem::Untrusted,
            _ => TlsProblem::Other,
        }
    }
}

impl fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsProblem::Untrusted => "the server's certificate is not trusted",
            TlsProblem::WrongHost => "the server's certificate is not valid for the host name connected to",
            TlsProblem::Expired => "the server's certificate has expired or is not valid yet",
            TlsProblem::Other => "the TLS handshake failed",
        })
    }
}

#[cfg(test)]
mod tests;
