//! The JGroups lane of `bench unicast` (issue 13 §5): two JVMs running `bench/jgroups` (JGroups
//! 5.5 from Maven Central, its shipped `tcp.xml` with UNICAST3 or `tcp-new.xml` with UNICAST4,
//! every socket bound to 127.0.0.1). One JVM sends N messages from one thread with
//! `JChannel.send`, the other counts them and replies at the end; the round's time runs from
//! the first send to the reply's arrival, read by the sending JVM. The pair stays up for the
//! whole benchmark, so JGroups' JIT warms over every round and size, and rounds alternate with
//! viastack's. CPU time is both JVMs' (`/proc/PID/stat`). The JVMs are not pinned: they may use
//! both cores for their threads (JIT, GC, JGroups' bundler and delivery threads).

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};

use super::Measurement;
use crate::cpu::process_cpu;

/// The two stacks compared: lane name and the JGroups configuration it runs.
pub const STACKS: [(&str, &str); 2] = [
    ("jgroups_unicast3", "tcp.xml"),
    ("jgroups_unicast4", "tcp-new.xml"),
];

/// The Maven project: `VIASTACK_JGROUPS_DIR`, or `bench/jgroups` of the source tree.
fn project_dir() -> PathBuf {
    std::env::var_os("VIASTACK_JGROUPS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/jgroups"),
        PathBuf::from,
    )
}

fn found(program: &str) -> bool {
    Command::new(program)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The class path of the built peer, building it with Maven when needed; why not otherwise
/// (the lane is then skipped with that reason).
pub fn classpath() -> Result<String, String> {
    let dir = project_dir();
    if !dir.join("pom.xml").is_file() {
        return Err(format!("{} has no pom.xml", dir.display()));
    }
    if !found("java") {
        return Err("`java` is not installed".into());
    }
    let jar = dir.join("target/jgroups-peer.jar");
    let lib = dir.join("target/lib");
    if !lib.is_dir() || stale(&jar, &dir) {
        if !found("mvn") {
            return Err("`mvn` is not installed (needed once to build bench/jgroups)".into());
        }
        eprintln!(
            "bench unicast: building the JGroups peer (mvn package in {})",
            dir.display()
        );
        let out = Command::new("mvn")
            .args(["-q", "-B", "package"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("mvn: {e}"))?;
        if !out.status.success() || !jar.is_file() {
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            return Err(format!("mvn package failed: {}", tail.join(" / ")));
        }
    }
    Ok(format!("{}:{}/*", jar.display(), lib.display()))
}

/// Whether `jar` is missing or older than the project's sources.
fn stale(jar: &Path, dir: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(jar) else {
        return true;
    };
    let sources = [
        dir.join("pom.xml"),
        dir.join("src/main/java/viastack/bench/Peer.java"),
        // `bench group`'s member and stack.
        dir.join("src/main/java/viastack/bench/GroupPeer.java"),
        dir.join("src/main/resources/viastack-sequencer.xml"),
        dir.join("src/main/java/viastack/bench/McastPeer.java"),
    ];
    sources
        .iter()
        .any(|s| modified(s).is_none_or(|m| m > built))
}

/// One JVM of the pair, its protocol lines (those starting `viastack-bench `) read by a thread.
struct Jvm {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Jvm {
    fn start(classpath: &str, role: &str, config: &str, cluster: &str) -> anyhow::Result<Jvm> {
        let log = project_dir().join(format!("target/{cluster}-{role}.log"));
        let mut child = Command::new("java")
            .args([
                "-Djava.net.preferIPv4Stack=true",
                "-Djgroups.bind_addr=127.0.0.1",
                // Both pairs run side by side, each its own cluster: the first four ports
                // TCP takes from 7800 up.
                "-Djgroups.tcpping.initial_hosts=127.0.0.1[7800],127.0.0.1[7801],\
                 127.0.0.1[7802],127.0.0.1[7803]",
                "-cp",
                classpath,
                "viastack.bench.Peer",
                role,
                config,
                cluster,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).map_or(Stdio::null(), Stdio::from))
            .spawn()
            .context("java")?;
        let stdin = child.stdin.take().context("JVM stdin")?;
        let stdout = child.stdout.take().context("JVM stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("viastack-bench ") {
                    if tx.send(rest.to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        let mut jvm = Jvm {
            child,
            stdin,
            lines,
        };
        let ready = jvm.expect(Duration::from_secs(60))?;
        if !ready.starts_with("ready") {
            bail!(
                "JGroups {role} ({config}): {ready} (log: {})",
                log.display()
            );
        }
        Ok(jvm)
    }

    fn expect(&mut self, within: Duration) -> anyhow::Result<String> {
        self.lines
            .recv_timeout(within)
            .map_err(|_| anyhow!("the JGroups peer said nothing for {within:?}"))
    }

    fn cpu(&self) -> Option<Duration> {
        process_cpu(Some(self.child.id()))
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        // The JVM's stdout closes when it exits, which ends the reader thread's channel.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    break;
                }
            }
        }
        let _ = self.child.wait();
    }
}

/// A running pair for one JGroups stack.
pub struct Pair {
    sender: Jvm,
    // Dropped after the sender (fields drop in order): the receiver quits last.
    receiver: Jvm,
    round: u32,
}

impl Pair {
    /// Starts the receiving JVM, then the sending one, in their own cluster `cluster`, and
    /// waits until they see each other.
    pub fn start(classpath: &str, config: &str, cluster: &str) -> anyhow::Result<Pair> {
        let receiver = Jvm::start(classpath, "receiver", config, cluster)?;
        let sender = Jvm::start(classpath, "sender", config, cluster)?;
        Ok(Pair {
            sender,
            receiver,
            round: 0,
        })
    }

    /// One round: `count` messages of `size` bytes (at least 8) one way, and the reply.
    pub fn round(&mut self, size: usize, count: u64) -> anyhow::Result<Measurement> {
        self.round += 1;
        let cpu0 = (self.sender.cpu(), self.receiver.cpu());
        writeln!(self.sender.stdin, "round {} {count} {size}", self.round)?;
        self.sender.stdin.flush()?;
        let line = self.sender.expect(Duration::from_secs(180))?;
        let cpu1 = (self.sender.cpu(), self.receiver.cpu());
        let secs: f64 = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["done", r, secs] if r == self.round.to_string() => secs.parse()?,
            _ => bail!("JGroups sender: {line}"),
        };
        let cpu = match (cpu0, cpu1) {
            ((Some(s0), Some(r0)), (Some(s1), Some(r1))) => {
                Some(((s1 - s0) + (r1 - r0)).as_secs_f64())
            }
            _ => None,
        };
        Ok(Measurement {
            messages: count,
            bytes: count * size.max(8) as u64,
            secs,
            cpu_secs: cpu,
        })
    }
}
