//! `viastack bench sp` (issue 4 "Benchmark", seed 002 §5 redone): transfer time of one
//! message of 1 KiB … 256 KiB (doubling) over loopback, 100 transfers per size, for SP RELIABLE,
//! SP UNRELIABLE, kernel TCP and kernel UDP, all in one run.
//!
//! **Transfer time**, identical for all four: from the moment the sending thread hands the
//! message to its transport (`SpSocket::send_message`, `write_all`, the first `send_to`) to the
//! moment the receiving application holds the whole message (`recv_message` returns, the last
//! `read_exact`/`recv` completes), both read from one monotonic clock (sender and receiver are
//! threads of this process, pinned to cores 0 and 1). Transfers are serialised: the next starts
//! when the previous one arrived and the sender is idle again (SP: acknowledged), so
//! acknowledgements are outside the measured interval for every protocol alike. Connection
//! set-up is excluded (one connection per protocol and size), as are 3 warm-up transfers.
//! The sending sockets of UDP and SP are connected to their peer (`connect`,
//! `SpSocket::dedicate`), the receiving ones are not.
//! A UDP or SP UNRELIABLE message that loses a datagram is counted as lost, not timed. Each
//! protocol runs `--repeat` times per size, round-robin, and keeps its run with the lowest
//! mean (noise from other work on the machine only ever adds time).
//!
//! **Reported:** per size and protocol the mean, p50 and p99 of the kept run, and `best_p50_us`,
//! the lowest p50 of the `--repeat` runs (the median of 100 transfers is not moved by the few
//! that meet a wake-up storm or another build's burst, which the mean is). Ratios on both:
//! `sp_reliable_vs_udp` / `sp_reliable_vs_tcp` on the means, `sp_reliable_vs_udp_p50` /
//! `sp_reliable_vs_tcp_p50` on `best_p50_us`.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use serde_json::{json, Map, Value};
use viastack_sp::socket::{SpError, SpSocket};
use viastack_sp::{Config, Event, Payload, Reliability};

use super::unicast::{percentile, pin, reference::MAX_UDP};

