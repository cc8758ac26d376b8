//! `encrypt`: authenticated encryption with ChaCha20-Poly1305 (RFC 8439) under a key shared by
//! every node (a pre-shared group key), with replay protection.
//!
//! Wire format (network byte order), around the upper layers' bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 4 | salt: the sending session's incarnation, random, drawn at its first send |
//! | 8 | counter: per sending session, from 0, one per message |
//! | n | ciphertext of the upper layers' bytes (same length) |
//! | 16 | Poly1305 tag |
//!
//! The 12-byte AEAD nonce is the first 12 bytes (salt ‖ counter, RFC 8439 §2.8 / §4 "Nonce
//! construction"). The associated data is the channel id as 4 bytes: the one header below this
//! layer that is not encrypted (the device's channel tag), so a packet moved to another channel
//! fails authentication.
//!
//! **Keys.** The 32-byte key `K` (64 hex digits, [`parse_key`]) is never used directly. Each
//! sender `s` encrypts under its own subkey `K_s = HChaCha20(K, "viastack-enc" ‖ s)` (the
//! XChaCha20 subkey derivation, draft-irtf-cfrg-xchacha §2.2; `s` as 4 bytes), and a receiver
//! derives the subkey of the datagram's source. So two senders never share a (key, nonce) pair
//! even if they draw the same salt, and a packet replayed under another source address fails
//! authentication. A sender's nonces are unique as long as its sessions draw distinct salts: a
//! restarted session draws a new one (from the kernel's generator and the time), with a 2⁻³²
//! chance of repeating one earlier incarnation's. A counter never wraps: at 2⁶⁴ − 1 the session
//! refuses to send (`encrypt.exhausted`, and a `SendRefused` notice).
//!
//! **Provisioning.** A stack file gives the key in exactly one of three ways: `key` (the hex
//! digits in the file itself: for tests and simulations), `key_file` (a file holding them, to
//! which group and others have no access — `chmod 600` — named relative to the stack file) or
//! `key_env` (an environment variable holding them). `viastack keygen --out FILE` makes a key file from the operating
//! system's random source; `docs/APPLICATIONS.md` §7 describes deploying and rotating keys.
//! Reading files and the environment is the stack builder's (`viastack_stack::secret`); this
//! module only parses the hex ([`parse_key`], [`format_key`]). Keys are pre-shared: fresh keys
//! per session need a key exchange (later work).
//!
//! **Receiving.** Shorter than 28 bytes → dropped, `encrypt.truncated`. Known source and salt
//! and a counter already seen → dropped, `encrypt.replay`; older than the replay window →
//! `encrypt.too_old`; a salt among the source's last [`RETIRED_SALTS`] → `encrypt.stale_salt`
//! (a copy from before the sender restarted). Then the packet is authenticated and decrypted in
//! place; failure (forged, modified, truncated or moved packets) → `encrypt.bad_tag`. Only an
//! authentic packet changes any state: its counter enters the window of (channel, source); a
//! new salt there means the sender restarted (`encrypt.peer_restarted`): the old salt is
//! retired and the window starts over.
//!
//! **Replay window** (RFC 6347 §4.1.2.6, RFC 4303 §3.4.3): a bitmap of `replay_window` counters
//! behind the highest one seen per (channel, source) ([`SeqWindow`]). A sender's counter runs
//! over all its channels and destinations, so each receiver sees a sparse subsequence: the
//! window is in counter space and must cover the sender's traffic to others during the
//! receiver's reordering depth. Packets delayed beyond it are dropped (`too_old`), never
//! accepted twice.
//!
//! **Bounded senders.** At most `max_peers` (channel, source) windows are kept; a new one
//! evicts the least recently used (`encrypt.evicted`). Only authentic packets create entries,
//! so an attacker without the key cannot flush the table. Known limits: once a sender's entry
//! was evicted, or after more than [`RETIRED_SALTS`] of its restarts, its old packets can be
//! replayed once more; full protection needs a handshake with fresh keys (later work).
//!
//! Copies: none. The header is pushed into the message's headroom, the payload encrypted and
//! decrypted in place, the tag appended (into the message's tailroom) and truncated.
//!
//! **Implementation.** The AEAD is `ring`'s ChaCha20-Poly1305 (BoringSSL's assembly): 2.4 GB/s
//! for 64 KiB messages on the reference machine against 1.4 GB/s for the RustCrypto crate,
//! which remains for the HChaCha20 subkey derivation only. Both implement RFC 8439, so the hex
//! vectors in `testdata/vectors/encrypt.json` pin the same bytes either way.

use chacha20::cipher::generic_array::GenericArray;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};

use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE};
use viastack_kernel::{
    ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Layer, Message, NodeId,
    Sendable, Session,
};

