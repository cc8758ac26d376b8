//! Spec bundles: delivery services deployed at run time, content-addressed and signed
//! (issue 16 §4; seed 000 §4.3.2, fetching a spec, and §4.3.1, malicious specs — the seed had
//! no protection; this is ours).
//!
//! A *spec bundle* is a service's SCXML text, its SHA-256 (the service's content address) and
//! optionally an Ed25519 signature of that hash with the signer's public key. The `messagestore`
//! layer ships bundles to nodes that lack a service ([`SPEC_REQUEST`] / [`SPEC_RESPONSE`],
//! layer messages in the messagestore wire format, chunked by [`CHUNK`] bytes); `viastack
//! services serve` answers the same requests over UDP.
//!
//! A received bundle runs only once [`accept`] passed: size within [`MAX_SPEC`], the hash
//! recomputed and equal, when trusted keys are configured a signature by one of them that
//! verifies, UTF-8 text that loads and verifies ([`Service::load`], the spec layer's checks)
//! and declares the ServiceID asked for. Each refusal is a [`Refusal`].
//!
//! Keys: an Ed25519 private key is the 32-byte seed `viastack keygen` writes (64 hex digits);
//! its public key is what `trusted_keys` lists.
//!
//! # Wire (payload of the layer messages; the messagestore header carries the ServiceID)
//!
//! - SPEC_REQUEST: empty (any spec for the header's ServiceID) or the 32-byte hash wanted.
//! - SPEC_RESPONSE: hash (32), total length (u32), offset (u32), signature flag (u8: 0 none,
//!   1 signed) then for 1 the public key (32) and signature (64), then the chunk's bytes (at
//!   most [`CHUNK`]; offset a multiple of [`CHUNK`]; every chunk but the last full). Big-endian.
//!
//! Signature files: `viastack services sign FILE` writes `FILE.sig`, one line
//! `ed25519 <public key hex> <signature hex>`.

use std::collections::BTreeMap;
use std::sync::Arc;

use ring::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};
use viastack_spec::service::Service;

/// MessageType of a request for a spec (a layer message: no service sees it).
pub const SPEC_REQUEST: u8 = 0xFC;
/// MessageType of one chunk of a spec bundle, answering a [`SPEC_REQUEST`].
pub const SPEC_RESPONSE: u8 = 0xFB;
/// Spec bytes per response chunk (a response datagram stays under 1,300 bytes).
pub const CHUNK: usize = 1024;
/// Largest spec text accepted (the shipped specs are under 20 KiB).
pub const MAX_SPEC: usize = 256 * 1024;

/// A SHA-256 content address.
pub type Hash = [u8; 32];

/// The SHA-256 of `text`.
pub fn hash(text: &[u8]) -> Hash {
    let d = ring::digest::digest(&ring::digest::SHA256, text);
    let mut h = [0u8; 32];
    h.copy_from_slice(d.as_ref());
    h
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses exactly `N` bytes of hex (surrounding whitespace ignored).
///
/// # Errors
/// Not hex, or not `2N` digits.
pub fn parse_hex<const N: usize>(s: &str) -> Result<[u8; N], String> {
    let s = s.trim();
    if s.len() != 2 * N || !s.is_ascii() {
        return Err(format!(
            "expected {} hex digits, found {} characters",
            2 * N,
            s.len()
        ));
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("not hex: `{}`", &s[2 * i..2 * i + 2]))?;
    }
    Ok(out)
}

/// An Ed25519 signature of a bundle's hash, with the signer's public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The signer's public key.
    pub key: [u8; 32],
    /// The signature of the 32-byte hash.
    pub sig: [u8; 64],
}

impl Signature {
    /// The `.sig` file line: `ed25519 <key hex> <signature hex>`.
    pub fn to_line(&self) -> String {
        format!("ed25519 {} {}", hex(&self.key), hex(&self.sig))
    }

    /// Reads a `.sig` file line.
    ///
    /// # Errors
    /// Not `ed25519 KEY SIG` with 64 and 128 hex digits.
    pub fn parse(s: &str) -> Result<Signature, String> {
        let mut w = s.split_whitespace();
        match (w.next(), w.next(), w.next(), w.next()) {
            (Some("ed25519"), Some(k), Some(g), None) => Ok(Signature {
                key: parse_hex(k).map_err(|e| format!("public key: {e}"))?,
                sig: parse_hex(g).map_err(|e| format!("signature: {e}"))?,
            }),
            _ => Err("expected `ed25519 <public key hex> <signature hex>`".into()),
        }
    }
}

