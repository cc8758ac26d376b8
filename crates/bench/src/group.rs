//! `viastack bench group` (issue 18 "Figures"; seed 001 §2.1, the virtual-synchrony group with
//! total order): total-order multicast of 1000-byte messages among 3 members on loopback,
//! viastack (`vsync` + `total-order` over UDP, three `viastack group peer` processes) against
//! JGroups 5.5 (`bench/jgroups`: three `GroupPeer` JVMs on its `viastack-sequencer.xml`, tcp.xml with
//! SEQUENCER, loopback TCP), in the same run.
//!
//! - **Throughput**: in a round every member multicasts N messages at once; a member's round
//!   time runs from the round's command (or its first delivery of the round) to its last
//!   delivery of the round (3 N messages). The round's figure is 3 N / the slowest member's
//!   time: messages per second delivered at every member. Every member also reports a
//!   fingerprint of its delivery order; they must agree (total order), else the bench fails.
//!   The lanes alternate round by round (which goes first alternates too) after a warm-up round
//!   each (JIT); the report gives medians and the ratio `total_order_vs_jgroups` with a 95 %
//!   paired-bootstrap interval. During a lane's round the other lane's processes are stopped
//!   ([`super::pause`]; `--no-pause` leaves them running): on two cores three idle JVMs took
//!   half the machine from viastack's rounds. The report gives the CPU the idle lane used during
//!   each round and the views installed outside a crash (a paused lane's failure detector
//!   must not have excluded anyone).
//! - **View change after a crash**: the last member is killed (SIGKILL); the time from the
//!   kill to the moment both survivors report a view of two (detection by the failure
//!   detector, confirmation, flush and installation), p50 and max over the crashes; then the
//!   member is restarted and the group of three formed again. Both lanes use the same
//!   failure-detector times: heartbeats every `--heartbeat`, a suspicion after `--suspect` of
//!   silence, confirmed after `--confirm` (JGroups: FD_ALL3 interval/timeout and
//!   VERIFY_SUSPECT2 timeout; FD_SOCK2 left out, as viastack's lane has no TCP connection
//!   whose closing would tell).
//! - **Light-weight groups** (10 LWGs over one heavy group against 10 heavy groups), in the
//!   simulator: `"lwg"` in the report, see [`super::group_lwg`].
//!
//! Without `java` or `mvn` the JGroups lane is skipped and the report says why.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use serde_json::{json, Value};

use super::machine::Machine;
use super::pause::{LaneCpu, Paused};
use super::stats::{median, percentile, ratio_of_medians_ci95};
use super::unicast::jgroups;

/// Options of `bench group`.
#[derive(Args)]
pub struct GroupArgs {
    /// Messages each member multicasts per round.
    #[arg(long, default_value_t = 10_000)]
    messages: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1000)]
    size: usize,
    /// Measured rounds per lane (after one warm-up round).
    #[arg(long, default_value_t = 7)]
    repeat: usize,
    /// Crashes per lane for the view-change latency.
    #[arg(long, default_value_t = 5)]
    crashes: usize,
    /// Heartbeat period of both failure detectors.
    #[arg(long, value_parser = crate::duration_arg, default_value = "50ms")]
    heartbeat: viastack_kernel::Duration,
    /// Silence after which both failure detectors suspect a member.
    #[arg(long, value_parser = crate::duration_arg, default_value = "500ms")]
    suspect: viastack_kernel::Duration,
    /// How long a suspicion is confirmed before the member is excluded.
    #[arg(long, value_parser = crate::duration_arg, default_value = "200ms")]
    confirm: viastack_kernel::Duration,
    /// A quick look: 2,000 messages, 2 rounds, 1 crash.
    #[arg(long)]
    quick: bool,
    /// Leave the JGroups lane out.
    #[arg(long)]
    no_jgroups: bool,
    /// Leave the idle lane's processes running during the other lane's rounds (by default
    /// they are stopped with SIGSTOP for the round: idle JVMs take CPU from the measured lane).
    #[arg(long)]
    no_pause: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// A stack file for the viastack lane instead of the built-in one (`viastack group
    /// peer --stack`): e.g. a variant without bundling, for a before/after comparison.
    #[arg(long)]
    stack: Option<std::path::PathBuf>,
    /// Only the light-weight-group figure (simulated; no processes, no JGroups).
    #[arg(long)]
    lwg_only: bool,
}

