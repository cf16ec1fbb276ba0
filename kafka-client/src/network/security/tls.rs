//! The rustls configuration of a connection, from Java's `ssl.*` keys (PEM stores only).
//!
//! Crypto provider: *ring*. Every random draw of a handshake (client random, key shares,
//! the SCRAM nonce) is a `getrandom` system call, with no generator state in the process, so
//! two clones restored from one image draw different values without any reseeding. A
//! provider with a user-space DRBG (aws-lc-rs) would copy its state into every clone.
//!
//! A configuration is built for each connection attempt and dropped with it: no session
//! ticket, key or trust store outlives the connections (a checkpoint closes them all), and
//! session resumption is off (there is nothing to resume across a restore anyway). With
//! `SSLKEYLOGFILE` set, TLS secrets are logged to that file (NSS key log format), as curl and
//! browsers do: for debugging with Wireshark.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, Resumption, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use zeroize::{Zeroize, Zeroizing};

use super::{SecurityConfig, SecurityError};

/// A TLS version of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// `TLSv1.2`.
    Tls12,
    /// `TLSv1.3`.
    Tls13,
}

impl TlsVersion {
    /// Java's name (`TLSv1.2`, `TLSv1.3`; `TLS` means both).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "TLSv1.3" | "TLS" => Ok(Self::Tls13),
            "TLSv1.2" => Ok(Self::Tls12),
            "TLSv1.1" | "TLSv1" | "SSLv3" => Err(format!(
                "{s} is not secure and not supported; use TLSv1.2 or TLSv1.3"
            )),
            _ => Err("expected TLSv1.2 or TLSv1.3".into()),
        }
    }
}

fn err(key: &'static str, reason: impl Into<String>) -> SecurityError {
    SecurityError {
        key,
        reason: reason.into(),
    }
}

/// The rustls configuration of one connection attempt.
pub(crate) struct TlsSetup {
    /// The configuration.
    pub config: Arc<ClientConfig>,
    /// Its client certificate (mutual TLS), if a key store is configured.
    pub client_key: Option<Arc<ClientKeyOnDemand>>,
}

/// The rustls client configuration for one connection attempt.
pub(crate) fn client_config(s: &SecurityConfig) -> Result<TlsSetup, SecurityError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if s.tls_versions.contains(&TlsVersion::Tls13) {
        versions.push(&rustls::version::TLS13);
    }
    if s.tls_versions.contains(&TlsVersion::Tls12) {
        versions.push(&rustls::version::TLS12);
    }
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| err("ssl.enabled.protocols", e.to_string()))?;
    let roots = Arc::new(trust_store(s)?);
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| {
            err(
                "ssl.truststore.location",
                format!("unusable trust store: {e}"),
            )
        })?;
    let builder = if s.endpoint_identification {
        builder.with_webpki_verifier(webpki)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(webpki)))
    };
    // The key is loaded only if the broker asks for a certificate (see ClientKeyOnDemand).
    let client_key = client_chain(s)?.map(|chain| {
        Arc::new(ClientKeyOnDemand {
            security: s.clone(),
            chain,
            failure: std::sync::Mutex::new(None),
        })
    });
    let mut config = match &client_key {
        Some(k) => builder.with_client_cert_resolver(k.clone()),
        None => builder.with_no_client_auth(),
    };
    config.resumption = Resumption::disabled();
    config.key_log = Arc::new(rustls::KeyLogFile::new());
    Ok(TlsSetup {
        config: Arc::new(config),
        client_key,
    })
}