/// The public key of the Ed25519 private key `seed`.
///
/// # Errors
/// Never for 32 bytes in practice (ring's check).
pub fn public_key(seed: &[u8; 32]) -> Result<[u8; 32], String> {
    let kp = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|e| e.to_string())?;
    let mut k = [0u8; 32];
    k.copy_from_slice(kp.public_key().as_ref());
    Ok(k)
}

/// Signs `hash` with the private key `seed`.
///
/// # Errors
/// As [`public_key`].
pub fn sign(hash: &Hash, seed: &[u8; 32]) -> Result<Signature, String> {
    let kp = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|e| e.to_string())?;
    let mut key = [0u8; 32];
    key.copy_from_slice(kp.public_key().as_ref());
    let mut sig = [0u8; 64];
    sig.copy_from_slice(kp.sign(hash).as_ref());
    Ok(Signature { key, sig })
}

/// A spec's text, content address and optional signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The SCXML text.
    pub text: Arc<[u8]>,
    /// Its SHA-256 as claimed (checked by [`accept`], not trusted).
    pub hash: Hash,
    /// A signature of `hash`.
    pub signature: Option<Signature>,
}

impl Bundle {
    /// An unsigned bundle of `text`.
    pub fn new(text: &[u8]) -> Bundle {
        Bundle {
            text: Arc::from(text),
            hash: hash(text),
            signature: None,
        }
    }

    /// The bundle of `text` signed by `signature` (which may not verify: [`accept`] checks).
    pub fn with_signature(text: &[u8], signature: Option<Signature>) -> Bundle {
        Bundle {
            signature,
            ..Bundle::new(text)
        }
    }
}

/// Why a received bundle was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Larger than [`MAX_SPEC`].
    #[error("spec of {0} bytes is larger than {MAX_SPEC}")]
    TooLarge(usize),
    /// The text's SHA-256 is not the claimed hash.
    #[error("the text's SHA-256 is not the bundle's hash (tampered or corrupt)")]
    BadHash,
    /// Trusted keys are configured and the bundle is unsigned.
    #[error("unsigned, and only specs signed by a trusted key are accepted")]
    Unsigned,
    /// Signed by a key not in the trusted set.
    #[error("signed by {0}, not a trusted key")]
    UntrustedKey(String),
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// A different hash than the one asked for.
    #[error("not the spec asked for (hash {0})")]
    WrongHash(String),
    /// The text is not UTF-8.
    #[error("the spec is not UTF-8")]
    NotUtf8,
    /// The spec layer refused the text.
    #[error("the spec does not load: {0}")]
    DoesNotLoad(String),
    /// The spec declares another ServiceID than the one asked for.
    #[error("the spec declares ServiceID {got}, not {want}")]
    WrongService {
        /// Asked for.
        want: u32,
        /// Declared.
        got: u32,
    },
}

/// Checks the bundle's integrity and signature (not its content): size, hash, and with
/// `trusted` non-empty a signature by one of those keys.
///
/// # Errors
/// The first check that fails.
pub fn verify(b: &Bundle, trusted: &[[u8; 32]]) -> Result<(), Refusal> {
    if b.text.len() > MAX_SPEC {
        return Err(Refusal::TooLarge(b.text.len()));
    }
    if hash(&b.text) != b.hash {
        return Err(Refusal::BadHash);
    }
    if trusted.is_empty() {
        return Ok(());
    }
    let Some(s) = &b.signature else {
        return Err(Refusal::Unsigned);
    };
    if !trusted.contains(&s.key) {
        return Err(Refusal::UntrustedKey(hex(&s.key)));
    }
    UnparsedPublicKey::new(&ED25519, &s.key)
        .verify(&b.hash, &s.sig)
        .map_err(|_| Refusal::BadSignature)
}

/// Verifies `b` ([`verify`]), then loads and verifies its spec (the spec layer's checks; the
/// service keeps the spec layer's step limit) and checks it is the service wanted: ServiceID
/// `want_service` and hash `want_hash` when given.
///
/// # Errors
/// Why the bundle is refused: it must not run.
pub fn accept(
    b: &Bundle,
    want_service: Option<u32>,
    want_hash: Option<&Hash>,
    trusted: &[[u8; 32]],
) -> Result<Service, Refusal> {
    verify(b, trusted)?;
    if let Some(h) = want_hash {
        if *h != b.hash {
            return Err(Refusal::WrongHash(hex(&b.hash)));
        }
    }
    let text = std::str::from_utf8(&b.text).map_err(|_| Refusal::NotUtf8)?;
    let name = format!("spec:{}", &hex(&b.hash)[..16]);
    let (svc, _warnings) =
        Service::load(&name, text).map_err(|e| Refusal::DoesNotLoad(e.to_string()))?;
    if let Some(want) = want_service {
        if svc.id() != want {
            return Err(Refusal::WrongService {
                want,
                got: svc.id(),
            });
        }
    }
    Ok(svc)
}

