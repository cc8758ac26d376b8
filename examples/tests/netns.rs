//! The examples across two hosts: two network namespaces joined by a veth pair, each with its
//! own addresses (IPv4 and IPv6), the link limited in rate by a token bucket (`tc tbf`) and
//! losing datagrams at random (an nftables `numgen` rule on each host's output) — so nothing
//! can lean on loopback: not the addresses, not the lossless path. (`tc netem` would add
//! delay, but this machine's kernel has no `sch_netem`; rate limiting and loss need none.)
//!
//! It needs root and the `ip`, `tc` and `nft` tools (`scripts/setup.sh`, run by the test
//! command, installs iproute2 and nftables). Without them the test says so and passes, unless
//! `VIASTACK_REQUIRE_NETNS` is set (as `.ci/run` does when it runs as root).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Two namespaces `<name>a` and `<name>b` joined by a veth pair; removed on drop.
struct Hosts {
    a: String,
    b: String,
}

/// The pair's addresses: host a is .1 / ::1, host b is .2 / ::2.
const NET4: &str = "10.77.0";
const NET6: &str = "fd77::";

/// Runs `ip`/`tc` with `args`; panics with its output if it fails.
fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} cannot run ({e}): install iproute2"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    /// Two hosts whose link carries at most `rate` (a `tc` rate, e.g. "50mbit") and loses
    /// `loss_percent` % of the datagrams each host sends; `None` (and a note) where
    /// namespaces cannot be made.
    fn up(rate: &str, loss_percent: u32) -> Option<Hosts> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tool_runs = |t: &str| {
            Command::new(t)
                .arg(if t == "nft" { "-v" } else { "-V" })
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if let Some(t) = ["ip", "tc", "nft"].into_iter().find(|t| !tool_runs(t)) {
            skip(&format!(
                "`{t}` is not installed (scripts/setup.sh installs iproute2 and nftables as root)"
            ));
            return None;
        }
        let name = format!(
            "vx{}n{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let hosts = Hosts {
            a: format!("{name}a"),
            b: format!("{name}b"),
        };
        let made = Command::new("ip")
            .args(["netns", "add", &hosts.a])
            .output()
            .is_ok_and(|o| o.status.success());
        if !made {
            skip("cannot create a network namespace; needs root");
            return None;
        }
        run("ip", &["netns", "add", &hosts.b]);
        run(
            "ip",
            &[
                "link", "add", &hosts.a, "netns", &hosts.a, "type", "veth", "peer", "name",
                &hosts.b, "netns", &hosts.b,
            ],
        );
        for (ns, host) in [(&hosts.a, 1), (&hosts.b, 2)] {
            let dev = ns.as_str();
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{NET4}.{host}/24"),
                    "dev",
                    dev,
                ],
            );
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "-6",
                    "addr",
                    "add",
                    &format!("{NET6}{host}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            );
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
            run(
                "ip",
                &[
                    "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                    rate, "burst", "64kb", "latency", "20ms",
                ],
            );
            let nft = |rule: &str| run("ip", &["netns", "exec", ns, "nft", rule]);
            nft("add table inet lossy");
            nft("add chain inet lossy out { type filter hook output priority 0 ; }");
            nft(&format!(
                "add rule inet lossy out oifname {dev} meta l4proto udp numgen random mod 100 < {loss_percent} drop"
            ));
        }
        Some(hosts)
    }

    /// `program` started in host `ns`.
    fn spawn(&self, ns: &str, program: &str, args: &[String]) -> std::process::Child {
        Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start in the namespace")
    }

    /// `program` run in host `ns` to its end: whether it succeeded, and its standard error.
    fn run_in(&self, ns: &str, program: &str, args: &[String]) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run in the namespace");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so the pair.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn skip(reason: &str) {
    assert!(
        std::env::var_os("VIASTACK_REQUIRE_NETNS").is_none(),
        "cannot run the two-host test: {reason}"
    );
    eprintln!("skipped: {reason}");
}