/// The CA certificates: `ssl.truststore.location` or `ssl.truststore.certificates`, else the
/// system's trust store.
fn trust_store(s: &SecurityConfig) -> Result<RootCertStore, SecurityError> {
    let mut roots = RootCertStore::empty();
    let pem = if let Some(inline) = &s.truststore_certificates {
        Some((
            "ssl.truststore.certificates",
            s.resolve_value("ssl.truststore.certificates", inline.expose())?,
        ))
    } else if let Some(loc) = &s.truststore_location {
        let path = s.resolve_value("ssl.truststore.location", loc)?;
        Some((
            "ssl.truststore.location",
            read_pem_file(
                "ssl.truststore.location",
                &path,
                s.truststore_type.is_none(),
            )?,
        ))
    } else {
        None
    };
    match pem {
        Some((key, text)) => {
            for cert in certificates(key, &text)? {
                roots
                    .add(cert)
                    .map_err(|e| err(key, format!("unusable CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(err(
                    key,
                    "no PEM certificate (-----BEGIN CERTIFICATE-----) found",
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(err(
                    "ssl.truststore.location",
                    format!(
                        "no trust store given and the system's has no certificates ({}); set ssl.truststore.location to the CA's PEM file",
                        found
                            .errors
                            .first()
                            .map_or_else(|| "none found".to_owned(), |e| e.to_string())
                    ),
                ));
            }
        }
    }
    Ok(roots)
}

type KeyStore = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The client's certificate chain (mutual TLS), if a key store is configured; its key is
/// neither decoded nor parsed here.
fn client_chain(s: &SecurityConfig) -> Result<Option<Vec<CertificateDer<'static>>>, SecurityError> {
    match store_texts(s)? {
        Some((_, _, chain_name, chain_pem)) => chain(chain_name, &chain_pem).map(Some),
        None => Ok(None),
    }
}

/// The certificates of the chain's PEM text, at least one.
fn chain(
    chain_name: &'static str,
    chain_pem: &str,
) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    let chain = certificates(chain_name, chain_pem)?;
    if chain.is_empty() {
        return Err(err(
            chain_name,
            "no PEM certificate (-----BEGIN CERTIFICATE-----) found",
        ));
    }
    Ok(chain)
}

/// The texts of the key store: (key's setting, key PEM, chain's setting, chain PEM).
type StoreTexts = (
    &'static str,
    Zeroizing<String>,
    &'static str,
    Zeroizing<String>,
);

/// Reads the key store's PEM texts (providers resolved now), if one is configured.
fn store_texts(s: &SecurityConfig) -> Result<Option<StoreTexts>, SecurityError> {
    if let (Some(k), Some(c)) = (&s.keystore_key, &s.keystore_certificate_chain) {
        let key = s.resolve_value("ssl.keystore.key", k.expose())?;
        let chain = s.resolve_value("ssl.keystore.certificate.chain", c.expose())?;
        return Ok(Some((
            "ssl.keystore.key",
            key,
            "ssl.keystore.certificate.chain",
            chain,
        )));
    }
    let Some(loc) = &s.keystore_location else {
        return Ok(None);
    };
    let path = s.resolve_value("ssl.keystore.location", loc)?;
    let text = read_pem_file("ssl.keystore.location", &path, s.keystore_type.is_none())?;
    Ok(Some((
        "ssl.keystore.location",
        text.clone(),
        "ssl.keystore.location",
        text,
    )))
}

/// The client's certificate chain and key (mutual TLS), if configured.
fn key_store(s: &SecurityConfig) -> Result<Option<KeyStore>, SecurityError> {
    let Some((key_name, key_pem, chain_name, chain_pem)) = store_texts(s)? else {
        return Ok(None);
    };
    let chain = chain(chain_name, &chain_pem)?;
    let key = private_key(s, key_name, &key_pem)?;
    Ok(Some((chain, key)))
}

/// The client's certificate and its key, parsed for a signature (the key's DER wiped once
/// parsed): what the broker gets when it asks for a certificate.
fn certified_key(s: &SecurityConfig) -> Result<Arc<CertifiedKey>, SecurityError> {
    let (chain, mut key) = key_store(s)?.ok_or_else(|| {
        err(
            "ssl.keystore.location",
            "no key store is configured any more",
        )
    })?;
    // Parsed here rather than by `with_client_auth_cert`, which drops the DER without
    // wiping it.
    let signing = rustls::crypto::ring::sign::any_supported_type(&key);
    key.zeroize();
    let signing = signing.map_err(|e| {
        err(
            "ssl.keystore.location",
            format!("unusable private key: {e}"),
        )
    })?;
    let certified = Arc::new(CertifiedKey::new(chain, signing));
    certified.keys_match().map_err(|e| {
        err(
            "ssl.keystore.location",
            format!("the key does not match the certificate: {e}"),
        )
    })?;
    Ok(certified)
}

/// The private key of a PEM text: PKCS#8, PKCS#1 or SEC1, or an encrypted PKCS#8 key with
/// `ssl.key.password`.
fn private_key(
    s: &SecurityConfig,
    key_name: &'static str,
    pem: &str,
) -> Result<PrivateKeyDer<'static>, SecurityError> {
    if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        let password = match &s.key_password {
            Some(p) => s.resolve_value("ssl.key.password", p.expose())?,
            None => {
                return Err(err(
                    "ssl.key.password",
                    format!("the private key of {key_name} is encrypted: set ssl.key.password"),
                ));
            }
        };
        return decrypt_pkcs8(pem, &password).map_err(|reason| err("ssl.key.password", reason));
    }
    for (label, body) in pem_sections(pem) {
        let der =
            || decode_body(body).ok_or_else(|| err(key_name, "the PEM private key is not base64"));
        match label {
            "PRIVATE KEY" => return Ok(PrivateKeyDer::Pkcs8(der()?.to_vec().into())),
            "RSA PRIVATE KEY" => return Ok(PrivateKeyDer::Pkcs1(der()?.to_vec().into())),
            "EC PRIVATE KEY" => return Ok(PrivateKeyDer::Sec1(der()?.to_vec().into())),
            _ => {}
        }
    }
    Err(err(
        key_name,
        "no PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY) found",
    ))
}