/// The payload of a [`SPEC_REQUEST`].
pub fn encode_request(want: Option<&Hash>) -> Vec<u8> {
    want.map_or_else(Vec::new, |h| h.to_vec())
}

/// Reads a [`SPEC_REQUEST`] payload: `Some(None)` for any spec of the ServiceID,
/// `Some(Some(hash))` for that hash, `None` if malformed.
pub fn decode_request(p: &[u8]) -> Option<Option<Hash>> {
    match p.len() {
        0 => Some(None),
        32 => p.try_into().ok().map(Some),
        _ => None,
    }
}

/// One chunk of a bundle in a [`SPEC_RESPONSE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The bundle's hash.
    pub hash: Hash,
    /// The text's total length.
    pub total: u32,
    /// Where this chunk starts.
    pub offset: u32,
    /// The bundle's signature.
    pub signature: Option<Signature>,
    /// The bytes.
    pub data: Vec<u8>,
}

/// The chunks of `b`, in order (one, empty, for an empty text).
pub fn chunks(b: &Bundle) -> Vec<Chunk> {
    let total = u32::try_from(b.text.len()).unwrap_or(u32::MAX);
    let mut out: Vec<Chunk> = b
        .text
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, d)| Chunk {
            hash: b.hash,
            total,
            offset: u32::try_from(i * CHUNK).unwrap_or(u32::MAX),
            signature: b.signature,
            data: d.to_vec(),
        })
        .collect();
    if out.is_empty() {
        out.push(Chunk {
            hash: b.hash,
            total: 0,
            offset: 0,
            signature: b.signature,
            data: Vec::new(),
        });
    }
    out
}

/// Encodes a [`SPEC_RESPONSE`] payload.
pub fn encode_chunk(c: &Chunk) -> Vec<u8> {
    let mut b = Vec::with_capacity(41 + 96 + c.data.len());
    b.extend_from_slice(&c.hash);
    b.extend_from_slice(&c.total.to_be_bytes());
    b.extend_from_slice(&c.offset.to_be_bytes());
    match &c.signature {
        None => b.push(0),
        Some(s) => {
            b.push(1);
            b.extend_from_slice(&s.key);
            b.extend_from_slice(&s.sig);
        }
    }
    b.extend_from_slice(&c.data);
    b
}

/// Decodes a [`SPEC_RESPONSE`] payload; `None` if malformed (a bad flag, a total above
/// [`MAX_SPEC`], an offset not on a chunk boundary, a chunk of the wrong length).
pub fn decode_chunk(b: &[u8]) -> Option<Chunk> {
    let hash: Hash = b.get(..32)?.try_into().ok()?;
    let total = u32::from_be_bytes(b.get(32..36)?.try_into().ok()?);
    let offset = u32::from_be_bytes(b.get(36..40)?.try_into().ok()?);
    let (signature, rest) = match *b.get(40)? {
        0 => (None, b.get(41..)?),
        1 => (
            Some(Signature {
                key: b.get(41..73)?.try_into().ok()?,
                sig: b.get(73..137)?.try_into().ok()?,
            }),
            b.get(137..)?,
        ),
        _ => return None,
    };
    let (t, o) = (total as usize, offset as usize);
    if t > MAX_SPEC || o % CHUNK != 0 || (o >= t && !(o == 0 && t == 0)) {
        return None;
    }
    if rest.len() != CHUNK.min(t - o) {
        return None;
    }
    Some(Chunk {
        hash,
        total,
        offset,
        signature,
        data: rest.to_vec(),
    })
}

/// A bundle being reassembled from its chunks (bounded by [`MAX_SPEC`] since
/// [`decode_chunk`] refuses larger totals).
#[derive(Clone, Debug)]
pub struct Assembly {
    hash: Hash,
    total: u32,
    signature: Option<Signature>,
    parts: BTreeMap<u32, Vec<u8>>,
}

impl Assembly {
    /// Starts from `c`'s hash, length and signature.
    pub fn new(c: &Chunk) -> Assembly {
        Assembly {
            hash: c.hash,
            total: c.total,
            signature: c.signature,
            parts: BTreeMap::new(),
        }
    }

