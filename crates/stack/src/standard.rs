//! The standard catalog: every layer kind viastack ships, as stack files see them.
//!
//! Kernel layers (`device`, `transparent`, `ghost`) and the protocol library's layers. Each
//! kind's parameter declaration here is the single source for parsing, validation,
//! `viastack check`, `viastack layers` and `docs/LAYERS.md` (DESIGN.md §6.10).

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::fifo::Fifo;

use crate::catalog::{BuildEnv, Catalog, LayerKind, Params, DEVICE};

/// `fifo`: per-sender sequence numbers, drops late and duplicate copies.
pub const FIFO: LayerKind = LayerKind {
    name: "fifo",
    doc: "Unreliable FIFO delivery: numbers each sender's messages per channel and drops \
          late and duplicate copies, so what arrives arrives once and in order. Loss is \
          tolerated, not repaired.",
    params: &[],
    device: false,
    build: build_fifo,
};

fn build_fifo(name: &str, _params: &Params, _env: &BuildEnv) -> Result<LayerRef, String> {
    Ok(Arc::new(Fifo::new(name)))
}

/// Every kind viastack ships.
pub fn standard_catalog() -> Catalog {
    let mut c = Catalog::builtin();
    for kind in [DEVICE, FIFO] {
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

    #[test]
    fn every_standard_kind_registers_and_builds_with_defaults() {
        let c = standard_catalog();
        let names: Vec<&str> = c.kinds().iter().map(|k| k.name).collect();
        assert_eq!(names, vec!["device", "fifo", "ghost", "transparent"]);
        for kind in c.kinds() {
            let params = kind.default_params().unwrap();
            let layer = (kind.build)("x", &params, &BuildEnv::default()).unwrap();
            assert_eq!(layer.name(), "x");
        }
    }
}