fn decrypt_pkcs8(pem: &str, password: &str) -> Result<PrivateKeyDer<'static>, String> {
    use pkcs8::der::Decode;
    let body = pem_sections(pem)
        .find(|(label, _)| *label == "ENCRYPTED PRIVATE KEY")
        .map(|(_, body)| body)
        .ok_or("no encrypted key")?;
    let der = decode_body(body).ok_or("the encrypted key is not base64")?;
    let info = pkcs8::EncryptedPrivateKeyInfo::from_der(&der)
        .map_err(|e| format!("not an encrypted PKCS#8 key: {e}"))?;
    let plain = info
        .decrypt(password.as_bytes())
        .map_err(|_| "cannot decrypt the private key: wrong password, or an unsupported scheme (PBES2 with PBKDF2 and AES-CBC is)".to_owned())?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// The `(label, base64 body)` of each `-----BEGIN label-----` … `-----END label-----` block.
/// Parsed here rather than by a PEM library, so that decoding a private key leaves no copy of
/// it behind in memory that is given back (a line buffer that grows, a skipped block decoded).
fn pem_sections(text: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        loop {
            let start = rest.find("-----BEGIN ")?;
            let after = &rest[start + 11..];
            let label_end = after.find("-----")?;
            let label = &after[..label_end];
            let body_start = &after[label_end + 5..];
            let end_marker = format!("-----END {label}-----");
            let Some(end) = body_start.find(&end_marker) else {
                rest = body_start;
                continue;
            };
            rest = &body_start[end + end_marker.len()..];
            return Some((label, &body_start[..end]));
        }
    })
}

/// Decodes a PEM body into a buffer of its final size (wiped when dropped).
fn decode_body(body: &str) -> Option<Zeroizing<Vec<u8>>> {
    let mut compact = Zeroizing::new(String::with_capacity(body.len()));
    compact.extend(body.chars().filter(|c| !c.is_whitespace()));
    super::base64::decode(&compact).map(Zeroizing::new)
}

/// The certificates of a PEM text (other blocks, a key among them, are not decoded).
fn certificates(
    key: &'static str,
    text: &str,
) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    pem_sections(text)
        .filter(|(label, _)| *label == "CERTIFICATE")
        .map(|(_, body)| {
            decode_body(body)
                .map(|der| CertificateDer::from(der.to_vec()))
                .ok_or_else(|| err(key, "a PEM certificate is not base64"))
        })
        .collect()
}

