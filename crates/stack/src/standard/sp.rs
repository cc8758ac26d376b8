//! Stack-file kind `sp`: SP, the Simple Protocol transport (seed 002, issue 4), over a device.

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_sp::connection::MAX_BLOCK_SIZE;
use viastack_sp::layer::SpLayer;
use viastack_sp::{Config, Reliability};

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};

/// `sp`: message transport with per-connection reliability, blocks, priorities and ECHO RTT.
pub const SP: LayerKind = LayerKind {
    name: "sp",
    doc: "SP, the Simple Protocol (seed 002 §3): one SP connection per peer, messages split \
          into blocks and delivered whole and in order, reliability unreliable / \
          retransmit-on-error / checksummed (XOR parity FEC) / reliable, CONN/END/ACK/RETRANS/ECHO \
          timers; a failed connection raises PeerUnreachable, and a channel closed with messages \
          unacknowledged raises SendAborted naming them. Put it right above the device: its \
          20-byte header carries its own checksum.",
    params: &[
        ParamSpec {
            name: "reliability",
            kind: ParamKind::Choice(&[
                "unreliable",
                "retransmit-on-error",
                "checksummed",
                "reliable",
            ]),
            default: Some("\"reliable\""),
            doc: "what the connections promise (seed §3.1.6: the ST_CKS / ST_RTR flags)",
        },
        ParamSpec {
            name: "block_size",
            kind: ParamKind::Bytes,
            default: Some("64000"),
            doc: "largest block (one datagram); a message is cut into the fewest blocks of at \
                  most this size, all of one length but the last (64 KiB: 2 × 32,768), and has \
                  at most 255 blocks (PBLOCK and TBLOCK are 8 bits). 64,000 fits a UDP datagram \
                  and a 256 KiB message in 5 blocks; use 1400 where IP must not fragment \
                  (RFC 8085 §3.2)",
        },
        ParamSpec {
            name: "fec_group",
            kind: ParamKind::Int { min: 1, max: 64 },
            default: Some("4"),
            doc: "data blocks per XOR parity block in checksummed mode (k; one parity block repairs one lost block of its group)",
        },
        ParamSpec {
            name: "attempts",
            kind: ParamKind::Int { min: 1, max: 255 },
            default: Some("3"),
            doc: "tries per timer before the application is told (seed §3.1.4: \"repeated 3 \
                  times\")",
        },
        ParamSpec {
            name: "conn_timeout",
            kind: ParamKind::Duration,
            default: Some("\"200ms\""),
            doc: "CONN timer: START unanswered this long is sent again (the seed gives no value)",
        },
        ParamSpec {
            name: "end_timeout",
            kind: ParamKind::Duration,
            default: Some("\"200ms\""),
            doc: "END timer, and the passive side's linger after answering END",
        },
        ParamSpec {
            name: "ack_timeout",
            kind: ParamKind::Duration,
            default: Some("\"50ms\""),
            doc: "ACK timer: silence after a reliable message before probing (at least 4 × RTT)",
        },
        ParamSpec {
            name: "retrans_timeout",
            kind: ParamKind::Duration,
            default: Some("\"100ms\""),
            doc: "RETRANS timer: a retransmission unacknowledged this long counts as failed",
        },
        ParamSpec {
            name: "echo_interval",
            kind: ParamKind::Duration,
            default: Some("\"1s\""),
            doc: "ECHO period: RTT measurement and liveness",
        },
        ParamSpec {
            name: "reassembly_timeout",
            kind: ParamKind::Duration,
            default: Some("\"100ms\""),
            doc: "how long a non-reliable incomplete message is waited for (per NACK round)",
        },
        ParamSpec {
            name: "recv_window",
            kind: ParamKind::Bytes,
            default: Some("\"8MiB\""),
            doc: "receive window advertised in WINDOW_SIZE (24 bits: below 16 MiB)",
        },
        ParamSpec {
            name: "congestion_control",
            kind: ParamKind::Bool,
            default: Some("true"),
            doc: "keep a congestion window besides the receive window: grows with ACKs, halves \
                  on a NACK or congestion echo, drops to 2 blocks on a timeout (RFC 5681 \
                  AIMD, one reduction per window of messages)",
        },
        ParamSpec {
            name: "initial_window_blocks",
            kind: ParamKind::Int { min: 2, max: 255 },
            default: Some("10"),
            doc: "congestion window at the start, in blocks (RFC 6928: 10 segments)",
        },
        ParamSpec {
            name: "ecn",
            kind: ParamKind::Bool,
            default: Some("true"),
            doc: "announce ECN capability (CB = 1; ECT(0) in the IP header on sockets) so a \
                  congested path can mark instead of drop; marks seen are echoed (CB = 3) either way",
        },
    ],
    one_of: &[],
    device: false,
    build: build_sp,
};

fn build_sp(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let e = |e: crate::catalog::ParamError| -> String { e.into() };
    let reliability = params.get_str("reliability").map_err(e)?;
    let reliability = Reliability::from_name(&reliability)
        .ok_or_else(|| format!("unknown reliability `{reliability}`"))?;
    let block_size = usize::try_from(params.get_bytes("block_size").map_err(e)?)
        .map_err(|_| "`block_size` is too large".to_string())?;
    if block_size == 0 || block_size > MAX_BLOCK_SIZE {
        return Err(BuildError::from(format!(
            "`block_size` must be 1..={MAX_BLOCK_SIZE} bytes"
        )));
    }
    let window = params.get_bytes("recv_window").map_err(e)?;
    if window >= 1 << 24 {
        return Err("`recv_window` must be below 16 MiB (WINDOW_SIZE is 24 bits)".into());
    }
    let config = Config {
        reliability,
        block_size,
        fec_group: u8::try_from(params.get_int("fec_group").map_err(e)?).unwrap_or(4),
        attempts: u8::try_from(params.get_int("attempts").map_err(e)?).unwrap_or(3),
        conn_timeout: params.get_duration("conn_timeout").map_err(e)?,
        end_timeout: params.get_duration("end_timeout").map_err(e)?,
        ack_timeout: params.get_duration("ack_timeout").map_err(e)?,
        retrans_timeout: params.get_duration("retrans_timeout").map_err(e)?,
        echo_interval: params.get_duration("echo_interval").map_err(e)?,
        reassembly_timeout: params.get_duration("reassembly_timeout").map_err(e)?,
        recv_window: window as u32,
        congestion_control: params.get_bool("congestion_control").map_err(e)?,
        initial_window_blocks: u16::try_from(params.get_int("initial_window_blocks").map_err(e)?)
            .unwrap_or(10),
        ecn: params.get_bool("ecn").map_err(e)?,
        ..Config::default()
    };
    Ok(Arc::new(SpLayer::new(name, config)))
}