/// `chat` from host a to host b at the given addresses: every line arrives once, in order,
/// over a link that delays and loses datagrams.
fn chat_across(hosts: &Hosts, addr_a: &str, addr_b: &str, lines: usize) {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/../stacks/chat.toml");
    let args = |id: u32, me: &str, peer: &str| -> Vec<String> {
        ["--stack", stack, "--id", &id.to_string(), "--addr", me]
            .into_iter()
            .map(String::from)
            .chain(["--peer".into(), format!("{}={peer}", 1 - id)])
            .collect()
    };
    let chat = env!("CARGO_BIN_EXE_chat");
    let mut listener = Killed(hosts.spawn(&hosts.b, chat, &args(1, addr_b, addr_a)));
    let mut talker = Killed(hosts.spawn(&hosts.a, chat, &args(0, addr_a, addr_b)));
    let sent: Vec<String> = (0..lines)
        .map(|i| format!("line {i} {}", "y".repeat(i * 53 % 3000)))
        .collect();
    {
        let mut input = talker.0.stdin.take().expect("stdin");
        for l in &sent {
            writeln!(input, "{l}").expect("write");
        }
    }
    // The talker exits 0 only once every line was acknowledged, so they are all in the
    // listener's output already.
    assert!(talker.0.wait().expect("talker").success());
    let out = BufReader::new(listener.0.stdout.take().expect("stdout"));
    let got: Vec<String> = out.lines().take(lines).map(|l| l.expect("read")).collect();
    let expected: Vec<String> = sent.iter().map(|l| format!("n0: {l}")).collect();
    assert_eq!(got, expected);
    drop(listener.0.stdin.take());
    assert!(listener.0.wait().expect("listener").success());
}

/// A child process killed if the test fails before it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn chat_between_two_hosts_over_ipv4_on_a_lossy_link() {
    let Some(hosts) = Hosts::up("50mbit", 5) else {
        return;
    };
    chat_across(
        &hosts,
        &format!("{NET4}.1:7000"),
        &format!("{NET4}.2:7000"),
        60,
    );
}

#[test]
fn chat_between_two_hosts_over_ipv6() {
    let Some(hosts) = Hosts::up("50mbit", 1) else {
        return;
    };
    chat_across(
        &hosts,
        &format!("[{NET6}1]:7000"),
        &format!("[{NET6}2]:7000"),
        20,
    );
}

/// `file-transfer` of a 4 MB file from host a to host b over the lossy link, with `stack`.
fn file_across(stack: &str) {
    let Some(hosts) = Hosts::up("50mbit", 5) else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netns-file-{}", stack.replace('.', "-")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("in")).expect("scratch");
    let file = dir.join("payload.bin");
    let content: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &content).expect("write");
    let stack = format!("{}/../stacks/{stack}", env!("CARGO_MANIFEST_DIR"));
    let (a, b) = (format!("{NET4}.1:7000"), format!("{NET4}.2:7000"));
    let args = |mode: &str, id: u32, me: &str, peer: &str| -> Vec<String> {
        [
            mode,
            "--quiet",
            "--stack",
            &stack,
            "--id",
            &id.to_string(),
            "--addr",
            me,
        ]
        .into_iter()
        .map(String::from)
        .chain(["--peer".into(), format!("{}={peer}", 1 - id)])
        .collect()
    };
    let program = env!("CARGO_BIN_EXE_file-transfer");
    let mut recv_args = args("recv", 1, &b, &a);
    recv_args.extend(["--out".into(), dir.join("in").display().to_string()]);
    let mut receiver = Killed(hosts.spawn(&hosts.b, program, &recv_args));
    // The receiver says when it listens.
    let mut first = String::new();
    let mut said = BufReader::new(receiver.0.stdout.take().expect("stdout"));
    said.read_line(&mut first)
        .expect("the receiver's first line");
    assert!(first.contains("listening on"), "receiver said {first:?}");
    let mut send_args = args("send", 0, &a, &b);
    send_args.push(file.display().to_string());
    let (ok, err) = hosts.run_in(&hosts.a, program, &send_args);
    assert!(ok, "sender failed: {err}");
    let mut summary = String::new();
    std::io::Read::read_to_string(&mut said, &mut summary).expect("the receiver's summary");
    assert!(receiver.0.wait().expect("receiver").success(), "{summary}");
    let got = std::fs::read(dir.join("in/payload.bin")).expect("the received file");
    assert!(got == content, "the file arrived damaged");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn file_transfer_between_two_hosts_over_sp() {
    file_across("file-sp.toml");
}

#[test]
fn file_transfer_between_two_hosts_over_reliable_fifo() {
    file_across("file-fifo.toml");
}
