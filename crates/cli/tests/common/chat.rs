//! Three `viastack group chat` processes on loopback and their output, for the end-to-end
//! group tests (`group.rs`, `group_stall.rs`).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A base port with `n` consecutive free UDP ports (free a moment ago).
pub fn base_port(n: u16) -> u16 {
    for _ in 0..50 {
        let probe = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let base = probe.local_addr().expect("addr").port();
        drop(probe);
        if base > 65535 - n {
            continue;
        }
        let all: Result<Vec<UdpSocket>, _> = (0..n)
            .map(|i| UdpSocket::bind(("127.0.0.1", base + i)))
            .collect();
        if all.is_ok() {
            return base;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// The chat processes, killed (by handle) when the test ends, pass or fail.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Every process's stdout lines, tagged with its member id.
pub struct Lines {
    pub rx: mpsc::Receiver<(u32, String)>,
    pub seen: Vec<Vec<String>>,
}

impl Lines {
    /// Reads until `done` holds over the lines seen so far, or panics after `limit`.
    pub fn until(&mut self, limit: Duration, what: &str, done: impl Fn(&[Vec<String>]) -> bool) {
        let rounds = limit.as_millis() / 50;
        for _ in 0..rounds {
            if done(&self.seen) {
                return;
            }
            if let Ok((id, line)) = self.rx.recv_timeout(Duration::from_millis(50)) {
                self.seen[id as usize].push(line);
            }
        }
        assert!(
            done(&self.seen),
            "{what}: not within {limit:?}: {:?}",
            self.seen
        );
    }
}

pub fn chat_lines(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.starts_with("view "))
        .cloned()
        .collect()
}

pub fn last_view(lines: &[String]) -> Option<&str> {
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("view "))
        .map(|l| {
            let (_, members) = l.split_once(": ").unwrap_or(("", ""));
            members
        })
}

/// Three `group chat` processes in room `room` (with extra arguments `extra`): their handles,
/// stdins and output.
pub fn chat_group(room: &str, extra: &[&str]) -> (Procs, Vec<ChildStdin>, Lines) {
    let base = base_port(3);
    let (tx, rx) = mpsc::channel();
    let mut procs = Procs(Vec::new());
    let mut stdins: Vec<ChildStdin> = Vec::new();
    for id in 0..3u32 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_viastack"))
            .args(["group", "chat", room, "--members", "3"])
            .args(["--port", &base.to_string(), "--id", &id.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn viastack group chat");
        stdins.push(child.stdin.take().expect("stdin"));
        let out = child.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((id, line)).is_err() {
                    return;
                }
            }
        });
        procs.0.push(child);
    }
    let lines = Lines {
        rx,
        seen: vec![Vec::new(); 3],
    };
    (procs, stdins, lines)
}