/// How long a lane resumed from a pause runs before its round is measured.
const SETTLE: Duration = Duration::from_millis(300);

/// Members of the group in both lanes.
const MEMBERS: usize = 3;

/// One member process: its protocol lines (those starting `viastack-bench `) read by a thread.
struct Member {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<(Instant, String)>,
    /// `view` lines skipped while waiting for something else: views installed outside a crash.
    stray_views: u32,
}

impl Member {
    fn start(mut cmd: Command, what: &str) -> anyhow::Result<Member> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("viastack-bench ") {
                    if tx.send((Instant::now(), rest.to_string())).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Member {
            child,
            stdin,
            lines,
            stray_views: 0,
        })
    }

    fn say(&mut self, line: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// The next line starting with `word`, skipping others; its arrival time and words.
    fn expect(&mut self, word: &str, within: Duration) -> anyhow::Result<(Instant, Vec<String>)> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = self
                .lines
                .recv_timeout(left)
                .map_err(|_| anyhow!("a member said no `{word}` within {within:?}"))?;
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            if words.first().map(String::as_str) == Some("error") {
                bail!("a member: {line}");
            }
            match words.first().map(String::as_str) {
                Some(w) if w == word => return Ok((at, words)),
                Some("view") => self.stray_views += 1,
                _ => {}
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.say("quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a lane starts member `i`.
type Spawn = Box<dyn Fn(usize) -> Command>;

/// A group of three member processes.
struct Lane {
    name: &'static str,
    spawn: Spawn,
    members: Vec<Member>,
    round: u32,
    /// How long forming a group may take (a JVM starts slowly).
    form: Duration,
}

impl Lane {
    /// The member processes' ids.
    fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.child.id()).collect()
    }

    /// Views the members installed outside a crash (a disturbance of the measured rounds).
    fn stray_views(&self) -> u32 {
        self.members.iter().map(|m| m.stray_views).sum()
    }

    fn start(name: &'static str, spawn: Spawn, form: Duration) -> anyhow::Result<Lane> {
        let mut members = Vec::new();
        for i in 0..MEMBERS {
            members.push(Member::start(spawn(i), name)?);
        }
        for m in &mut members {
            m.expect("ready", form)
                .with_context(|| format!("{name}: forming the group"))?;
        }
        Ok(Lane {
            name,
            spawn,
            members,
            round: 0,
            form,
        })
    }

    /// One round: every member multicasts `count` messages; messages/s delivered at every
    /// member.
    fn round(&mut self, count: u64, size: usize) -> anyhow::Result<f64> {
        self.round += 1;
        let r = self.round;
        for m in &mut self.members {
            m.say(&format!("round {r} {count} {size}"))?;
        }
        let mut slowest: f64 = 0.0;
        let mut hashes = Vec::new();
        for m in &mut self.members {
            let (_, w) = m
                .expect("done", Duration::from_secs(300))
                .with_context(|| format!("{}: round {r}", self.name))?;
            if w.len() != 4 || w[1] != r.to_string() {
                bail!("{}: unexpected answer {w:?}", self.name);
            }
            slowest = slowest.max(w[2].parse::<f64>()?);
            hashes.push(w[3].clone());
        }
        if hashes.windows(2).any(|h| h[0] != h[1]) {
            bail!(
                "{}: the members delivered round {r} in different orders ({hashes:?})",
                self.name
            );
        }
        Ok((count * MEMBERS as u64) as f64 / slowest)
    }

    /// Kills the last member; the time until both survivors installed a view of two. Then
    /// restarts it and waits for the group of three.
    fn crash(&mut self) -> anyhow::Result<f64> {
        let mut victim = self.members.pop().context("a member")?;
        let t0 = Instant::now();
        victim.child.kill()?;
        let _ = victim.child.wait();
        let mut worst = Duration::ZERO;
        for m in &mut self.members {
            loop {
                let (at, w) = m.expect("view", Duration::from_secs(120))?;
                if w.get(1).map(String::as_str) == Some(&(MEMBERS - 1).to_string()) {
                    worst = worst.max(at.saturating_duration_since(t0));
                    break;
                }
            }
        }
        drop(victim);
        let mut back = Member::start((self.spawn)(MEMBERS - 1), self.name)?;
        back.expect("ready", self.form)
            .with_context(|| format!("{}: the restarted member joining", self.name))?;
        self.members.push(back);
        Ok(worst.as_secs_f64() * 1e3)
    }
}

/// `n` consecutive free UDP ports on loopback (free a moment ago).
fn free_udp_ports(n: u16) -> anyhow::Result<u16> {
    for _ in 0..50 {
        let base = UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port();
        if base > 65535 - n {
            continue;
        }
        let all: Result<Vec<UdpSocket>, _> = (0..n)
            .map(|i| UdpSocket::bind(("127.0.0.1", base + i)))
            .collect();
        if all.is_ok() {
            return Ok(base);
        }
    }
    bail!("no {n} consecutive free UDP ports")
}

/// A free TCP port on loopback (free a moment ago) for the JGroups members' first port.
fn free_tcp_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ms(d: viastack_kernel::Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn viastack_lane(args: &GroupArgs) -> anyhow::Result<Lane> {
    let exe = std::env::current_exe().context("this binary")?;
    let base = free_udp_ports(MEMBERS as u16)?;
    let (hb, sus, conf) = (ms(args.heartbeat), ms(args.suspect), ms(args.confirm));
    let name = format!("bench-{}", std::process::id());
    let stack = args.stack.clone();
    let spawn: Spawn = Box::new(move |i| {
        let mut c = Command::new(&exe);
        c.args(["group", "peer", &name, "--members"])
            .arg(MEMBERS.to_string())
            .args(["--port", &base.to_string(), "--id", &i.to_string()])
            .args(["--heartbeat", &format!("{hb}ms")])
            .args(["--suspect", &format!("{sus}ms")])
            .args(["--confirm", &format!("{conf}ms")]);
        if let Some(path) = &stack {
            c.arg("--stack").arg(path);
        }
        c
    });
    Lane::start("viastack", spawn, Duration::from_secs(30))
}

fn jgroups_lane(args: &GroupArgs, classpath: &str) -> anyhow::Result<Lane> {
    let port = free_tcp_port()?;
    let cluster = format!("viastack-group-{}", std::process::id());
    let (hb, sus, conf) = (ms(args.heartbeat), ms(args.suspect), ms(args.confirm));
    let classpath = classpath.to_string();
    let spawn: Spawn = Box::new(move |i| {
        let mut c = Command::new("java");
        c.args([
            "-Djava.net.preferIPv4Stack=true",
            "-Djgroups.bind_addr=127.0.0.1",
        ])
        .arg(format!("-Dviastack.bind_port={port}"))
        .arg(format!("-Djgroups.tcpping.initial_hosts=127.0.0.1[{port}]"))
        .arg("-Djgroups.tcp.port_range=10")
        .arg(format!("-Dviastack.fd.interval={hb}"))
        .arg(format!("-Dviastack.fd.timeout={sus}"))
        .arg(format!("-Dviastack.fd.confirm={conf}"))
        .args([
            "-cp",
            &classpath,
            "viastack.bench.GroupPeer",
            "viastack-sequencer.xml",
        ])
        .arg(&cluster)
        .arg(MEMBERS.to_string())
        .arg(i.to_string());
        c
    });
    Lane::start("jgroups", spawn, Duration::from_secs(120))
}

/// One measured round of `lane` with the other lane's processes `other` stopped for its length
/// when `pause`: the rate and the CPU seconds `other` used meanwhile.
fn measured_round(
    lane: &mut Lane,
    other: Vec<u32>,
    pause: bool,
    messages: u64,
    size: usize,
) -> anyhow::Result<(f64, f64)> {
    let paused = pause.then(|| Paused::stop(other.clone()));
    if pause {
        // `lane` was stopped during the other lane's round: let its timers, heartbeats and
        // acknowledgements catch up before it is measured.
        std::thread::sleep(SETTLE);
    }
    let idle = LaneCpu::start(other);
    let rate = lane.round(messages, size)?;
    let used = idle.used();
    drop(paused);
    Ok((rate, used))
}

fn summary(samples: &[f64]) -> Value {
    let mut s = samples.to_vec();
    json!({
        "p50": percentile(&mut s, 0.5),
        "max": s.iter().copied().fold(f64::NAN, f64::max),
        "samples": samples,
    })
}

/// Runs `bench group`.
pub fn run(args: &GroupArgs) -> anyhow::Result<()> {
    if args.lwg_only {
        let load_before = Machine::current().json();
        let lwg = super::group_lwg::figure(args.quick)?;
        let doc = json!({
            "lwg": lwg,
            "machine_before": load_before,
            "machine_after": Machine::current().json(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let (messages, repeat, crashes) = if args.quick {
        (
            args.messages.min(2000),
            args.repeat.min(2),
            args.crashes.min(1),
        )
    } else {
        (args.messages, args.repeat, args.crashes)
    };
    let load_before = Machine::current().json();
    let mut vs = viastack_lane(args)?;
    let mut jg = None;
    let mut skipped = None;
    if args.no_jgroups {
        skipped = Some("--no-jgroups".to_string());
    } else {
        match jgroups::classpath() {
            Ok(cp) => jg = Some(jgroups_lane(args, &cp)?),
            Err(why) => {
                eprintln!("bench group: the JGroups lane is skipped: {why}");
                skipped = Some(why);
            }
        }
    }
    // Warm-up rounds (JIT, buffers), not counted.
    vs.round(messages, args.size)?;
    if let Some(j) = jg.as_mut() {
        j.round(messages, args.size)?;
    }
    let (mut v_rates, mut j_rates) = (Vec::new(), Vec::new());
    // CPU seconds the idle lane used during each of the other lane's rounds.
    let (mut v_idle_cpu, mut j_idle_cpu) = (Vec::new(), Vec::new());
    let pause = !args.no_pause;
    for k in 0..repeat {
        // The lanes alternate which goes first.
        for lane in if k % 2 == 0 { [0, 1] } else { [1, 0] } {
            match (lane, jg.as_mut()) {
                (0, _) => {
                    let other = jg.as_ref().map(Lane::pids).unwrap_or_default();
                    let (rate, idle) = measured_round(&mut vs, other, pause, messages, args.size)?;
                    v_rates.push(rate);
                    j_idle_cpu.push(idle);
                }
                (_, Some(j)) => {
                    let (rate, idle) = measured_round(j, vs.pids(), pause, messages, args.size)?;
                    j_rates.push(rate);
                    v_idle_cpu.push(idle);
                }
                _ => {}
            }
        }
        if !args.json {
            eprintln!(
                "bench group: round: viastack {:.0} msg/s{}",
                v_rates.last().copied().unwrap_or(f64::NAN),
                j_rates
                    .last()
                    .map(|r| format!(", jgroups {r:.0} msg/s"))
                    .unwrap_or_default()
            );
        }
    }
    let stray_views = (
        vs.stray_views(),
        jg.as_ref().map(Lane::stray_views).unwrap_or(0),
    );
    let (mut v_crash, mut j_crash) = (Vec::new(), Vec::new());
    for _ in 0..crashes {
        v_crash.push(vs.crash()?);
        if let Some(j) = jg.as_mut() {
            j_crash.push(j.crash()?);
        }
    }
    drop(vs);
    drop(jg);

    let v_med = median(&v_rates);
    let pairs: Vec<(f64, f64)> = v_rates
        .iter()
        .copied()
        .zip(j_rates.iter().copied())
        .collect();
    let (ratio, ci) = if j_rates.is_empty() {
        (Value::Null, Value::Null)
    } else {
        (
            json!(v_med / median(&j_rates)),
            json!(ratio_of_medians_ci95(&pairs)),
        )
    };
    let lane = |rates: &[f64]| {
        let mut s = rates.to_vec();
        json!({
            "msgs_per_s_per_member": median(rates),
            "min": percentile(&mut s, 0.0),
            "max": percentile(&mut s, 1.0),
            "rounds": rates,
        })
    };
    let lwg = super::group_lwg::figure(args.quick)?;
    let doc = json!({
        "members": MEMBERS,
        "size": args.size,
        "messages_per_member_per_round": messages,
        "rounds": repeat,
        "quick": args.quick,
        "stack": args.stack.as_ref().map(|p| p.display().to_string()),
        "viastack": lane(&v_rates),
        "jgroups": if j_rates.is_empty() { Value::Null } else { lane(&j_rates) },
        "jgroups_skipped": skipped,
        "total_order_vs_jgroups": ratio,
        "total_order_vs_jgroups_ci95": ci,
        "idle_lane": {
            "paused": pause && !j_rates.is_empty(),
            "what": "CPU seconds the other lane's processes used during a lane's round (0 when paused with SIGSTOP)",
            "jgroups_cpu_s_during_viastack_rounds": j_idle_cpu,
            "viastack_cpu_s_during_jgroups_rounds": v_idle_cpu,
        },
        "views_installed_during_rounds": {
            "viastack": stray_views.0,
            "jgroups": stray_views.1,
        },
        "failure_detector": {
            "heartbeat_ms": ms(args.heartbeat),
            "suspect_ms": ms(args.suspect),
            "confirm_ms": ms(args.confirm),
        },
        "view_change_after_crash_ms": {
            "viastack": summary(&v_crash),
            "jgroups": if j_crash.is_empty() { Value::Null } else { summary(&j_crash) },
        },
        // Issue 18's third figure: 10 light-weight groups over one heavy group against 10
        // heavy groups, in the simulator (bench/group_lwg.rs).
        "lwg": lwg,
        "machine_before": load_before,
        "machine_after": Machine::current().json(),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "total-order multicast, {MEMBERS} members, {} B: viastack {:.0} msg/s per member",
        args.size, v_med
    );
    if let Some(r) = doc["total_order_vs_jgroups"].as_f64() {
        println!(
            "JGroups (tcp.xml + SEQUENCER) {:.0} msg/s per member; total_order_vs_jgroups {r:.2} \
             (95 % interval {})",
            median(&j_rates),
            doc["total_order_vs_jgroups_ci95"]
        );
    }
    println!(
        "view change after a crash: viastack p50 {:.0} ms, max {:.0} ms{}",
        doc["view_change_after_crash_ms"]["viastack"]["p50"]
            .as_f64()
            .unwrap_or(f64::NAN),
        doc["view_change_after_crash_ms"]["viastack"]["max"]
            .as_f64()
            .unwrap_or(f64::NAN),
        match doc["view_change_after_crash_ms"]["jgroups"]["p50"].as_f64() {
            Some(p) => format!(
                "; JGroups p50 {p:.0} ms, max {:.0} ms",
                doc["view_change_after_crash_ms"]["jgroups"]["max"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
            ),
            None => String::new(),
        }
    );
    println!(
        "10 light-weight groups over 1 heavy group vs 10 heavy groups (simulated): {:.0} vs \
         {:.0} msg/s of simulation, control datagrams per view change {} vs {}",
        doc["lwg"]["light_10_over_1_heavy"]["msgs_delivered_per_wall_s"]
            .as_f64()
            .unwrap_or(f64::NAN),
        doc["lwg"]["heavy_10"]["msgs_delivered_per_wall_s"]
            .as_f64()
            .unwrap_or(f64::NAN),
        doc["lwg"]["light_10_over_1_heavy"]["control_datagrams_per_view_change"],
        doc["lwg"]["heavy_10"]["control_datagrams_per_view_change"],
    );
    Ok(())
}
