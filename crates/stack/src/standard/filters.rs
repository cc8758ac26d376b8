//! Stack-file kinds for per-message filters: duplicate elimination, hop limit, fault
//! injection, compression and encryption.

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::compress::{self, Compress};
use viastack_protocols::dedup::{self, Dedup};
use viastack_protocols::encrypt::{self, Encrypt};
use viastack_protocols::fault::{self, Fault, FaultLayer, Faulty};
use viastack_protocols::ttl::Ttl;

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};
use crate::secret;

/// An integer parameter as a `usize` (the catalog's range check ran already).
fn get_usize(params: &Params, name: &str) -> Result<usize, String> {
    let v = params.get_int(name)?;
    usize::try_from(v).map_err(|_| format!("`{name}` = {v} is out of range"))
}

/// `dedup`: duplicate elimination in a bounded window.
pub const DEDUP: LayerKind = LayerKind {
    name: "dedup",
    doc: "Duplicate elimination: numbers each sender's messages per channel and destination \
          and drops copies of a message already delivered, remembering the last `window` ids \
          of each of at most `max_sources` senders. Order is not restored; a message older \
          than the window is dropped (`too_old`): deep reordering becomes loss, never a \
          duplicate.",
    params: &[
        ParamSpec {
            name: "window",
            kind: ParamKind::Int {
                min: 64,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "ids remembered per sender, rounded up to a multiple of 64 (1024: \
                  128 bytes per sender; RFC 6479 §1 argues for windows of this order)",
        },
        ParamSpec {
            name: "max_sources",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "(channel, sender) windows kept; the least recently used is evicted (counted \
                  `evicted`); 1024 × 128 B = 128 KiB at most",
        },
    ],
    one_of: &[],
    device: false,
    build: build_dedup,
};

fn build_dedup(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let config = dedup::Config {
        window: get_usize(params, "window")?,
        max_sources: get_usize(params, "max_sources")?,
    };
    Ok(Arc::new(Dedup::new(name, config)))
}

/// `ttl`: a hop limit.
pub const TTL: LayerKind = LayerKind {
    name: "ttl",
    doc: "Hop limit (seed 004's TTL component): the sender stamps each message with `ttl` \
          hops; a receiver takes one off and drops (and counts, `expired`) a message that \
          arrives with none left. Between two kernels every message makes one hop; the \
          `overlay` layer keeps its own hop limit for messages it forwards.",
    params: &[ParamSpec {
        name: "ttl",
        kind: ParamKind::Int { min: 1, max: 255 },
        default: Some("64"),
        doc: "hops a message may take (RFC 1700 \"IP Parameters\": the default IP TTL is 64)",
    }],
    one_of: &[],
    device: false,
    build: build_ttl,
};

fn build_ttl(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let ttl = params.get_int("ttl")?;
    let ttl = u8::try_from(ttl).map_err(|_| format!("`ttl` = {ttl} is not in 1..=255"))?;
    Ok(Arc::new(Ttl::new(name, ttl)))
}

const RATE_REQUIRED: ParamSpec = ParamSpec {
    name: "rate",
    kind: ParamKind::Float { min: 0.0, max: 1.0 },
    default: None,
    doc: "probability that a message suffers the fault (required: a fault layer has no \
          natural rate)",
};

const DIRECTION: ParamSpec = ParamSpec {
    name: "direction",
    kind: ParamKind::Choice(&["down", "up", "both"]),
    default: Some("\"down\""),
    doc: "which messages are exposed: those this node sends (down, like a lossy outgoing \
          link), receives (up), or both",
};

const MAX_HELD: ParamSpec = ParamSpec {
    name: "max_held",
    kind: ParamKind::Int {
        min: 1,
        max: 1 << 20,
    },
    default: Some("1024"),
    doc: "messages held at once; more are dropped and counted `overflow` (1024: the order of \
          Linux's default interface queue, txqueuelen 1000)",
};

/// `drop`: drops messages at random.
pub const DROP: LayerKind = LayerKind {
    name: "drop",
    doc: "Fault injection (seed 004's Random_Drop component): drops each message with \
          probability `rate` (counted `dropped`). Randomness from the kernel's seeded \
          generator: works on real sockets as in the simulator.",
    params: &[RATE_REQUIRED, DIRECTION],
    one_of: &[],
    device: false,
    build: build_drop,
};

/// `delay`: holds messages back.
pub const DELAY: LayerKind = LayerKind {
    name: "delay",
    doc: "Fault injection: holds each message with probability `rate` for `delay` plus a \
          uniform extra in 0..=`jitter` (counted `delayed`), released by kernel timers; a \
          jitter larger than the gap between messages reorders them.",
    params: &[
        ParamSpec {
            name: "rate",
            kind: ParamKind::Float { min: 0.0, max: 1.0 },
            default: Some("1.0"),
            doc: "probability that a message is delayed (1.0: every message, as a link's \
                  latency delays every datagram)",
        },
        ParamSpec {
            name: "delay",
            kind: ParamKind::Duration,
            default: Some("\"1ms\""),
            doc: "fixed extra delay (docs/STACK_FILES.md: a simulated link's default latency)",
        },
        ParamSpec {
            name: "jitter",
            kind: ParamKind::Duration,
            default: Some("\"0ms\""),
            doc: "largest uniform extra on top of `delay` (docs/STACK_FILES.md: a simulated \
                  link's default jitter)",
        },
        DIRECTION,
        MAX_HELD,
    ],
    one_of: &[],
    device: false,
    build: build_delay,
};

/// `duplicate`: forwards extra copies.
pub const DUPLICATE: LayerKind = LayerKind {
    name: "duplicate",
    doc: "Fault injection: forwards each message and, with probability `rate`, one copy of it \
          right after (counted `duplicated`).",
    params: &[RATE_REQUIRED, DIRECTION],
    one_of: &[],
    device: false,
    build: build_duplicate,
};

/// `corrupt`: flips bits.
pub const CORRUPT: LayerKind = LayerKind {
    name: "corrupt",
    doc: "Fault injection: flips 1-3 random bits of each message with probability `rate` \
          (counted `corrupted`), in the bytes it has where the layer sits: place it below an \
          `encrypt` or checksum layer to model a corrupting network.",
    params: &[RATE_REQUIRED, DIRECTION],
    one_of: &[],
    device: false,
    build: build_corrupt,
};

/// `reorder`: holds some messages back while others pass.
pub const REORDER: LayerKind = LayerKind {
    name: "reorder",
    doc: "Fault injection: holds each message with probability `rate` for `hold` while the \
          others pass (counted `reordered`), released by kernel timers.",
    params: &[
        RATE_REQUIRED,
        ParamSpec {
            name: "hold",
            kind: ParamKind::Duration,
            default: Some("\"5ms\""),
            doc: "how long a picked message is held back (docs/STACK_FILES.md: a simulated \
                  link's default reorder_delay)",
        },
        DIRECTION,
        MAX_HELD,
    ],
    one_of: &[],
    device: false,
    build: build_reorder,
};

fn fault_config(fault: Fault, params: &Params) -> Result<fault::Config, String> {
    let direction = params.get_str("direction")?;
    let max_held = match params.get("max_held") {
        Some(_) => get_usize(params, "max_held")?,
        None => fault::DEFAULT_MAX_HELD,
    };
    Ok(fault::Config {
        fault,
        rate: params.get_float("rate")?,
        direction: Faulty::parse(&direction)
            .ok_or_else(|| format!("unknown direction `{direction}`"))?,
        max_held,
    })
}

fn build_fault(name: &str, fault: Fault, params: &Params) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(FaultLayer::new(
        name,
        fault_config(fault, params)?,
    )))
}

