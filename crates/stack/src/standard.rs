//! The standard catalog: every layer kind viastack ships, as stack files see them.
//!
//! Kernel layers (`device`, `transparent`, `ghost`) and the protocol library's layers. Each
//! kind's parameter declaration here is the single source for parsing, validation,
//! `viastack check`, `viastack layers` and `docs/LAYERS.md` (DESIGN.md §6.10).

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::fifo::Fifo;

use crate::catalog::{BuildEnv, BuildError, Catalog, LayerKind, Params, DEVICE};

mod coordination;
mod filters;
mod group;
mod mcast;
mod overlay;
mod reliable;
mod sp;

pub use coordination::{HEARTBEAT, SYNC};
pub use filters::{COMPRESS, CORRUPT, DEDUP, DELAY, DROP, DUPLICATE, ENCRYPT, REORDER, TTL};
pub use group::{CAUSAL_ORDER, LWG, STATE_TRANSFER, TOTAL_ORDER, VSYNC};
pub use mcast::{parse_group, DVMRP, IGMP, INTERFACE, MCAST_FORWARD, MCAST_ORDER, MCAST_RELIABLE};
pub use overlay::{MESSAGESTORE, OVERLAY};
pub use reliable::{BUNDLE, CHECKSUM, FRAGMENT, RELIABLE_FIFO};
pub use sp::SP;

/// `fifo`: per-sender sequence numbers, drops late and duplicate copies.
pub const FIFO: LayerKind = LayerKind {
    name: "fifo",
    doc: "Unreliable FIFO delivery: numbers each sender's messages per channel and drops \
          late and duplicate copies, so what arrives arrives once and in order. Loss is \
          tolerated, not repaired.",
    params: &[],
    one_of: &[],
    device: false,
    build: build_fifo,
};

fn build_fifo(name: &str, _params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Fifo::new(name)))
}

/// Every kind viastack ships.
pub fn standard_catalog() -> Catalog {
    let mut c = Catalog::builtin();
    for kind in [
        DEVICE,
        FIFO,
        CHECKSUM,
        BUNDLE,
        FRAGMENT,
        RELIABLE_FIFO,
        SP,
        HEARTBEAT,
        SYNC,
        DEDUP,
        TTL,
        DROP,
        DELAY,
        DUPLICATE,
        CORRUPT,
        REORDER,
        COMPRESS,
        ENCRYPT,
        OVERLAY,
        MESSAGESTORE,
        DVMRP,
        INTERFACE,
        VSYNC,
        TOTAL_ORDER,
        CAUSAL_ORDER,
        IGMP,
        MCAST_FORWARD,
        MCAST_RELIABLE,
        MCAST_ORDER,
        STATE_TRANSFER,
        LWG,
    ] {
        // Names are distinct and specs valid; the test below holds it.
        if let Err(e) = c.register(kind) {
            tracing::error!(error = %e, "standard layer kind refused");
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ParamValue;

    #[test]
    fn every_standard_kind_registers_and_builds_with_defaults() {
        let c = standard_catalog();
        let names: Vec<&str> = c.kinds().iter().map(|k| k.name).collect();
        assert_eq!(
            names,
            vec![
                "bundle",
                "causal-order",
                "checksum",
                "compress",
                "corrupt",
                "dedup",
                "delay",
                "device",
                "drop",
                "duplicate",
                "dvmrp",
                "encrypt",
                "fifo",
                "fragment",
                "ghost",
                "heartbeat",
                "igmp",
                "interface",
                "lwg",
                "mcast-forward",
                "mcast-order",
                "mcast-reliable",
                "messagestore",
                "overlay",
                "reliable-fifo",
                "reorder",
                "sp",
                "state-transfer",
                "sync",
                "total-order",
                "transparent",
                "ttl",
                "vsync",
            ]
        );
        for kind in c.kinds() {
            // Required parameters get a sample value (one per `one_of` group: its first); the
            // rest their defaults.
            let mut params = Params::new(kind.name);
            for spec in kind.params {
                if kind.group_of(spec.name).is_some_and(|g| g[0] != spec.name) {
                    continue;
                }
                let value = match (spec.name, spec.default_value()) {
                    // `service` may be left empty (with a `service_id` to fetch): give a spec.
                    ("service", _) => ParamValue::Paths(vec![concat!(
                        env!("CARGO_MANIFEST_DIR"),
                        "/../../specs/h2hack.scxml"
                    )
                    .into()]),
                    (_, Ok(v)) => v,
                    ("rate", Err(_)) => ParamValue::Float(0.5),
                    ("key", Err(_)) => ParamValue::Secret(crate::Secret::new("ab".repeat(32))),
                    (other, Err(e)) => panic!("{}: no sample for `{other}`: {e}", kind.name),
                };
                params.insert(spec.name, value);
            }
            let layer = (kind.build)("x", &params, &BuildEnv::default()).unwrap();
            assert_eq!(layer.name(), "x");
        }
    }
}
