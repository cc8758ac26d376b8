//! TLS keys the bus's rustls (ring) cannot load are refused with a typed error naming the fix
//! (issue 19 §3): the JDK keytool's EC key (PKCS#8 without the public key) is
//! `TlsKeyError::EcKeyWithoutPublicKey`, and the same key rewritten by `openssl ec` (SEC1
//! with the public key) serves. Files: testdata/tls/keytool-ec (made by `keytool -genkeypair
//! -keyalg EC`, exported with `openssl pkcs12 -nodes`).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use viastack_bus::net::{tls_server_config, TlsKeyError};

fn file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tls/keytool-ec")
        .join(name)
}

#[test]
fn a_keytool_ec_key_is_refused_with_a_typed_error_naming_the_fix() {
    let e = tls_server_config(&file("cert.pem"), &file("key.pem")).unwrap_err();
    let typed = e
        .get_ref()
        .and_then(|x| x.downcast_ref::<TlsKeyError>())
        .unwrap_or_else(|| panic!("untyped: {e}"));
    assert!(
        matches!(typed, TlsKeyError::EcKeyWithoutPublicKey { path } if path.ends_with("key.pem"))
    );
    assert!(e.to_string().contains("openssl ec -in"), "{e}");
}

#[test]
fn the_same_key_with_its_public_key_serves() {
    tls_server_config(&file("cert.pem"), &file("key-sec1.pem")).unwrap();
}
