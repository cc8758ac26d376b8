//! TLS on the owners' listeners (issue 19 §3 "TLS (rustls) on TCP", extended to the tool-to-tool
//! leg of seed 003 "Sending a value through inter tool communication"): when a tool reaches the
//! bus over TLS, the values it owns are served over TLS too, and a consumer verifies that it
//! talks to the owner the bus vouched for.
//!
//! Trust is pinned, not chained: the owner presents a certificate (by default a fresh
//! self-signed one made at connect time, or one it was given) and announces its listener in
//! HELLO as
//!
//! ```text
//! tls:HOST:PORT;sha256=<64 hex digits of the SHA-256 of the certificate's DER>
//! ```
//!
//! The HELLO crosses the tool's TLS session to the bus, and the bus accepts a reference only at
//! its owner's announced location (see `interp`), so the fingerprint a consumer finds in a
//! reference is the one the owner told the bus over an authenticated channel. The consumer's
//! TLS handshake accepts exactly that certificate (the server name is not used) and checks the
//! handshake signature with it; any other certificate ends the transfer with
//! [`crate::client::ClientError::OwnerUnverified`], counted in the tool's stats.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The location prefix of an owner serving over TLS.
pub const PREFIX: &str = "tls:";
/// What separates the address from the fingerprint in a location.
pub const PIN: &str = ";sha256=";

/// The certificate and key an owner serves its values with.
#[derive(Debug)]
pub struct OwnerIdentity {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    fingerprint: [u8; 32],
}

impl Clone for OwnerIdentity {
    fn clone(&self) -> OwnerIdentity {
        OwnerIdentity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
            fingerprint: self.fingerprint,
        }
    }
}

/// SHA-256 of `der`.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl OwnerIdentity {
    /// A fresh self-signed certificate (ECDSA P-256) and its key.
    ///
    /// # Errors
    /// The generator's (no system randomness).
    pub fn generate() -> io::Result<OwnerIdentity> {
        let ck = rcgen::generate_simple_self_signed(vec!["viastack-bus-owner".to_string()])
            .map_err(io::Error::other)?;
        let cert = ck.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
        Ok(OwnerIdentity::from_der(vec![cert], key))
    }

    /// A given certificate chain (the first is pinned) and key.
    pub fn from_der(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> OwnerIdentity {
        let fingerprint = certs.first().map_or([0; 32], |c| fingerprint(c));
        OwnerIdentity {
            certs,
            key,
            fingerprint,
        }
    }

    /// The pinned certificate's SHA-256.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// The location announcing a TCP listener at `addr` served with this identity.
    pub fn location(&self, addr: &str) -> String {
        format!("{PREFIX}{addr}{PIN}{}", hex(&self.fingerprint))
    }

    /// rustls's server configuration for the owner's listener.
    ///
    /// # Errors
    /// A key that does not fit the certificate.
    pub fn server_config(&self) -> io::Result<Arc<rustls::ServerConfig>> {
        crate::net::tls_server_config_der(self.certs.clone(), self.key.clone_key())
    }
}

/// A TLS location split into its TCP address and pinned fingerprint; `None` when `location`
/// is not a well-formed TLS location.
pub fn parse_location(location: &str) -> Option<(&str, [u8; 32])> {
    let rest = location.strip_prefix(PREFIX)?;
    let (addr, fp) = rest.rsplit_once(PIN)?;
    Some((addr, unhex(fp)?))
}

/// Accepts exactly the certificate whose SHA-256 is pinned; checks the handshake's signature
/// with it.
#[derive(Debug)]
struct Pinned {
    fingerprint: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The fingerprint is public (it travels in references): no need for constant time.
        if fingerprint(end_entity) == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Why a pinned connection failed.
#[derive(Debug)]
pub enum PinError {
    /// The owner presented another certificate (or a bad handshake signature).
    Unverified(String),
    /// The socket failed.
    Io(io::Error),
}

/// A TLS stream to an owner.
pub type OwnerStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects to `addr` over TLS and completes the handshake, accepting only the certificate
/// whose SHA-256 is `pin`.
///
/// # Errors
/// [`PinError::Unverified`] for any other certificate, [`PinError::Io`] for the socket.
pub fn connect_pinned(addr: &str, pin: [u8; 32]) -> Result<OwnerStream, PinError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| PinError::Io(io::Error::other(e)))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            fingerprint: pin,
            provider,
        }))
        .with_no_client_auth();
    let name = ServerName::try_from("viastack-bus-owner")
        .map_err(|e| PinError::Io(io::Error::other(e)))?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name)
        .map_err(|e| PinError::Io(io::Error::other(e)))?;
    let mut tcp = TcpStream::connect(addr).map_err(PinError::Io)?;
    tcp.set_nodelay(true).map_err(PinError::Io)?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            let tls = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<rustls::Error>())
                .cloned();
            return Err(match tls {
                Some(t) => PinError::Unverified(t.to_string()),
                None => PinError::Io(e),
            });
        }
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_carries_the_fingerprint_and_parses_back() {
        let id = OwnerIdentity::generate().unwrap_or_else(|e| panic!("{e}"));
        let loc = id.location("127.0.0.1:4000");
        assert!(loc.starts_with("tls:127.0.0.1:4000;sha256="), "{loc}");
        assert_eq!(
            parse_location(&loc),
            Some(("127.0.0.1:4000", id.fingerprint()))
        );
        assert_eq!(parse_location("127.0.0.1:4000"), None);
        assert_eq!(parse_location("tls:127.0.0.1:4000;sha256=zz"), None);
    }
}