/// Options of `viastack bench sp`.
#[derive(Args)]
pub struct SpArgs {
    /// Message sizes in bytes, comma-separated (default 1 KiB … 256 KiB, doubling).
    #[arg(long, value_delimiter = ',')]
    size: Vec<usize>,
    /// Timed transfers per protocol and size.
    #[arg(long, default_value_t = 100)]
    transfers: usize,
    /// Runs per protocol and size, round-robin; the one with the lowest mean is kept (other
    /// builds share the machine: noise only ever adds time).
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Only these protocols (for profiling one of them), comma-separated.
    #[arg(long, value_delimiter = ',', hide = true)]
    only: Vec<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a PNG chart (transfer time vs size, one line per protocol) to this file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

const WARMUP: usize = 3;
const PROTOCOLS: [&str; 4] = ["sp_reliable", "sp_unreliable", "tcp", "udp"];
/// Longest one transfer may take before it counts as lost.
const LOST_AFTER: Duration = Duration::from_millis(500);

/// Transfer times (µs) of one protocol at one size, and how many were lost.
struct Series {
    times_us: Vec<f64>,
    lost: usize,
}

impl Series {
    fn json(&self) -> Value {
        let mut t = self.times_us.clone();
        let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
        json!({
            "mean_us": mean,
            "p50_us": percentile(&mut t, 0.5),
            "p99_us": percentile(&mut t, 0.99),
            "transfers": self.times_us.len(),
            "lost": self.lost,
        })
    }
    fn mean(&self) -> f64 {
        self.times_us.iter().sum::<f64>() / self.times_us.len().max(1) as f64
    }
    fn p50(&self) -> f64 {
        percentile(&mut self.times_us.clone(), 0.5)
    }
}

/// Runs `n + WARMUP` serialised transfers: `send(i)` hands message `i` over and waits until
/// the sender is idle; the receiver thread reports each arrival's instant (None if lost).
fn timed(
    n: usize,
    done: &mpsc::Receiver<Option<Instant>>,
    mut send: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Series> {
    let mut s = Series {
        times_us: Vec::with_capacity(n),
        lost: 0,
    };
    for i in 0..n + WARMUP {
        let t0 = Instant::now();
        send()?;
        let arrived = done
            .recv_timeout(LOST_AFTER * 4)
            .context("receiver stopped")?;
        if i < WARMUP {
            continue;
        }
        match arrived {
            Some(t1) => s.times_us.push((t1 - t0).as_secs_f64() * 1e6),
            None => s.lost += 1,
        }
    }
    Ok(s)
}

fn sp(mode: Reliability, size: usize, n: usize) -> anyhow::Result<Series> {
    let config = Config {
        reliability: mode,
        ..Config::default()
    };
    let (addr_tx, addr_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let rx_config = config.clone();
    let receiver = std::thread::spawn(move || -> anyhow::Result<()> {
        pin(1);
        let mut sock = SpSocket::bind("127.0.0.1:0", rx_config, true)?;
        addr_tx.send(sock.local_addr()?)?;
        sock.accept(Some(Duration::from_secs(5)))?;
        let mut got = 0;
        while got < n + WARMUP {
            match sock.recv_message(Some(LOST_AFTER)) {
                Ok(m) => {
                    done_tx.send(Some(Instant::now()))?;
                    got += 1;
                    sock.recycle(m);
                }
                Err(SpError::Timeout) => {}
                Err(e) => return Err(e.into()),
            }
            for (_, ev) in sock.take_notices() {
                if matches!(ev, Event::Dropped { .. }) {
                    done_tx.send(None)?;
                    got += 1;
                }
            }
        }
        // Answer the sender's END.
        sock.run_for(Duration::from_millis(300))?;
        Ok(())
    });
    pin(0);
    let addr: SocketAddr = addr_rx.recv()?;
    let mut sock = SpSocket::bind("127.0.0.1:0", config, false)?;
    // Like the UDP reference's sending socket, connected to its one peer.
    sock.dedicate(addr)?;
    let h = sock.connect(addr, Duration::from_secs(5))?;
    let msg: Arc<[u8]> = vec![0x5a; size].into();
    let series = timed(n, &done_rx, || {
        sock.send_message(h, Payload::Shared(msg.clone()), 0)?;
        sock.flush(h, Duration::from_secs(5))?;
        Ok(())
    })?;
    let _ = sock.close(h, Duration::from_secs(1));
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("sp receiver panicked"))??;
    Ok(series)
}

fn tcp(size: usize, n: usize) -> anyhow::Result<Series> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (done_tx, done_rx) = mpsc::channel();
    let receiver = std::thread::spawn(move || -> anyhow::Result<()> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size];
        let mut len = [0u8; 4];
        for _ in 0..n + WARMUP {
            s.read_exact(&mut len)?;
            s.read_exact(&mut buf)?;
            done_tx.send(Some(Instant::now()))?;
        }
        Ok(())
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut msg = vec![0x5au8; size + 4];
    msg[..4].copy_from_slice(&(size as u32).to_be_bytes());
    let series = timed(n, &done_rx, || {
        s.write_all(&msg)?;
        Ok(())
    })?;
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("tcp receiver panicked"))??;
    Ok(series)
}

fn big_buffers(s: &UdpSocket) {
    let r = socket2::SockRef::from(s);
    let _ = r.set_recv_buffer_size(viastack_sp::socket::SOCKET_BUFFER);
    let _ = r.set_send_buffer_size(viastack_sp::socket::SOCKET_BUFFER);
}

fn udp(size: usize, n: usize) -> anyhow::Result<Series> {
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    big_buffers(&rx);
    rx.set_read_timeout(Some(LOST_AFTER))?;
    let addr = rx.local_addr()?;
    let pieces = size.div_ceil(MAX_UDP).max(1);
    let piece = size.div_ceil(pieces);
    let (done_tx, done_rx) = mpsc::channel();
    let receiver = std::thread::spawn(move || -> anyhow::Result<()> {
        pin(1);
        let mut buf = vec![0u8; 65_536];
        for _ in 0..n + WARMUP {
            let mut bytes = 0;
            let arrived = loop {
                match rx.recv(&mut buf) {
                    Ok(k) => {
                        bytes += k;
                        if bytes >= size {
                            break Some(Instant::now());
                        }
                    }
                    Err(_) => break None,
                }
            };
            done_tx.send(arrived)?;
        }
        Ok(())
    });
    pin(0);
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    big_buffers(&tx);
    tx.connect(addr)?;
    let msg = vec![0x5au8; size];
    let series = timed(n, &done_rx, || {
        for c in msg.chunks(piece) {
            // A full buffer drops the datagram: that is raw UDP (counted as lost).
            let _ = tx.send(c);
        }
        Ok(())
    })?;
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("udp receiver panicked"))??;
    Ok(series)
}