use crate::events::{failure, SEND_REFUSED};
use crate::peers::{draw_epoch, LruMap, Seen, SeqWindow};

/// Bytes in front of the ciphertext (salt and counter: the nonce).
pub const NONCE_LEN: usize = 12;
/// Bytes of the tag behind it.
pub const TAG_LEN: usize = 16;
/// Salts of a sender remembered after it restarted.
pub const RETIRED_SALTS: usize = 4;

/// Parameters of an [`Encrypt`] layer.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// The pre-shared group key.
    pub key: [u8; 32],
    /// Counters remembered behind the highest one, per (channel, source).
    pub replay_window: usize,
    /// (channel, source) windows kept at most.
    pub max_peers: usize,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Config")
            .field("replay_window", &self.replay_window)
            .field("max_peers", &self.max_peers)
            .finish_non_exhaustive()
    }
}

/// The default replay window: 1024 counters. RFC 6347 §4.1.2.6 and RFC 4303 §3.4.3 ask for at
/// least 32 and default to 64 for one stream; a sender's counter here spans all its peers and
/// channels, and RFC 6479 §1 recommends windows in the thousands for high rates.
pub const DEFAULT_REPLAY_WINDOW: usize = 1024;
/// The default number of (channel, source) windows kept.
pub const DEFAULT_MAX_PEERS: usize = 1024;

impl Config {
    /// A config with `key` and the default window and peer bound.
    pub fn new(key: [u8; 32]) -> Self {
        Config {
            key,
            replay_window: DEFAULT_REPLAY_WINDOW,
            max_peers: DEFAULT_MAX_PEERS,
        }
    }
}

/// Reads a key written as 64 hex digits (either case), with surrounding whitespace (a key
/// file's newline) allowed. This is the one reader of keys, whether they come from a stack
/// file, a key file or the environment.
///
/// # Errors
/// A message saying what is wrong (never echoing the key).
pub fn parse_key(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("the key must be 64 hex digits 0-9, a-f".to_string());
    }
    if hex.len() != 64 {
        return Err(format!(
            "the key must be 64 hex digits (32 bytes), found {} digits",
            hex.len()
        ));
    }
    let mut key = [0u8; 32];
    for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        // Both are ASCII hex digits (checked above).
        *byte = (nibble(pair[0]) << 4) | nibble(pair[1]);
    }
    Ok(key)
}

/// The value of one ASCII hex digit (0 for anything else).
fn nibble(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => 0,
    }
}

/// Writes a key as [`parse_key`] reads it: 64 lowercase hex digits.
pub fn format_key(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sender `source`'s subkey: HChaCha20(key, "viastack-enc" ‖ source).
pub fn subkey(key: &[u8; 32], source: NodeId) -> [u8; 32] {
    let mut input = [0u8; 16];
    input[..12].copy_from_slice(b"viastack-enc");
    input[12..].copy_from_slice(&source.0.to_be_bytes());
    let out = chacha20::hchacha::<chacha20::cipher::consts::U10>(
        GenericArray::from_slice(key),
        GenericArray::from_slice(&input),
    );
    out.into()
}

/// One sender's ChaCha20-Poly1305 key (its subkey), ready to seal or open.
pub struct Cipher(LessSafeKey);

impl Cipher {
    /// The cipher of sender `source` under the group key `key`.
    pub fn new(key: &[u8; 32], source: NodeId) -> Self {
        // `UnboundKey::new` fails only for a key of the wrong length; ours is 32 bytes.
        let key = UnboundKey::new(&CHACHA20_POLY1305, &subkey(key, source))
            .unwrap_or_else(|_| unreachable!("ChaCha20-Poly1305 keys are 32 bytes"));
        Cipher(LessSafeKey::new(key))
    }
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)") // never print key material
    }
}

fn cipher(key: &[u8; 32], source: NodeId) -> Cipher {
    Cipher::new(key, source)
}

fn nonce(salt: u32, counter: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[..4].copy_from_slice(&salt.to_be_bytes());
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

/// Seals `message` in place: encrypts its bytes, appends the tag, pushes salt and counter.
pub fn seal(cipher: &Cipher, channel: ChannelId, salt: u32, counter: u64, message: &mut Message) {
    let n = nonce(salt, counter);
    let aad = channel.0.to_be_bytes();
    // Encryption fails only for messages longer than ChaCha20's 256 GiB keystream.
    if let Ok(tag) = cipher.0.seal_in_place_separate_tag(
        Nonce::assume_unique_for_key(n),
        Aad::from(aad),
        message.as_mut_slice(),
    ) {
        message.extend_from_slice(tag.as_ref());
        message.push(&n);
    }
}

/// Why a received packet was dropped (each is a counter of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Shorter than nonce and tag.
    #[error("truncated")]
    Truncated,
    /// Authentication failed.
    #[error("bad tag")]
    BadTag,
}