    /// Whether `c` belongs to this bundle (same hash, length and signature).
    pub fn matches(&self, c: &Chunk) -> bool {
        c.hash == self.hash && c.total == self.total && c.signature == self.signature
    }

    /// Adds `c` (ignored if it does not [match](Self::matches)); the bundle once complete.
    pub fn add(&mut self, c: Chunk) -> Option<Bundle> {
        if !self.matches(&c) {
            return None;
        }
        self.parts.insert(c.offset, c.data);
        let have: usize = self.parts.values().map(Vec::len).sum();
        if have != self.total as usize {
            return None;
        }
        let mut text = Vec::with_capacity(have);
        for p in self.parts.values() {
            text.extend_from_slice(p);
        }
        Some(Bundle {
            text: Arc::from(text),
            hash: self.hash,
            signature: self.signature,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn h2hack() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../specs/h2hack.scxml"
        ))
        .unwrap()
    }

    #[test]
    fn signed_bundle_is_accepted_by_a_node_trusting_its_key() {
        let seed = [7u8; 32];
        let text = h2hack();
        let sig = sign(&hash(&text), &seed).unwrap();
        assert_eq!(sig.key, public_key(&seed).unwrap());
        let b = Bundle::with_signature(&text, Some(sig));
        let svc = accept(&b, Some(1), None, &[sig.key]).unwrap();
        assert_eq!(svc.id(), 1);
        assert_eq!(Signature::parse(&sig.to_line()).unwrap(), sig);
    }

    #[test]
    fn tampering_is_refused() {
        let seed = [7u8; 32];
        let text = h2hack();
        let sig = sign(&hash(&text), &seed).unwrap();
        let key = sig.key;
        // Text changed after hashing: the hash no longer matches.
        let mut bad = Bundle::with_signature(&text, Some(sig));
        let mut t = text.clone();
        t.extend_from_slice(b"<!-- x -->");
        bad.text = Arc::from(t.clone());
        assert_eq!(
            accept(&bad, Some(1), None, &[key]).err(),
            Some(Refusal::BadHash)
        );
        // Hash recomputed over the changed text: the signature no longer verifies.
        let rehashed = Bundle::with_signature(&t, Some(sig));
        assert_eq!(
            accept(&rehashed, Some(1), None, &[key]).err(),
            Some(Refusal::BadSignature)
        );
        // Without trusted keys a consistent bundle passes the integrity check.
        assert!(accept(&rehashed, Some(1), None, &[]).is_ok());
        // Unsigned, or signed by another key, with trusted keys configured.
        assert_eq!(
            accept(&Bundle::new(&text), Some(1), None, &[key]).err(),
            Some(Refusal::Unsigned)
        );
        let other = sign(&hash(&text), &[9u8; 32]).unwrap();
        assert!(matches!(
            accept(
                &Bundle::with_signature(&text, Some(other)),
                Some(1),
                None,
                &[key]
            ),
            Err(Refusal::UntrustedKey(_))
        ));
        // Not the ServiceID asked for; not a spec at all.
        assert_eq!(
            accept(&Bundle::new(&text), Some(2), None, &[]).err(),
            Some(Refusal::WrongService { want: 2, got: 1 })
        );
        assert!(matches!(
            accept(&Bundle::new(b"<scxml"), None, None, &[]),
            Err(Refusal::DoesNotLoad(_))
        ));
    }

    #[test]
    fn chunks_reassemble_in_any_order() {
        let text = h2hack();
        assert!(text.len() > 2 * CHUNK);
        let b = Bundle::with_signature(&text, Some(sign(&hash(&text), &[1; 32]).unwrap()));
        let mut cs = chunks(&b);
        cs.reverse();
        let mut a = Assembly::new(&cs[0]);
        let n = cs.len();
        for (i, c) in cs.into_iter().enumerate() {
            let wire = encode_chunk(&c);
            let back = decode_chunk(&wire).unwrap();
            assert_eq!(back, c);
            let done = a.add(back);
            assert_eq!(done.is_some(), i == n - 1);
            if let Some(d) = done {
                assert_eq!(d, b);
            }
        }
        assert!(decode_chunk(&[0; 40]).is_none());
        assert_eq!(decode_request(&[]), Some(None));
        assert_eq!(decode_request(&[3; 32]), Some(Some([3; 32])));
        assert_eq!(decode_request(&[3; 5]), None);
    }
}
