//! `conference`: seed 001's synchronised streams (§2.1, §5.1) as an application. Every
//! participant sends generated audio, video and text on the three channels of
//! `stacks/conference.toml`, whose channels share ONE failure detector and ONE `sync` session
//! (the "diamond"), and reports per sender and channel what arrived, and the audio/video skew.
//!
//! ```text
//! conference --id 0 --addr 127.0.0.1:7000 --peer 1=127.0.0.1:7001 --peer 2=127.0.0.1:7002
//! conference --id 1 --addr 127.0.0.1:7001 --peer 0=127.0.0.1:7000 --peer 2=127.0.0.1:7002
//! conference --id 2 --addr 127.0.0.1:7002 --peer 0=127.0.0.1:7000 --peer 1=127.0.0.1:7001
//! ```
//!
//! Each participant waits for the others (`--wait`), talks for `--duration` — G.711 audio
//! (160 bytes every 20 ms), 8 KiB video frames at 30 frames/s (fragmented by the stack), a
//! text line every 500 ms; every frame carries its stream, number and capture time by the
//! sender's clock ([`frame`]) — then says goodbye, waits for the others' goodbyes (`--drain`)
//! and prints a table (or, with `--json`, one JSON object on standard output). Notices print as
//! they come: a participant that leaves is suspected on audio, video and text alike, because
//! the three channels share one failure detector.

mod frame;
mod participant;
mod stats;

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use viastack::{Duration, Node};

use crate::frame::Stream;
use crate::participant::{Config, Echo, Participant, PeerReport, Report};
use crate::stats::StreamReport;

/// How long the close waits for unacknowledged text: lines sent to a participant that has
/// just left are never acknowledged, and are reported after this instead of the default 5 s.
const LINGER: Duration = Duration::from_secs(2);

#[derive(Parser)]
#[command(about = "A conference: audio, video and text between processes over one diamond stack")]
struct Args {
    /// The stack file (channels `audio`, `video` and `text`).
    #[arg(long, default_value = "stacks/conference.toml")]
    stack: PathBuf,
    #[command(flatten)]
    place: viastack_examples::Where,
    /// How long to talk.
    #[arg(long, default_value = "5s", value_parser = duration)]
    duration: Duration,
    /// Longest wait for the other participants to join.
    #[arg(long, default_value = "30s", value_parser = duration)]
    wait: Duration,
    /// Longest wait for the other participants to finish (0s: leave at once).
    #[arg(long, default_value = "5s", value_parser = duration)]
    drain: Duration,
    /// Print the report as one JSON object on standard output (live lines go to standard error).
    #[arg(long)]
    json: bool,
}

fn duration(text: &str) -> Result<Duration, String> {
    viastack::units::parse_duration(text).map_err(|e| e.to_string())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let node = Node::builder()
        .stack_file(&args.stack)
        .deployment(args.place.deployment()?)
        .linger(LINGER)
        .open()?;
    for stream in Stream::ALL {
        node.channel(stream.channel()).with_context(|| {
            format!(
                "{}: the conference needs channels audio, video and text",
                args.stack.display()
            )
        })?;
    }
    let config = Config {
        wait: args.wait,
        duration: args.duration,
        drain: args.drain,
    };
    let echo = if args.json {
        Echo::Stderr
    } else {
        Echo::Stdout
    };
    let me = node.id();
    let mut participant = Participant::new(config, echo, me, node.nodes());
    viastack::app::run(&node, &mut participant);
    let close = node.close()?;
    let mut report = participant.report(me);
    report.aborted_at_close = close.aborted;
    report.counters = close.metrics.counters;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", table(&report));
    }
    Ok(())
}

/// The report as a table, one line per (peer, channel) and one per peer for the skew.
fn table(r: &Report) -> String {
    let mut out = String::new();
    let s = &r.sent;
    let _ = writeln!(
        out,
        "\nn{} talked {:.2} s: sent {} audio, {} video, {} text frames",
        r.node,
        r.talked_ms / 1000.0,
        s.audio,
        s.video,
        s.text
    );
    let _ = writeln!(
        out,
        "{:<5} {:<8} {:>8} {:>6} {:>5} {:>12} {:>11}",
        "from", "channel", "received", "lost", "dup", "out-of-order", "offset ms"
    );
    for p in &r.peers {
        let rows: [(&str, &StreamReport); 3] =
            [("audio", &p.audio), ("video", &p.video), ("text", &p.text)];
        for (channel, st) in rows {
            let offset = st
                .median_offset_ms
                .map_or("-".to_string(), |o| format!("{o:.2}"));
            let _ = writeln!(
                out,
                "n{:<4} {:<8} {:>8} {:>6} {:>5} {:>12} {:>11}",
                p.peer, channel, st.received, st.lost, st.duplicates, st.out_of_order, offset
            );
        }
        let _ = writeln!(out, "n{:<4} {}", p.peer, peer_summary(p));
    }
    let c = |name: &str| r.counters.get(name).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "sync: {} held for playout, {} late, {} too late (dropped); {} message(s) unacknowledged at close",
        c("sync.held"),
        c("sync.late"),
        c("sync.too_late"),
        r.aborted_at_close
    );
    out
}

/// A peer's skew, announced counts and anomalies, in a line.
fn peer_summary(p: &PeerReport) -> String {
    let mut line = match p.skew {
        Some(s) => format!(
            "audio/video skew {:.2} ms (p95 {:.2} ms)",
            s.skew_ms, s.skew_p95_ms
        ),
        None => "audio/video skew -".to_string(),
    };
    match p.announced {
        Some(a) => {
            let _ = write!(
                line,
                "; it sent {} audio, {} video, {} text",
                a.audio, a.video, a.text
            );
        }
        None if p.joined => line += "; no goodbye from it (lost counted up to its last frame)",
        None => line += "; it never joined",
    }
    if p.malformed > 0 {
        let _ = write!(line, "; {} malformed", p.malformed);
    }
    line
}