/// Reads the header of a received packet (salt, counter) without removing it.
///
/// # Errors
/// [`OpenError::Truncated`] when the packet cannot hold nonce and tag.
pub fn peek_header(message: &Message) -> Result<(u32, u64), OpenError> {
    if message.len() < NONCE_LEN + TAG_LEN {
        return Err(OpenError::Truncated);
    }
    let b = message.peek(NONCE_LEN).map_err(|_| OpenError::Truncated)?;
    let salt = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut c = [0u8; 8];
    c.copy_from_slice(&b[4..12]);
    Ok((salt, u64::from_be_bytes(c)))
}

/// Opens a received packet in place: authenticates and decrypts it, leaving the plaintext.
///
/// # Errors
/// [`OpenError`]; the message is then in an unspecified state (drop it).
pub fn open(cipher: &Cipher, channel: ChannelId, message: &mut Message) -> Result<(), OpenError> {
    peek_header(message)?;
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(message.pop(NONCE_LEN).map_err(|_| OpenError::Truncated)?);
    let len = message.len() - TAG_LEN;
    let aad = channel.0.to_be_bytes();
    // `open_in_place` authenticates ciphertext ‖ tag and decrypts in place.
    cipher
        .0
        .open_in_place(
            Nonce::assume_unique_for_key(n),
            Aad::from(aad),
            message.as_mut_slice(),
        )
        .map_err(|_| OpenError::BadTag)?;
    message.truncate(len);
    Ok(())
}

/// The `encrypt` layer.
#[derive(Debug, Clone)]
pub struct Encrypt {
    name: String,
    config: Config,
}

impl Encrypt {
    /// An encrypt layer named `name`.
    pub fn new(name: impl Into<String>, config: Config) -> Self {
        Encrypt {
            name: name.into(),
            config,
        }
    }
}

impl Layer for Encrypt {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// A sender whose nonces run out refuses (in theory: after 2^64 messages).
    fn provides(&self) -> Vec<EventType> {
        vec![SEND_REFUSED.id()]
    }
    /// Over a FIFO path counters only grow, so nothing falls behind the replay window; over
    /// one that reorders, a packet older than the window is dropped (`too_old`).
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: below.reliable && below.fifo,
            fifo: below.fifo,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(EncryptSession {
            config: self.config.clone(),
            own: None,
            salt: 0,
            counter: 0,
            peers: LruMap::new(self.config.max_peers),
        })
    }
}

/// What a receiver knows of one (channel, source).
struct Peer {
    salt: u32,
    retired: [Option<u32>; RETIRED_SALTS],
    window: SeqWindow,
    cipher: Cipher,
}

/// Session of [`Encrypt`]: one salt and counter for everything it sends, on every channel it
/// is bound to, and the replay state of every (channel, source) it hears.
pub struct EncryptSession {
    config: Config,
    /// This node's sending cipher (derived on first send).
    own: Option<Cipher>,
    salt: u32,
    counter: u64,
    peers: LruMap<(ChannelId, NodeId), Peer>,
}

impl std::fmt::Debug for EncryptSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptSession")
            .field("counter", &self.counter)
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl EncryptSession {
    fn send(&mut self, event: &mut Event, ctx: &mut Context<'_>) -> bool {
        if self.own.is_none() {
            self.salt = draw_epoch(ctx);
            self.own = Some(cipher(&self.config.key, ctx.node()));
        }
        if self.counter == u64::MAX {
            // No nonce is left: refuse, and tell the sender (nothing is dropped silently).
            ctx.count("exhausted");
            if let Some(&Sendable {
                dest: Dest::Node(peer),
                tag,
                ..
            }) = event.sendable_ref()
            {
                ctx.go(failure(&SEND_REFUSED, event.channel(), peer, [tag]));
            }
            return false;
        }
        let channel = event.channel();
        let (Some(own), Some(s)) = (&self.own, event.sendable_mut()) else {
            return false;
        };
        seal(own, channel, self.salt, self.counter, &mut s.message);
        self.counter += 1;
        true
    }

    fn receive(&mut self, event: &mut Event, ctx: &mut Context<'_>) -> bool {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return false;
        };
        let Ok((salt, counter)) = peek_header(&s.message) else {
            ctx.count("truncated");
            return false;
        };
        let key = (channel, s.source);
        // Cheap rejections first, from what is already known; state changes only after
        // authentication.
        if let Some(peer) = self.peers.get_mut(&key) {
            if salt == peer.salt {
                match peer.window.check(counter) {
                    Seen::Fresh => {}
                    Seen::Duplicate => {
                        ctx.count("replay");
                        return false;
                    }
                    Seen::TooOld => {
                        ctx.count("too_old");
                        return false;
                    }
                }
            } else if peer.retired.contains(&Some(salt)) {
                ctx.count("stale_salt");
                return false;
            }
            if open(&peer.cipher, channel, &mut s.message).is_err() {
                ctx.count("bad_tag");
                return false;
            }
            if salt != peer.salt {
                ctx.count("peer_restarted");
                peer.retired.rotate_right(1);
                peer.retired[0] = Some(peer.salt);
                peer.salt = salt;
                peer.window = SeqWindow::new(self.config.replay_window);
            }
            peer.window.insert(counter);
            return true;
        }
        let c = cipher(&self.config.key, s.source);
        if open(&c, channel, &mut s.message).is_err() {
            ctx.count("bad_tag");
            return false;
        }
        let mut window = SeqWindow::new(self.config.replay_window);
        window.insert(counter);
        let peer = Peer {
            salt,
            retired: [None; RETIRED_SALTS],
            window,
            cipher: c,
        };
        if self.peers.insert(key, peer).is_some() {
            ctx.count("evicted");
        }
        true
    }
}

