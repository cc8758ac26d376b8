//! `viastack bench bus`: the coordination bus (seed 003 "Results"), measured beside its
//! references in one run.
//!
//! - `by_reference_vs_by_value`: the time to move a value from one tool to another through a
//!   real `viastack bus serve` process, by value (the value travels tool → bus → tool) against
//!   by reference (the bus passes a reference, the consumer fetches the value from the
//!   producer), per size; the ratio is by-value time over by-reference time (> 1: references
//!   win). Time runs from the producer's `put` to the consumer holding the decoded value.
//! - `bus_peak_rss_mb`: the bus process's peak resident set (VmHWM) in each run, so one sees
//!   whether it depends on the value's size.
//! - The same to **two receivers** (`…_two_receivers`): the script hands the value to two
//!   consumers at once; time runs from the producer's `put` to the later consumer holding it
//!   (by value the bus sends it twice; by reference both fetch it from the producer).
//! - `roundtrip_vs_tcp_echo`: evaluate/value round trips per second between the bus and one
//!   tool, over a plain TCP echo (TCP_NODELAY, like the bus) whose request and answer have the
//!   byte sizes of the bus's EVAL and VALUE frames, on the same loopback (target ≥ 0.5).
//!   Measured as `bench sp` does: the two lanes alternate within each of `--rounds` rounds
//!   (their order flips every round), so both meet the same phases of the machine's load; the
//!   ratio is of the medians over rounds, with a 95 % paired-bootstrap interval.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use serde_json::{json, Map, Value};
use viastack_bus::client::{Request, Tool, ToolConfig};

/// Options of `bench bus`.
#[derive(Args)]
pub struct BusArgs {
    /// Value sizes in bytes, comma-separated (default 1 KB, 16 KB, 64 KB, 256 KB, 1 MB,
    /// 10 MB, 50 MB, 100 MB).
    #[arg(long, value_delimiter = ',')]
    size: Vec<usize>,
    /// Transfers per size and mode (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Round trips per rate measurement.
    #[arg(long, default_value_t = 5000)]
    roundtrips: usize,
    /// Rounds of the round-trip comparison (bus and TCP echo alternated in each).
    #[arg(long, default_value_t = 9)]
    rounds: usize,
    /// Skip the two-receiver transfers.
    #[arg(long)]
    one_receiver: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// PUT chunk size of the by-reference lanes' owner (default: the client's, 256 KiB).
    #[arg(long)]
    chunk: Option<usize>,
    /// Flow-control window of the by-reference lanes' consumers (default: the client's, 4 MiB).
    #[arg(long)]
    window: Option<u32>,
}

/// The tools' transfer settings of a run (`--chunk`, `--window`).
#[derive(Clone, Copy)]
struct Flow {
    chunk: Option<usize>,
    window: Option<u32>,
}

impl Flow {
    fn apply(self, cfg: &mut ToolConfig) {
        if let Some(c) = self.chunk {
            cfg.chunk = c;
        }
        if let Some(w) = self.window {
            cfg.window = w;
        }
    }
}

const TRANSFER: &str = r#"
process Main is let P : producer, C : consumer, V : term, R : term in
  rec-connect(P?) . rec-connect(C?) .
  snd-eval(P, make(0)) . rec-value(P, V?) .
  snd-eval(C, consume(V)) . rec-value(C, R?) .
  V := none . snd-terminate(C, done) . snd-terminate(P, done) . delta
endlet
tool producer is { }
tool consumer is { }
toolbus(Main)
"#;

const TRANSFER_TWO: &str = r#"
process Main is let P : producer, V : term in
  rec-connect(P?) .
  snd-eval(P, make(0)) . rec-value(P, V?) .
  snd-msg(v(V)) . snd-msg(v(V)) . rec-msg(done) . rec-msg(done) .
  V := none . snd-terminate(P, done) . delta
endlet
process Cons is let C : consumer, V : term, R : term in
  rec-connect(C?) . rec-msg(v(V?)) . snd-eval(C, consume(V)) . rec-value(C, R?) .
  V := none . snd-msg(done) . snd-terminate(C, done)
endlet
tool producer is { }
tool consumer is { }
toolbus(Main, Cons, Cons)
"#;

const ROUNDTRIP: &str = r#"
process Main is let T : echo, K : int, X : term in
  rec-connect(T?) . K := 0 .
  (if less(K, NNN) then snd-eval(T, e(K)) . rec-value(T, X?) . K := add(K, 1) else delta fi) *
  (if less(K, NNN) then delta else snd-terminate(T, done) fi) . delta
endlet
tool echo is { }
toolbus(Main)
"#;

struct Served {
    child: Child,
    addr: String,
}

