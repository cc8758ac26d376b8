//! Stack-file kinds for group communication (seed 001 §2.1): `vsync` (membership, reliable
//! group multicast, virtual synchrony), `total-order` (a sequencer above it) and
//! `causal-order` (vector clocks above it), `state-transfer` and `lwg` (light-weight groups
//! over one heavy group, and order across channels).

use std::sync::Arc;

use viastack_group::vsync::{self, Primary, Vsync};
use viastack_group::{CausalOrder, Lwg, StateTransfer, TotalOrder};
use viastack_kernel::{Duration, LayerRef};

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};

/// `vsync`: the virtual-synchrony group.
pub const VSYNC: LayerKind = LayerKind {
    name: "vsync",
    doc: "Virtual-synchrony group (seed 001 §2.1): membership with a coordinator (views with \
          ids, join by merge, leave, crash from the failure detector below — `heartbeat` — \
          excluded once a suspicion lasted `confirm`; coordinators beacon to nodes outside \
          their view and the lowest merges the others after a partition heals), reliable \
          multicast to the view with NAKs and stability-based garbage collection (at most \
          `capacity` messages per sender; beyond, `SendRefused`), and a flush at every view \
          change so members that go from one view to the next delivered the same messages in \
          it. Views go up as `View` notices. Wire: docs/WIRE.md \"Group communication\".",
    params: &[
        ParamSpec {
            name: "tick",
            kind: ParamKind::Duration,
            default: Some("\"20ms\""),
            doc: "period of status gossip, NAKs and the coordinator's checks; JGroups' STABLE \
                  and NAKACK2 xmit intervals are of this order on a LAN",
        },
        ParamSpec {
            name: "confirm",
            kind: ParamKind::Duration,
            default: Some("\"100ms\""),
            doc: "how long a suspicion must last, without an `Alive`, before the member is \
                  excluded (JGroups VERIFY_SUSPECT's timeout plays this role)",
        },
        ParamSpec {
            name: "flush_timeout",
            kind: ParamKind::Duration,
            default: Some("\"400ms\""),
            doc: "how long a coordinator waits for every member's flush answer before leaving \
                  the silent ones out; a member gives up a flush after twice this",
        },
        ParamSpec {
            name: "beacon",
            kind: ParamKind::Duration,
            default: Some("\"200ms\""),
            doc: "period of a coordinator's beacons to nodes outside its view (join and merge \
                  discovery, JGroups MERGE3's role)",
        },
        ParamSpec {
            name: "capacity",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "messages buffered per sender (unstable or ahead of delivery): bounds memory; \
                  a sender whose unstable messages reach it refuses more (a slow member)",
        },
        ParamSpec {
            name: "primary",
            kind: ParamKind::Choice(&["none", "majority"]),
            default: Some("\"none\""),
            doc: "`none`: every partition goes on; `majority`: only a view with more than half \
                  of the nodes sends and delivers (the others keep their membership current)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_vsync,
};

fn vsync_config(params: &Params) -> Result<vsync::Config, BuildError> {
    let capacity = params.get_int("capacity")?;
    let config = vsync::Config {
        tick: params.get_duration("tick")?,
        confirm: params.get_duration("confirm")?,
        flush_timeout: params.get_duration("flush_timeout")?,
        beacon: params.get_duration("beacon")?,
        capacity: usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?,
        primary: match params.get_str("primary")?.as_str() {
            "majority" => Primary::Majority,
            _ => Primary::None,
        },
    };
    if config.tick < Duration::from_micros(1) {
        return Err("`tick` must be at least 1us".into());
    }
    if config.flush_timeout <= config.tick {
        return Err(BuildError::from(format!(
            "`flush_timeout` ({:?}) must exceed `tick` ({:?})",
            config.flush_timeout, config.tick
        )));
    }
    Ok(config)
}

fn build_vsync(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let config = vsync_config(params)?;
    Ok(Arc::new(Vsync::new(name, env.node, env.nodes, config)))
}

/// `total-order`: a sequencer above `vsync`.
pub const TOTAL_ORDER: LayerKind = LayerKind {
    name: "total-order",
    doc: "Total order by a sequencer (seed 001 §1), stacked above `vsync`: the view's first \
          member orders every message with an `Order` multicast through the group; members \
          deliver in that order. At a view change the old view's messages are delivered in \
          `Order` order, then the unordered ones by (sender, number) — the same at every \
          member that goes on — and the new view's first member takes over (failover).",
    params: &[ParamSpec {
        name: "capacity",
        kind: ParamKind::Int {
            min: 1,
            max: 1 << 20,
        },
        default: Some("4096"),
        doc: "messages held waiting for their order (memory bound; beyond, dropped and \
              counted `total.held_over`)",
    }],
    one_of: &[],
    device: false,
    build: build_total,
};

fn build_total(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let capacity = params.get_int("capacity")?;
    let capacity = usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?;
    Ok(Arc::new(TotalOrder::new(name, env.node, capacity)))
}

/// `causal-order`: vector clocks above `vsync`.
pub const CAUSAL_ORDER: LayerKind = LayerKind {
    name: "causal-order",
    doc: "Causal order by vector clocks (seed 001 §1; Birman, Schiper and Stephenson), stacked \
          above `vsync`: a message carries its view and the sender's clock of deliveries, and \
          waits until everything its sender had delivered before sending it is delivered \
          here. Holds the application's messages while `vsync` flushes (`Block`), so every \
          message is stamped in the view it travels in; at a view change what depends on a \
          message no survivor holds is dropped alike at every survivor.",
    params: &[ParamSpec {
        name: "capacity",
        kind: ParamKind::Int {
            min: 1,
            max: 1 << 20,
        },
        default: Some("4096"),
        doc: "messages waiting for their predecessors, and messages held during a flush \
              (memory bound; beyond, dropped and counted, or refused with `SendRefused`)",
    }],
    one_of: &[],
    device: false,
    build: build_causal,
};

fn build_causal(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let capacity = params.get_int("capacity")?;
    let capacity = usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?;
    Ok(Arc::new(CausalOrder::new(name, env.node, capacity)))
}

/// `state-transfer`: the group's state to joining and merging members.
pub const STATE_TRANSFER: LayerKind = LayerKind {
    name: "state-transfer",
    doc: "State transfer (seed 001 §2.1), stacked above `total-order`: the state is a digest \
          of what the member delivered (count and hash chain). At each view every member \
          multicasts its digest as of the view's start, ordered with the view's messages; the \
          first in the delivery order is the view's state: members that came from another \
          view than its sender (joiners, the other side of a merge) adopt it, refolding the \
          view's messages delivered before it (`StateTransferred` notice). A `StateDigest` \
          notice goes up before every `View`.",
    params: &[ParamSpec {
        name: "capacity",
        kind: ParamKind::Int {
            min: 1,
            max: 1 << 20,
        },
        default: Some("4096"),
        doc: "messages of a view remembered (8 bytes each) until its state arrives",
    }],
    one_of: &[],
    device: false,
    build: build_state,
};

fn build_state(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let capacity = params.get_int("capacity")?;
    let capacity = usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?;
    Ok(Arc::new(StateTransfer::new(name, env.node, capacity)))
}

/// `lwg`: light-weight groups over heavy groups.
pub const LWG: LayerKind = LayerKind {
    name: "lwg",
    doc: "Light-weight groups (seed 001 §2.1, Rodrigues et al.): one channel per light group, \
          all mapped onto one heavy group (`vsync`, with `total-order` or `causal-order` if \
          wanted). Bind one `lwg` session explicitly into every light channel; it fills the \
          rest of each channel with the sessions it already shares (automatic binding). \
          Messages carry their light group's id (FNV-1a 32 of the channel name); at every \
          heavy view each member announces its light groups, and each light group gets its \
          own view (the heavy view's members that joined it) with virtual synchrony derived \
          from the heavy group's. Over a shared `total-order` the channels' messages are \
          delivered in one total order (order across channels, seed 001 §1). A channel \
          rides the heavy group of the session below `lwg` in it, so one `lwg` session can \
          serve several heavy groups; `[[scenario.move]]` (or `Channel::move_light_group`) \
          moves an open light group to another one at run time, every member with it, with \
          virtual synchrony across the move. Two channel names with one id: the second is \
          refused (`lwg.id_collision`). Wire: docs/WIRE.md \"Light-weight groups\".",
    params: &[ParamSpec {
        name: "capacity",
        kind: ParamKind::Int {
            min: 1,
            max: 1 << 20,
        },
        default: Some("4096"),
        doc: "messages held until their light view is installed (memory bound; beyond, \
              dropped and counted `lwg.held_over`)",
    }],
    one_of: &[],
    device: false,
    build: build_lwg,
};

fn build_lwg(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let capacity = params.get_int("capacity")?;
    let capacity = usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?;
    Ok(Arc::new(Lwg::new(name, env.node, capacity)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The catalog's defaults and `vsync::Config::default` are one set of values.
    #[test]
    fn vsync_defaults_are_the_configs() {
        let mut params = Params::new("vsync");
        for spec in VSYNC.params {
            params.insert(spec.name, spec.default_value().unwrap());
        }
        assert_eq!(vsync_config(&params).unwrap(), vsync::Config::default());
    }
}
