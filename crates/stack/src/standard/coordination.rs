//! Stack-file kinds for multi-channel coordination (seed 001 §2.1, §5.1): the shared
//! heartbeat failure detector and the intermedia synchronisation layer.

use std::sync::Arc;

use viastack_kernel::{Duration, LayerRef};
use viastack_protocols::heartbeat::{self, Heartbeat};
use viastack_protocols::sync::{self, Sync};

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};

/// `heartbeat`: the shared heartbeat failure detector.
pub const HEARTBEAT: LayerKind = LayerKind {
    name: "heartbeat",
    doc: "Heartbeat failure detector, meant to be one session shared by several channels \
          (seed 001 §2.1 Figure 1, the diamond): heartbeats every `interval` to every other \
          node down the first bound channel; a peer silent for `timeout` is suspected; a node \
          whose own tick comes late (it was stopped or starved of CPU) does not count that \
          stall as its peers' silence. \
          `Suspect` and `Alive` notices go up EVERY bound channel, in the same order on each. \
          Prefixes every data packet with a 1-byte kind (docs/WIRE.md).",
    params: &[
        ParamSpec {
            name: "interval",
            kind: ParamKind::Duration,
            default: Some("\"100ms\""),
            doc: "time between heartbeats to each peer; 10 per second per peer bounds detection \
                  (timeout + interval = 600 ms by default) below the 1 s minimum RTO of RFC 6298 \
                  §2.4, so a crash is reported before a reliable layer's retransmissions back off",
        },
        ParamSpec {
            name: "timeout",
            kind: ParamKind::Duration,
            default: Some("\"500ms\""),
            doc: "silence after which a peer is suspected; must exceed `interval`. 5 intervals \
                  tolerate 4 heartbeats lost in a row (at 10% loss a false suspicion needs a \
                  1-in-10^4 run per window: the accuracy/speed trade-off of Chen, Toueg and \
                  Aguilera, IEEE ToC 51(5), 2002)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_heartbeat,
};

fn build_heartbeat(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let config = heartbeat::Config {
        interval: params.get_duration("interval")?,
        timeout: params.get_duration("timeout")?,
    };
    if config.interval < Duration::from_micros(1) {
        return Err("`interval` must be at least 1us".into());
    }
    if config.timeout <= config.interval {
        return Err(BuildError::from(format!(
            "`timeout` ({:?}) must exceed `interval` ({:?}), or every peer is suspected \
             between two heartbeats",
            config.timeout, config.interval
        )));
    }
    Ok(Arc::new(Heartbeat::new(name, env.node, env.nodes, config)))
}

/// `sync`: the intermedia synchronisation layer.
pub const SYNC: LayerKind = LayerKind {
    name: "sync",
    doc: "Intermedia synchronisation (seed 001 §2.1, §5.1), one session shared by the media \
          channels: stamps each message with the sender's presentation time (12-byte header, \
          docs/WIRE.md) and releases the media of all its channels at presentation time + a \
          fixed offset per sender, so audio and video of one sender are presented within \
          `max_skew` of each other; media later than that are dropped and counted. Do not bind \
          it to a reliable channel. Automatic binding: in a channel that binds it, it fills \
          every empty slot whose layer it already shares a channel with (its failure detector, \
          its device) with that same session, so `bind = { sync = \"s\" }` is enough.",
    params: &[
        ParamSpec {
            name: "playout_delay",
            kind: ParamKind::Duration,
            default: Some("\"100ms\""),
            doc: "how long on-time media wait beyond the first message's transit, absorbing \
                  jitter; 100 ms keeps the mouth-to-ear budget under the 150 ms of ITU-T G.114 \
                  §3 for interactive use, leaving 50 ms for capture and the network",
        },
        ParamSpec {
            name: "max_skew",
            kind: ParamKind::Duration,
            default: Some("\"80ms\""),
            doc: "how late after its due time a message may still be presented: the bound on \
                  audio/video skew. ±80 ms is the in-sync region of Steinmetz, IEEE JSAC 14(1), \
                  1996; ITU-R BT.1359-1 puts detectability at +45/−125 ms",
        },
        ParamSpec {
            name: "capacity",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("4096"),
            doc: "most messages held at once (memory bound; more are dropped and counted): 4096 \
                  is 100 ms of 40,000 messages/s, far above audio (50/s) plus fragmented video",
        },
    ],
    one_of: &[],
    device: false,
    build: build_sync,
};

fn build_sync(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let capacity = params.get_int("capacity")?;
    let config = sync::Config {
        playout_delay: params.get_duration("playout_delay")?,
        max_skew: params.get_duration("max_skew")?,
        capacity: usize::try_from(capacity).map_err(|_| format!("capacity {capacity}"))?,
    };
    Ok(Arc::new(Sync::new(name, config)))
}
