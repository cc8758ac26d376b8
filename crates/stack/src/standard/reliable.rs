//! Stack-file kinds for reliable delivery: the checksum, the bundler, the fragmenter and
//! reliable FIFO.

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::bundle::Bundle;
use viastack_protocols::checksum::Checksum;
use viastack_protocols::fragment::{self, Fragment};
use viastack_protocols::reliable::{self, ReliableFifo};

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};

/// `checksum`: CRC32C over each datagram's upper bytes.
pub const CHECKSUM: LayerKind = LayerKind {
    name: "checksum",
    doc: "CRC32C (RFC 3720 §B.4) over the headers and payload of the layers above, in a 4-byte \
          header; a datagram whose bytes do not match is dropped and counted (`bad`). Put it \
          right above the device so no other decoder reads damaged bytes.",
    params: &[],
    one_of: &[],
    device: false,
    build: build_checksum,
};

fn build_checksum(name: &str, _params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Checksum::new(name)))
}

/// `bundle`: packs the messages queued for one destination into one datagram.
pub const BUNDLE: LayerKind = LayerKind {
    name: "bundle",
    doc: "Packs the messages a stack sends to one destination while it handles one input \
          (an application batch, a datagram, the timers due now) into one datagram of at most \
          `max_bytes`, and splits them on receipt; an idle sender's message leaves at once \
          behind a 1-byte header (no timer, no Nagle). Put it right above the device (and \
          checksum), below `reliable-fifo`, so one datagram carries many segments and ACKs. \
          A damaged bundle is dropped whole and counted, never handed up in part.",
    params: &[ParamSpec {
        name: "max_bytes",
        kind: ParamKind::Bytes,
        default: Some("1400"),
        doc: "largest bundle, its headers and those of the layers above included; 1400 keeps \
              a datagram under Ethernet's 1500-byte MTU (RFC 894); on loopback or with jumbo \
              frames up to 65507 (a UDP datagram's payload)",
    }],
    one_of: &[],
    device: false,
    build: build_bundle,
};

fn build_bundle(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let max = params.get_bytes("max_bytes").map_err(|e| e.to_string())?;
    if !(8..=65_507).contains(&max) {
        return Err(BuildError::from(format!(
            "`max_bytes` is {max}; a bundle takes 8 to 65507 bytes (a UDP datagram's payload)"
        )));
    }
    Ok(Arc::new(Bundle::new(name, max as usize)))
}