impl Served {
    fn start(script: &str, extra: &[String]) -> anyhow::Result<Served> {
        let dir = std::env::temp_dir().join(format!("viastack-bench-bus-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("bench.tb");
        std::fs::write(&path, script)?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["bus", "serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start viastack bus serve")?;
        let out = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .context("no address line")?
            .to_string();
        Ok(Served { child, addr })
    }

    /// Peak resident set of the bus process, MB (VmHWM).
    fn peak_rss_mb(&self) -> f64 {
        self.status_mb("VmHWM:")
    }

    /// Resident set of the bus process now, MB (VmRSS).
    fn rss_mb(&self) -> f64 {
        self.status_mb("VmRSS:")
    }

    fn status_mb(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One transfer of `size` bytes to `receivers` consumers (1 or 2); returns (seconds, bus
/// peak RSS MB, the path the consumers' fetches took: "memfd" — the owner's same-host
/// socket, chosen automatically —, "stream" or "none").
fn transfer(
    size: usize,
    by_reference: bool,
    receivers: usize,
    flow: Flow,
) -> anyhow::Result<(f64, f64, &'static str)> {
    let max_frame = if by_reference {
        16 << 20
    } else {
        size + (16 << 20)
    };
    // The by-reference lane sends every value by reference (threshold 0), so the ratio per
    // size shows where references start to pay: the default threshold's measurement.
    let threshold = if by_reference { 0u32 } else { u32::MAX };
    let served = Served::start(
        if receivers == 2 {
            TRANSFER_TWO
        } else {
            TRANSFER
        },
        &[
            "--threshold".into(),
            threshold.to_string(),
            "--max-frame".into(),
            max_frame.to_string(),
            // A bench is not a lease test: a 100 MB frame through a loaded bus may take
            // longer than the default 10 s.
            "--lease".into(),
            "120s".into(),
        ],
    )?;
    let start: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (a1, s1) = (served.addr.clone(), start.clone());
    let producer = thread::spawn(move || -> anyhow::Result<()> {
        let mut cfg = ToolConfig::new("producer");
        cfg.max_frame = max_frame;
        flow.apply(&mut cfg);
        let mut t = Tool::connect(&a1, cfg)?;
        loop {
            match t.next_request()? {
                Request::Eval { request, .. } => {
                    // By reference the producer makes its value in shared memory
                    // (`Tool::shared_blob`): a same-host consumer maps it, nothing is copied
                    // between the tools. By value (or without memfd) it is an ordinary `Vec`.
                    let blob = match by_reference.then(|| t.shared_blob(size, |b| b.fill(0x5a))) {
                        Some(Ok(b)) => b,
                        _ => t.arena.blob(vec![0x5au8; size]),
                    };
                    let v = t.arena.appl("data", vec![blob]);
                    if let Ok(mut s) = s1.lock() {
                        *s = Some(crate_now());
                    }
                    let r = t.put(&v);
                    t.value(request, r)?;
                }
                Request::Terminate { .. } => return Ok(()),
                _ => {}
            }
        }
    });
    let consumers: Vec<_> = (0..receivers)
        .map(|_| {
            let a2 = served.addr.clone();
            thread::spawn(move || -> anyhow::Result<(Instant, &'static str)> {
                let mut cfg = ToolConfig::new("consumer");
                cfg.max_frame = max_frame;
                flow.apply(&mut cfg);
                let mut t = Tool::connect(&a2, cfg)?;
                let mut done = None;
                loop {
                    match t.next_request()? {
                        Request::Eval {
                            request,
                            delivery,
                            term,
                        } => {
                            let v = t.resolve(&term, delivery)?;
                            done = Some(crate_now());
                            anyhow::ensure!(v.as_appl().is_some(), "no value");
                            let ok = t.arena.appl("ok", vec![]);
                            t.value(request, ok)?;
                        }
                        Request::Terminate { .. } => {
                            let path = match (t.stats.fetches, t.stats.local_fetches) {
                                (0, _) => "none",
                                (f, l) if l == f => "memfd",
                                _ => "stream",
                            };
                            return Ok((done.context("nothing consumed")?, path));
                        }
                        _ => {}
                    }
                }
            })
        })
        .collect();
    producer
        .join()
        .map_err(|_| anyhow::anyhow!("producer panicked"))??;
    let mut end = None;
    let mut path = "none";
    for c in consumers {
        let (e, p) = c
            .join()
            .map_err(|_| anyhow::anyhow!("consumer panicked"))??;
        end = Some(end.map_or(e, |x: Instant| x.max(e)));
        path = p;
    }
    let end = end.context("no consumer")?;
    let rss = served.peak_rss_mb();
    served.stop();
    let begin = start
        .lock()
        .ok()
        .and_then(|s| *s)
        .context("no start time")?;
    Ok((end.duration_since(begin).as_secs_f64(), rss, path))
}

#[allow(clippy::disallowed_methods)] // the bench driver reads the clock
fn crate_now() -> Instant {
    Instant::now()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Evaluate/value round trips per second through the bus, and the bus's resident set (MB)
/// after its first round trip and after the last (every round trip's terms are fresh: a
/// counter), which shows whether its memory stays bounded.
fn bus_rate(n: usize) -> anyhow::Result<(f64, [f64; 2])> {
    let served = Served::start(&ROUNDTRIP.replace("NNN", &n.to_string()), &[])?;
    let mut t = Tool::connect(&served.addr, ToolConfig::new("echo"))?;
    let mut first = None;
    let mut count = 0usize;
    let mut rss = [f64::NAN; 2];
    let end = loop {
        match t.next_request()? {
            Request::Eval { request, term, .. } => {
                if first.is_none() {
                    first = Some(crate_now());
                }
                count += 1;
                if count == 2 {
                    rss[0] = served.rss_mb();
                }
                t.value(request, term)?;
            }
            Request::Terminate { .. } => break crate_now(),
            _ => {}
        }
    };
    rss[1] = served.rss_mb();
    served.stop();
    let first = first.context("no evaluation")?;
    Ok((
        count.saturating_sub(1) as f64 / end.duration_since(first).as_secs_f64(),
        rss,
    ))
}

/// Round trips per second of a plain TCP exchange: `req` bytes out, `resp` bytes back.
fn tcp_rate(n: usize, req: usize, resp: usize) -> anyhow::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let server = thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; req];
        let answer = vec![1u8; resp];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(());
            }
            s.write_all(&answer)?;
        }
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let out = vec![7u8; req];
    let mut back = vec![0u8; resp];
    let t0 = crate_now();
    for _ in 0..n {
        c.write_all(&out)?;
        c.read_exact(&mut back)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(c);
    let _ = server.join();
    Ok(n as f64 / secs)
}

/// Runs the benchmark.
pub fn run(args: &BusArgs) -> anyhow::Result<()> {
    let sizes: Vec<usize> = if args.size.is_empty() {
        vec![
            1_000,
            16_000,
            64_000,
            256_000,
            1_000_000,
            10_000_000,
            50_000_000,
            100_000_000,
        ]
    } else {
        args.size.clone()
    };
    let flow = Flow {
        chunk: args.chunk,
        window: args.window,
    };
    let mut rows = Vec::new();
    let receivers: &[usize] = if args.one_receiver { &[1] } else { &[1, 2] };
    for &size in &sizes {
        let mut row = json!({ "size_bytes": size });
        for &k in receivers {
            let (mut by_val, mut by_ref, mut rss_val, mut rss_ref, mut paths) =
                (vec![], vec![], vec![], vec![], vec![]);
            for _ in 0..args.repeat.max(1) {
                let (t, r, _) = transfer(size, false, k, flow)?;
                by_val.push(t);
                rss_val.push(r);
                let (t, r, p) = transfer(size, true, k, flow)?;
                by_ref.push(t);
                rss_ref.push(r);
                paths.push(p);
            }
            // The two lanes alternate within each repeat: pairs for the ratio's interval.
            let pairs: Vec<(f64, f64)> =
                by_val.iter().copied().zip(by_ref.iter().copied()).collect();
            let ci = super::stats::ratio_of_medians_ci95(&pairs);
            let ms = |v: &[f64]| {
                v.iter()
                    .map(|x| (x * 1e4).round() / 10.0)
                    .collect::<Vec<_>>()
            };
            let sfx = if k == 2 { "_two_receivers" } else { "" };
            row[format!("by_value_ms_runs{sfx}")] = json!(ms(&by_val));
            row[format!("by_reference_ms_runs{sfx}")] = json!(ms(&by_ref));
            // How the by-reference lane's consumers fetched (same host: the owner's memfd).
            row[format!("by_reference_path{sfx}")] = json!(paths);
            let (v, r) = (median(by_val), median(by_ref));
            let (rv, rr) = (median(rss_val), median(rss_ref));
            row[format!("by_value_ms{sfx}")] = json!(v * 1e3);
            row[format!("by_reference_ms{sfx}")] = json!(r * 1e3);
            row[format!("by_reference_vs_by_value{sfx}")] = json!(v / r);
            row[format!("by_reference_vs_by_value_ci95{sfx}")] = json!(ci);
            row[format!("bus_peak_rss_mb_by_value{sfx}")] = json!(rv);
            row[format!("bus_peak_rss_mb_by_reference{sfx}")] = json!(rr);
            if !args.json {
                println!(
                    "{size:>10} B  to {k}: by value {:>9.2} ms  by reference {:>9.2} ms  ratio {:>6.2}  bus peak RSS {:>6.1} / {:>6.1} MB",
                    v * 1e3,
                    r * 1e3,
                    v / r,
                    rv,
                    rr,
                );
            }
        }
        rows.push(row);
    }
    // Round trips: the bus lane and the TCP lane alternate within each round, order flipped
    // every round; the TCP exchange has the bus frames' sizes.
    let n = args.roundtrips.max(10);
    let (req, resp) = {
        let mut a = viastack_bus::term::Arena::new();
        let k = a.int(i64::try_from(n).unwrap_or(i64::MAX) / 2);
        let term = a.appl("e", vec![k]);
        let eval = viastack_bus::wire::Frame::Eval {
            request: 1,
            delivery: 0,
            term: term.clone(),
        };
        let value = viastack_bus::wire::Frame::Value { request: 1, term };
        (eval.to_bytes().len(), value.to_bytes().len())
    };
    let mut pairs = Vec::new();
    let mut rss_rounds = Vec::new();
    for round in 0..args.rounds.max(1) {
        let ((b, rss), e) = if round % 2 == 0 {
            let b = bus_rate(n)?;
            (b, tcp_rate(n, req, resp)?)
        } else {
            let e = tcp_rate(n, req, resp)?;
            (bus_rate(n)?, e)
        };
        pairs.push((b, e));
        rss_rounds.push(rss);
    }
    let bus = median(pairs.iter().map(|p| p.0).collect());
    let tcp = median(pairs.iter().map(|p| p.1).collect());
    let ci = super::stats::ratio_of_medians_ci95(&pairs);
    let at_50mb = rows
        .iter()
        .find(|r| r["size_bytes"] == json!(50_000_000))
        .or(rows.last())
        .cloned()
        .unwrap_or(Value::Null);
    let mut out = Map::new();
    out.insert("transfers".into(), Value::Array(rows.clone()));
    out.insert(
        "by_reference_vs_by_value".into(),
        at_50mb["by_reference_vs_by_value"].clone(),
    );
    out.insert(
        "by_reference_vs_by_value_ci95".into(),
        at_50mb["by_reference_vs_by_value_ci95"].clone(),
    );
    out.insert(
        "by_reference_path".into(),
        at_50mb["by_reference_path"].clone(),
    );
    out.insert(
        "bus_peak_rss_mb".into(),
        json!(rows
            .iter()
            .flat_map(|r| {
                [
                    r["bus_peak_rss_mb_by_reference"].as_f64(),
                    r["bus_peak_rss_mb_by_reference_two_receivers"].as_f64(),
                ]
            })
            .flatten()
            .fold(0.0f64, f64::max)),
    );
    out.insert("bus_roundtrips_per_s".into(), json!(bus));
    out.insert("tcp_echo_roundtrips_per_s".into(), json!(tcp));
    out.insert(
        "by_reference_vs_by_value_two_receivers".into(),
        at_50mb["by_reference_vs_by_value_two_receivers"].clone(),
    );
    out.insert("roundtrip_vs_tcp_echo".into(), json!(bus / tcp));
    out.insert("roundtrip_vs_tcp_echo_ci95".into(), json!(ci));
    out.insert("roundtrip_rounds".into(), json!(pairs.len()));
    out.insert("roundtrip_frame_bytes".into(), json!([req, resp]));
    // The bus's resident set after the first and after the last of `n` round trips with
    // fresh terms (median over rounds): equal when its memory is bounded.
    out.insert(
        "bus_rss_mb_after_first_roundtrip".into(),
        json!(median(rss_rounds.iter().map(|r| r[0]).collect())),
    );
    out.insert(
        "bus_rss_mb_after_soak".into(),
        json!(median(rss_rounds.iter().map(|r| r[1]).collect())),
    );
    out.insert("soak_roundtrips".into(), json!(n));
    out.insert(
        "loadavg".into(),
        json!(std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()),
    );
    if args.json {
        println!("{}", Value::Object(out));
    } else {
        println!(
            "round trips ({} rounds, lanes alternated): bus {:.0}/s, TCP echo {:.0}/s ({req}/{resp} B), ratio {:.3} [95% {:.3}–{:.3}]; bus RSS {:.1} MB after 1 round trip, {:.1} MB after {n}; load {}",
            pairs.len(),
            out["bus_roundtrips_per_s"].as_f64().unwrap_or(f64::NAN),
            out["tcp_echo_roundtrips_per_s"]
                .as_f64()
                .unwrap_or(f64::NAN),
            out["roundtrip_vs_tcp_echo"].as_f64().unwrap_or(f64::NAN),
            ci[0],
            ci[1],
            out["bus_rss_mb_after_first_roundtrip"]
                .as_f64()
                .unwrap_or(f64::NAN),
            out["bus_rss_mb_after_soak"].as_f64().unwrap_or(f64::NAN),
            out["loadavg"].as_str().unwrap_or("?"),
        );
    }
    Ok(())
}