/// Runs the benchmark and prints the result.
pub fn run(args: &SpArgs) -> anyhow::Result<()> {
    let sizes: Vec<usize> = if args.size.is_empty() {
        (0..9).map(|i| 1024usize << i).collect()
    } else {
        args.size.clone()
    };
    let n = args.transfers.max(1);
    // Warm the allocator, page tables and sockets once, unmeasured.
    let _ = sp(Reliability::Reliable, 1024, 20);
    // One object per size, in size order (a JSON object's keys would sort as strings).
    let mut out: Vec<Value> = Vec::new();
    let mut means: Vec<[f64; 4]> = Vec::new();
    let mut p50s: Vec<[f64; 4]> = Vec::new();
    for &size in &sizes {
        let mut row = Map::new();
        let mut best: [Option<Series>; 4] = [None, None, None, None];
        let mut best_p50 = [f64::NAN; 4];
        for _ in 0..args.repeat.max(1) {
            for (i, name) in PROTOCOLS.iter().enumerate() {
                if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
                    continue;
                }
                let s = match *name {
                    "sp_reliable" => sp(Reliability::Reliable, size, n),
                    "sp_unreliable" => sp(Reliability::Unreliable, size, n),
                    "tcp" => tcp(size, n),
                    _ => udp(size, n),
                };
                if let Ok(s) = &s {
                    let p = s.p50();
                    if best_p50[i].is_nan() || p < best_p50[i] {
                        best_p50[i] = p;
                    }
                }
                match s {
                    Ok(s) if best[i].as_ref().is_none_or(|b| s.mean() < b.mean()) => {
                        best[i] = Some(s)
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("bench sp: {name} at {size} bytes failed: {e:#}"),
                }
            }
        }
        let mut m = [f64::NAN; 4];
        for (i, name) in PROTOCOLS.iter().enumerate() {
            match &best[i] {
                Some(s) => {
                    m[i] = s.mean();
                    let mut v = s.json();
                    v["best_p50_us"] = json!(best_p50[i]);
                    row.insert((*name).into(), v);
                }
                None => {
                    row.insert((*name).into(), Value::Null);
                }
            }
        }
        row.insert("sp_reliable_vs_udp".into(), json!(m[0] / m[3]));
        row.insert("sp_reliable_vs_tcp".into(), json!(m[0] / m[2]));
        let q = best_p50;
        row.insert("sp_reliable_vs_udp_p50".into(), json!(q[0] / q[3]));
        row.insert("sp_reliable_vs_tcp_p50".into(), json!(q[0] / q[2]));
        row.insert("size".into(), json!(size));
        means.push(m);
        p50s.push(q);
        out.push(Value::Object(row));
    }
    let meets = |t: &[[f64; 4]]| {
        let udp = t.iter().all(|m| m[0] / m[3] <= 1.2);
        let tcp = sizes
            .iter()
            .zip(t)
            .filter(|(s, _)| **s >= 16 * 1024)
            .all(|(_, m)| m[0] <= m[2]);
        (udp, tcp)
    };
    let (meets_udp, meets_tcp) = meets(&means);
    let (meets_udp_p50, meets_tcp_p50) = meets(&p50s);
    if let Some(path) = &args.plot {
        plot(path, &sizes, &means).with_context(|| format!("{}: cannot plot", path.display()))?;
    }
    if args.json {
        let doc = json!({
            "transfer_time": "from the sender handing the message to its transport to the receiving application holding all of it; one monotonic clock; serialised transfers; connection set-up and 3 warm-ups excluded",
            "transfers": n,
            "repeat": args.repeat.max(1),
            "sizes": out,
            "targets": {
                "sp_reliable_vs_udp_max": 1.2,
                "sp_reliable_vs_tcp_max_from_16KiB": 1.0,
                "meets_udp": meets_udp,
                "meets_tcp": meets_tcp,
                "meets_udp_p50": meets_udp_p50,
                "meets_tcp_p50": meets_tcp_p50,
            },
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    outln!(
        "transfer time, µs (mean / p50 / p99 of the run with the lowest mean; best p50 of {} runs \
         in the ratios _p50), {n} transfers, loopback",
        args.repeat.max(1)
    )?;
    outln!(
        "{:>8} {:>21} {:>21} {:>21} {:>21} {:>7} {:>7} {:>7} {:>7}",
        "bytes",
        "sp_reliable",
        "sp_unreliable",
        "tcp",
        "udp",
        "vs_udp",
        "vs_tcp",
        "udp_p50",
        "tcp_p50"
    )?;
    for (&size, row) in sizes.iter().zip(&out) {
        let cell = |name: &str| {
            row.get(name)
                .filter(|v| !v.is_null())
                .map_or("failed".to_string(), |v| {
                    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
                    format!(
                        "{:.1} / {:.1} / {:.0}",
                        f("mean_us"),
                        f("p50_us"),
                        f("p99_us")
                    )
                })
        };
        let ratio = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
        outln!(
            "{:>8} {:>21} {:>21} {:>21} {:>21} {:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            size,
            cell("sp_reliable"),
            cell("sp_unreliable"),
            cell("tcp"),
            cell("udp"),
            ratio("sp_reliable_vs_udp"),
            ratio("sp_reliable_vs_tcp"),
            ratio("sp_reliable_vs_udp_p50"),
            ratio("sp_reliable_vs_tcp_p50")
        )?;
    }
    let met = |b: bool| if b { "met" } else { "NOT met" };
    outln!(
        "targets on means: sp_reliable <= 1.2x udp at every size: {}; no slower than tcp from \
         16 KiB: {}",
        met(meets_udp),
        met(meets_tcp)
    )?;
    outln!(
        "targets on p50:   sp_reliable <= 1.2x udp at every size: {}; no slower than tcp from \
         16 KiB: {}",
        met(meets_udp_p50),
        met(meets_tcp_p50)
    )?;
    Ok(())
}

/// Colours of the chart's lines, in [`PROTOCOLS`] order (the chart has no text: it needs no
/// fonts; `bench/README.md` gives the legend).
pub const COLOURS: [(u8, u8, u8); 4] = [(200, 30, 30), (240, 150, 0), (30, 80, 200), (30, 150, 60)];

fn plot(path: &std::path::Path, sizes: &[usize], means: &[[f64; 4]]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let finite = means
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = finite.fold((f64::MAX, 0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (1.0, 10.0)
    };
    let x0 = *sizes.first().unwrap_or(&1024) as f64;
    let x1 = (*sizes.last().unwrap_or(&262_144) as f64).max(x0 * 2.0);
    let mut chart = ChartBuilder::on(&root)
        .margin(20)
        .build_cartesian_2d((x0..x1).log_scale(), (lo..hi).log_scale())?;
    // Grid lines at each size (x) and each power of ten (y), drawn by hand: no text.
    for &s in sizes {
        chart.draw_series(LineSeries::new(
            [(s as f64, lo), (s as f64, hi)],
            RGBColor(225, 225, 225),
        ))?;
    }
    let mut y = 10f64.powf(lo.log10().floor());
    while y <= hi {
        if y >= lo {
            chart.draw_series(LineSeries::new([(x0, y), (x1, y)], RGBColor(225, 225, 225)))?;
        }
        y *= 10.0;
    }
    for (i, (r, g, b)) in COLOURS.into_iter().enumerate() {
        let points: Vec<(f64, f64)> = sizes
            .iter()
            .zip(means)
            .filter(|(_, m)| m[i].is_finite() && m[i] > 0.0)
            .map(|(s, m)| (*s as f64, m[i]))
            .collect();
        let colour = RGBColor(r, g, b);
        chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(3)))?;
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, colour.filled())),
        )?;
    }
    root.present()?;
    Ok(())
}