/// `fragment`: splits messages above an MTU, reassembles them within a timeout and a bound.
pub const FRAGMENT: LayerKind = LayerKind {
    name: "fragment",
    doc: "Splits messages larger than `mtu` into fragments (17-byte header) and reassembles \
          them, copying each byte once. Over a best-effort path, incomplete messages are \
          dropped after `reassembly_timeout` (`timeout`) or to keep reassembly memory under \
          `max_reassembly_bytes` (`evicted`). Over a reliable FIFO path (`reliable-fifo`, \
          reliable `sp`) nothing is dropped by time: a partial message waits for the layer \
          below to complete it or report its sender, and a message that would pass \
          `max_reassembly_bytes` is refused (`refused`) and its sender told (`SendRefused`).",
    params: &[
        ParamSpec {
            name: "mtu",
            kind: ParamKind::Bytes,
            default: Some("1400"),
            doc: "largest fragment payload; 1400 keeps a datagram with every standard header \
                  and IPv6 + UDP under Ethernet's 1500-byte MTU (RFC 894), so IP never \
                  fragments (RFC 8085 §3.2)",
        },
        ParamSpec {
            name: "reassembly_timeout",
            kind: ParamKind::Duration,
            default: Some("\"2s\""),
            doc: "how long an incomplete message is kept over a best-effort path: two initial \
                  RTOs of RFC 6298 §2.1, under IPv4's 15 s reassembly timer (RFC 791 §3.2)",
        },
        ParamSpec {
            name: "max_reassembly_bytes",
            kind: ParamKind::Bytes,
            default: Some("\"4MiB\""),
            doc: "reassembly memory per session, never exceeded (64 messages of 64 KiB)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_fragment,
};

fn build_fragment(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let size = |k: &str| -> Result<usize, String> {
        usize::try_from(params.get_bytes(k).map_err(|e| e.to_string())?)
            .map_err(|_| format!("`{k}` is too large"))
    };
    let mtu = size("mtu")?;
    if mtu == 0 {
        return Err("`mtu` must be at least 1 byte".into());
    }
    Ok(Arc::new(Fragment::new(
        name,
        fragment::Config {
            mtu,
            reassembly_timeout: params
                .get_duration("reassembly_timeout")
                .map_err(|e| e.to_string())?,
            max_reassembly_bytes: size("max_reassembly_bytes")?,
        },
    )))
}

/// `reliable-fifo`: reliable FIFO delivery per (channel, peer).
pub const RELIABLE_FIFO: LayerKind = LayerKind {
    name: "reliable-fifo",
    doc: "Reliable FIFO delivery per (channel, peer): sequence numbers, cumulative ACKs with \
          SACK blocks, NACKs on gaps, RFC 6298 retransmission timers with Karn's rule, a \
          sliding window with the receiver's advertised window, duplicate suppression. After \
          `max_retries` timeouts without progress the sender gets a `PeerUnreachable` notice \
          and the peer's pending messages are dropped (counted); a full send buffer refuses \
          with a `SendRefused` notice. Each receiving state is an incarnation: a peer that \
          restarted is detected, never handed a message twice, and the sender gets \
          `PeerRestarted` for the messages its old incarnation may have missed. Notices name \
          the messages' tags. Unicast only: broadcasts are counted and dropped.",
    params: &[
        ParamSpec {
            name: "send_buffer",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 24,
            },
            default: Some("1024"),
            doc: "messages queued or in flight per peer before new ones are refused (22 \
                  messages of 64 KiB at a 1400-byte MTU)",
        },
        ParamSpec {
            name: "send_window",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("128"),
            doc: "segments in flight per peer at most (≈ 180 KB at 1400 bytes: Linux's \
                  default TCP receive buffer, tcp_rmem, is 128 KiB)",
        },
        ParamSpec {
            name: "receive_window",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("128"),
            doc: "segments accepted beyond the cumulative ACK, advertised to the sender (as \
                  send_window)",
        },
        ParamSpec {
            name: "reorder_bytes",
            kind: ParamKind::Bytes,
            default: Some("\"4MiB\""),
            doc: "bytes buffered out of order per peer, never exceeded",
        },
        ParamSpec {
            name: "rto_initial",
            kind: ParamKind::Duration,
            default: Some("\"1s\""),
            doc: "retransmission timeout before the first RTT sample (RFC 6298 §2.1)",
        },
        ParamSpec {
            name: "rto_min",
            kind: ParamKind::Duration,
            default: Some("\"200ms\""),
            doc: "smallest retransmission timeout (Linux TCP_RTO_MIN; RFC 6298 §2.4 allows \
                  below its conservative 1 s)",
        },
        ParamSpec {
            name: "rto_max",
            kind: ParamKind::Duration,
            default: Some("\"60s\""),
            doc: "largest retransmission timeout, after backoff (RFC 6298 §2.5)",
        },
        ParamSpec {
            name: "max_retries",
            kind: ParamKind::Int { min: 1, max: 1000 },
            default: Some("15"),
            doc: "timeouts without progress before PeerUnreachable (Linux tcp_retries2; RFC \
                  1122 §4.2.3.5's R2)",
        },
        ParamSpec {
            name: "ack_every",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 16,
            },
            default: Some("2"),
            doc: "in-order segments acknowledged at once (RFC 5681 §4.2: at least every \
                  second full-sized segment)",
        },
        ParamSpec {
            name: "ack_bytes",
            kind: ParamKind::Bytes,
            default: Some("2944"),
            doc: "bytes the `ack_every` segments must also hold to be acknowledged at once: \
                  two full-sized segments (RFC 5681 §4.2; 1,472 bytes of UDP payload on a \
                  1,500-byte MTU); smaller ones wait for `ack_delay` or a DATA segment to \
                  carry the ACK, up to 8 × `ack_every` of them",
        },
        ParamSpec {
            name: "ack_delay",
            kind: ParamKind::Duration,
            default: Some("\"40ms\""),
            doc: "longest delay of an ACK (Linux TCP_DELACK_MIN; RFC 5681 §4.2: under 500 ms)",
        },
        ParamSpec {
            name: "give_up_on_suspect",
            kind: ParamKind::Bool,
            default: Some("false"),
            doc: "when a failure detector below (e.g. a shared `heartbeat`) reports `Suspect` for                   a peer on this channel, give up on it at once as after `max_retries`: its                   pending messages are reported `PeerUnreachable` and later ones start a new                   stream (seed 001 §2.1: channels that share a failure detector learn of a                   failure at the same point)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_reliable,
};

fn build_reliable(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let int = |k: &str| -> Result<i64, String> { params.get_int(k).map_err(|e| e.to_string()) };
    let u32_of = |k: &str| -> Result<u32, String> {
        u32::try_from(int(k)?).map_err(|_| format!("`{k}` is out of range"))
    };
    let config = reliable::Config {
        send_buffer: usize::try_from(int("send_buffer")?)
            .map_err(|_| "`send_buffer` is out of range".to_string())?,
        send_window: u32_of("send_window")?,
        receive_window: u32_of("receive_window")?,
        reorder_bytes: usize::try_from(
            params
                .get_bytes("reorder_bytes")
                .map_err(|e| e.to_string())?,
        )
        .map_err(|_| "`reorder_bytes` is too large".to_string())?,
        rto_initial: params
            .get_duration("rto_initial")
            .map_err(|e| e.to_string())?,
        rto_min: params.get_duration("rto_min").map_err(|e| e.to_string())?,
        rto_max: params.get_duration("rto_max").map_err(|e| e.to_string())?,
        max_retries: u32_of("max_retries")?,
        ack_every: u32_of("ack_every")?,
        ack_bytes: usize::try_from(params.get_bytes("ack_bytes").map_err(|e| e.to_string())?)
            .map_err(|_| "`ack_bytes` is too large".to_string())?,
        ack_delay: params
            .get_duration("ack_delay")
            .map_err(|e| e.to_string())?,
        give_up_on_suspect: params
            .get_bool("give_up_on_suspect")
            .map_err(|e| e.to_string())?,
    };
    if config.rto_min > config.rto_max {
        return Err("`rto_min` must not exceed `rto_max`".into());
    }
    Ok(Arc::new(ReliableFifo::new(name, config)))
}