/// Reads a PEM store file; a store of another format is refused with the hint to convert.
fn read_pem_file(
    key: &'static str,
    path: &str,
    type_unset: bool,
) -> Result<Zeroizing<String>, SecurityError> {
    let bytes = Zeroizing::new(
        std::fs::read(path).map_err(|e| err(key, format!("cannot read {path}: {e}")))?,
    );
    let text = std::str::from_utf8(&bytes)
        .ok()
        .filter(|t| t.contains("-----BEGIN "));
    match text {
        Some(t) => Ok(Zeroizing::new(t.to_owned())),
        None => Err(err(
            key,
            format!(
                "{path} is not a PEM file{}: JKS and PKCS12 stores are not supported; convert it to PEM (e.g. openssl pkcs12 -in store.p12 -nodes) and set the store type to PEM",
                if type_unset {
                    " (the store type is not set: Java's default would be JKS)"
                } else {
                    ""
                }
            ),
        )),
    }
}

/// The client certificate of a connection, its key loaded only when the broker asks for a
/// certificate: a listener that does not ask never has the key parsed, so no number of it is
/// left in memory a checkpoint could copy into an image. When it is parsed it lives as long as
/// the connection (a checkpoint closes them all); what it leaves in freed memory is wiped only
/// under a wiping allocator (`crac_api::WipeOnFree`). A key that cannot be loaded then is the
/// connection's error (see [`ClientKeyOnDemand::failure`]).
pub(crate) struct ClientKeyOnDemand {
    security: SecurityConfig,
    chain: Vec<CertificateDer<'static>>,
    failure: std::sync::Mutex<Option<SecurityError>>,
}

impl std::fmt::Debug for ClientKeyOnDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKeyOnDemand")
            .field("chain", &self.chain.len())
            .finish()
    }
}

impl ClientKeyOnDemand {
    /// Why the key could not be given when the broker asked for it, if that happened.
    pub(crate) fn failure(&self) -> Option<SecurityError> {
        self.failure.lock().ok()?.clone()
    }
}

impl ResolvesClientCert for ClientKeyOnDemand {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        match certified_key(&self.security) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::error!(error = %e, "the broker asked for a client certificate");
                if let Ok(mut f) = self.failure.lock() {
                    *f = Some(e);
                }
                None
            }
        }
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain must still lead to a trusted
/// CA, only the host name is not checked.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
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
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// What a failed handshake means for the user: the key to fix and the explanation.
pub(crate) fn explain(e: &rustls::Error, host: &str) -> (&'static str, String) {
    use rustls::{AlertDescription as A, Error as E};
    match e {
        E::InvalidCertificate(CertificateError::NotValidForName)
        | E::InvalidCertificate(CertificateError::NotValidForNameContext { .. }) => (
            "ssl.endpoint.identification.algorithm",
            format!("the broker's certificate is not valid for {host:?} (hostname mismatch): connect by a name or address the certificate lists, or set ssl.endpoint.identification.algorithm= (empty) to skip the check"),
        ),
        E::InvalidCertificate(CertificateError::UnknownIssuer) => (
            "ssl.truststore.location",
            "the broker's certificate is not trusted (unknown issuer): set ssl.truststore.location (or ssl.truststore.certificates) to the PEM of the CA that signed it".into(),
        ),
        E::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => (
            "ssl.truststore.location",
            "the broker's certificate has expired".into(),
        ),
        E::InvalidCertificate(c) => (
            "ssl.truststore.location",
            format!("the broker's certificate was refused: {c:?}"),
        ),
        E::AlertReceived(A::CertificateRequired | A::BadCertificate | A::HandshakeFailure | A::UnknownCA | A::CertificateUnknown) => (
            "ssl.keystore.location",
            format!("the broker refused the handshake ({e}): it may require a client certificate its CA signed (set ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain)"),
        ),
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => (
            "security.protocol",
            format!("the broker does not speak TLS on this port ({e}): check security.protocol and the port of the listener"),
        ),
        other => ("security.protocol", format!("TLS handshake failed: {other}")),
    }
}