impl Session for EncryptSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            self.peers.retain(|(c, _)| *c != channel);
            ctx.go(event);
            return;
        }
        if event.sendable_ref().is_some() {
            let ok = match event.dir() {
                Direction::Down => self.send(&mut event, ctx),
                Direction::Up => self.receive(&mut event, ctx),
            };
            if !ok {
                return;
            }
        }
        ctx.go(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_hex_and_bad_keys_are_explained() {
        let k = parse_key(&"00".repeat(31)).unwrap_err();
        assert!(k.contains("64 hex digits"), "{k}");
        assert!(k.contains("found 62 digits"), "{k}");
        assert!(parse_key(&"zz".repeat(32)).is_err());
        assert!(parse_key(&"é".repeat(32)).is_err());
        // `u8::from_str_radix` takes a sign; a key does not.
        assert!(parse_key(&"+f".repeat(32)).is_err());
        assert!(parse_key(&format!("{} {}", "ab".repeat(16), "ab".repeat(16))).is_err());
        let key = parse_key(&format!("{}fF", "01".repeat(31))).unwrap();
        assert_eq!((key[0], key[31]), (1, 0xff));
        let debug = format!("{:?}", Config::new(key));
        assert!(!debug.contains("key:"), "{debug}");
        // A key file's line: surrounding whitespace is fine.
        assert_eq!(parse_key(&format!("\n  {}\r\n", format_key(&key))), Ok(key));
        for bad in [&"ab".repeat(32)[..63], "", "\n"] {
            let e = parse_key(bad).unwrap_err();
            assert!(!e.contains("abab"), "{e}");
        }
    }

    #[test]
    fn format_key_is_what_parse_key_reads() {
        let key: [u8; 32] = core::array::from_fn(|i| (i * 37) as u8);
        let hex = format_key(&key);
        assert_eq!(hex.len(), 64);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(parse_key(&hex), Ok(key));
    }

    #[test]
    fn seal_then_open_round_trips_and_any_flip_fails() {
        let key = [7u8; 32];
        let c = cipher(&key, NodeId(3));
        let mut m = Message::from_payload(b"attack at dawn");
        seal(&c, ChannelId(1), 0xdead_beef, 5, &mut m);
        assert_eq!(m.len(), 12 + 14 + 16);
        assert_eq!(peek_header(&m), Ok((0xdead_beef, 5)));
        let wire = m.as_slice().to_vec();
        let mut ok = Message::from_wire(wire.clone());
        open(&c, ChannelId(1), &mut ok).unwrap();
        assert_eq!(ok.as_slice(), b"attack at dawn");
        for bit in 0..wire.len() * 8 {
            let mut bad = wire.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut bad = Message::from_wire(bad);
            assert_eq!(
                open(&c, ChannelId(1), &mut bad),
                Err(OpenError::BadTag),
                "bit {bit}"
            );
        }
        // Another channel, another source's subkey: refused.
        let mut moved = Message::from_wire(wire.clone());
        assert_eq!(open(&c, ChannelId(2), &mut moved), Err(OpenError::BadTag));
        let mut spoofed = Message::from_wire(wire.clone());
        assert_eq!(
            open(&cipher(&key, NodeId(4)), ChannelId(1), &mut spoofed),
            Err(OpenError::BadTag)
        );
        let mut short = Message::from_wire(wire[..27].to_vec());
        assert_eq!(
            open(&c, ChannelId(1), &mut short),
            Err(OpenError::Truncated)
        );
    }
}