fn build_drop(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    build_fault(name, Fault::Drop, params)
}

fn build_delay(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let fault = Fault::Delay {
        delay: params.get_duration("delay")?,
        jitter: params.get_duration("jitter")?,
    };
    build_fault(name, fault, params)
}

fn build_duplicate(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    build_fault(name, Fault::Duplicate, params)
}

fn build_corrupt(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    build_fault(name, Fault::Corrupt, params)
}

fn build_reorder(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let fault = Fault::Reorder {
        hold: params.get_duration("hold")?,
    };
    build_fault(name, fault, params)
}

/// `compress`: LZ4 above a threshold.
pub const COMPRESS: LayerKind = LayerKind {
    name: "compress",
    doc: "LZ4 block compression of messages of at least `threshold` bytes, marked per message \
          by a flag byte; a message that does not shrink is sent raw. Receivers refuse claimed \
          sizes above `max_size` and drop corrupt blocks (counted), never panic.",
    params: &[
        ParamSpec {
            name: "threshold",
            kind: ParamKind::Bytes,
            default: Some("256"),
            doc: "smallest message compressed (256 B: below it LZ4's per-sequence \
                  overhead leaves little to gain)",
        },
        ParamSpec {
            name: "max_size",
            kind: ParamKind::Bytes,
            default: Some("\"16MiB\""),
            doc: "largest uncompressed size a receiver accepts, the bound of its allocation \
                  per message (16 MiB)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_compress,
};

fn build_compress(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let bytes = |key: &str| -> Result<usize, String> {
        let v = params.get_bytes(key)?;
        usize::try_from(v).map_err(|_| format!("`{key}` = {v} bytes is too large"))
    };
    let config = compress::Config {
        threshold: bytes("threshold")?,
        max_size: bytes("max_size")?,
    };
    if config.max_size > u32::MAX as usize {
        return Err(BuildError::from(format!(
            "`max_size` = {} bytes: the wire carries the length in 32 bits (at most 4 GiB - 1)",
            config.max_size
        )));
    }
    Ok(Arc::new(Compress::new(name, config)))
}

/// `encrypt`: ChaCha20-Poly1305 with a pre-shared key and a replay window.
pub const ENCRYPT: LayerKind = LayerKind {
    name: "encrypt",
    doc: "Authenticated encryption (ChaCha20-Poly1305, RFC 8439) under a key shared by every \
          node, with per-sender subkeys; forged, modified (`bad_tag`) and replayed (`replay`) \
          packets are dropped and counted. The key comes from exactly one of `key` (in the \
          stack file: for tests and simulations), `key_file` or `key_env` (kept out of the \
          stack file: for real deployments; `viastack keygen` makes a key, \
          docs/APPLICATIONS.md §7 deploys it).",
    params: &[
        ParamSpec {
            name: "key",
            kind: ParamKind::Secret,
            default: None,
            doc: "the 32-byte group key as 64 hex digits, written in the stack file",
        },
        ParamSpec {
            name: "key_file",
            kind: ParamKind::Path,
            default: None,
            doc: "a file holding the key as 64 hex digits (surrounding whitespace allowed), \
                  accessible by its owner only (`chmod 600`, as OpenSSH requires of private \
                  keys)",
        },
        ParamSpec {
            name: "key_env",
            kind: ParamKind::Str,
            default: None,
            doc: "an environment variable holding the key as 64 hex digits",
        },
        ParamSpec {
            name: "replay_window",
            kind: ParamKind::Int {
                min: 64,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "counters remembered per (channel, sender), rounded up to a multiple of 64 \
                  (RFC 6347 §4.1.2.6 / RFC 4303 §3.4.3 default to 64 for one stream; a \
                  sender's counter spans all its peers, and RFC 6479 §1 recommends thousands)",
        },
        ParamSpec {
            name: "max_peers",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "(channel, sender) replay windows kept; the least recently used is evicted \
                  (counted `evicted`)",
        },
    ],
    one_of: &[KEY_SOURCES],
    device: false,
    build: build_encrypt,
};

/// Where `encrypt` may find its key; a file gives exactly one.
const KEY_SOURCES: &[&str] = &["key", "key_file", "key_env"];

fn build_encrypt(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let config = encrypt::Config {
        key: group_key(params)?,
        replay_window: get_usize(params, "replay_window")?,
        max_peers: get_usize(params, "max_peers")?,
    };
    Ok(Arc::new(Encrypt::new(name, config)))
}

/// `encrypt`'s key, from whichever of [`KEY_SOURCES`] `params` holds. Errors blame that
/// parameter and name the file or variable, never the key.
fn group_key(params: &Params) -> Result<[u8; 32], BuildError> {
    let given: Vec<&str> = KEY_SOURCES
        .iter()
        .copied()
        .filter(|p| params.get(p).is_some())
        .collect();
    // The parser lets exactly one through; hand-made parameters may hold any number.
    let [source] = given[..] else {
        return Err(format!(
            "give exactly one of `key`, `key_file`, `key_env` (found {})",
            given.len()
        )
        .into());
    };
    let blame = |message: String| BuildError::param(source, message);
    let (text, origin) = match source {
        "key" => (params.get_secret("key")?, String::new()),
        "key_file" => {
            let path = params.get_path("key_file")?;
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            refuse_inline_key(&name, "a file name").map_err(blame)?;
            let text = secret::read_file(&path).map_err(|e| blame(e.to_string()))?;
            (text, format!("key file `{}`: ", path.display()))
        }
        _ => {
            let var = params.get_str("key_env")?;
            refuse_inline_key(&var, "a variable name").map_err(blame)?;
            let text = secret::read_env(&var).map_err(|e| blame(e.to_string()))?;
            (text, format!("environment variable `{var}`: "))
        }
    };
    encrypt::parse_key(text.expose()).map_err(|e| blame(format!("{origin}{e}")))
}

/// An error when `value` (a file or variable name) is a key itself: it would be echoed by
/// every later message, and a key must not sit in the stack file under another name.
fn refuse_inline_key(value: &str, expected: &str) -> Result<(), String> {
    match encrypt::parse_key(value) {
        Ok(_) => Err(format!(
            "expected {expected}, found what looks like a key: keep the key out of the stack \
             file (`viastack keygen --out FILE`, then `key_file = \"FILE\"`)"
        )),
        Err(_) => Ok(()),
    }
}
