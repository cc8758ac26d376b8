//! `file-transfer` between two processes on loopback, over both shipped stacks: a file of a
//! few MB arrives byte for byte and both sides exit 0; a name that is a path is refused by the
//! receiver; a sender whose peer never answers fails, saying so, instead of waiting forever.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use common::free_port;

/// Longest a process may take before the test calls it hung (the transfers take a second or
/// two; the failing sender's `--timeout` is 2 s).
const BOUND: Duration = Duration::from_secs(120);

fn stack(name: &str) -> String {
    format!("{}/../stacks/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("file-transfer-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// `len` bytes without a pattern a chunking bug could hide in (xorshift64*).
fn content(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        out.extend(seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `file-transfer MODE` as node `id` at `me`, its peer at `peer`.
fn file_transfer(mode: &str, stack_file: &str, id: u32, me: u16, peer: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_file-transfer"));
    c.arg(mode)
        .args(["--stack", &stack(stack_file), "--id", &id.to_string()])
        .args(["--addr", &format!("127.0.0.1:{me}")])
        .args(["--peer", &format!("{}=127.0.0.1:{peer}", 1 - id)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Starts a receiver and waits until it says it listens.
fn start_receiver(
    stack_file: &str,
    me: u16,
    peer: u16,
    out: &Path,
) -> (Child, BufReader<ChildStdout>) {
    let mut child = file_transfer("recv", stack_file, 1, me, peer)
        .arg("--out")
        .arg(out)
        .spawn()
        .expect("start the receiver");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("the receiver's first line");
    assert!(line.contains("listening on"), "receiver said {line:?}");
    (child, stdout)
}

/// The process's output once it ends; killed (and the test failed) past [`BOUND`].
fn finish(child: Child, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(BOUND) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the {what} did not finish within {BOUND:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn transfer_intact(stack_file: &str, test: &str) {
    let dir = scratch(test);
    let (input, out) = (dir.join("input"), dir.join("out"));
    std::fs::create_dir_all(&input).expect("input directory");
    // Three chunks' worth short of 3 MiB plus an odd tail: the last chunk is partial.
    let data = content(3 * 1024 * 1024 + 12_345, 0x5eed ^ test.len() as u64);
    let file = input.join("payload.bin");
    std::fs::write(&file, &data).expect("write the input");
    let (p0, p1) = (free_port(), free_port());
    let (receiver, mut receiver_out) = start_receiver(stack_file, p1, p0, &out);
    let sender = file_transfer("send", stack_file, 0, p0, p1)
        .arg(&file)
        .spawn()
        .expect("start the sender");
    let sent = finish(sender, "sender");
    let received = finish(receiver, "receiver");
    let mut summary = String::new();
    receiver_out.read_to_string(&mut summary).expect("read");
    assert!(
        sent.status.success(),
        "sender: {}\n{}",
        text(&sent.stdout),
        text(&sent.stderr)
    );
    assert!(
        received.status.success(),
        "receiver: {summary}\n{}",
        text(&received.stderr)
    );
    assert!(
        text(&sent.stdout).contains("MB/s"),
        "{}",
        text(&sent.stdout)
    );
    assert!(summary.contains("verified"), "{summary}");
    assert!(
        text(&received.stderr).is_empty(),
        "the receiver's confirmation was acknowledged before the sender closed: {}",
        text(&received.stderr)
    );
    let got = std::fs::read(out.join("payload.bin")).expect("the received file");
    assert_eq!(got.len(), data.len(), "size");
    let first_difference = got.iter().zip(&data).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "the received file differs");
    let names: Vec<_> = std::fs::read_dir(&out)
        .expect("out")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["payload.bin"], "no partial file left behind");
}

#[test]
fn a_file_arrives_intact_over_sp() {
    transfer_intact("file-sp.toml", "sp");
}

#[test]
fn a_file_arrives_intact_over_reliable_fifo() {
    transfer_intact("file-fifo.toml", "fifo");
}

#[test]
fn a_name_with_a_path_is_refused() {
    let dir = scratch("refused");
    let out = dir.join("out");
    let file = dir.join("payload.bin");
    std::fs::write(&file, content(100_000, 1)).expect("write the input");
    let (p0, p1) = (free_port(), free_port());
    let (receiver, _) = start_receiver("file-sp.toml", p1, p0, &out);
    let sender = file_transfer("send", "file-sp.toml", 0, p0, p1)
        .arg(&file)
        .args(["--name", "../escaped.bin"])
        .spawn()
        .expect("start the sender");
    let sent = finish(sender, "sender");
    let received = finish(receiver, "receiver");
    assert!(!sent.status.success(), "the sender succeeded");
    assert!(!received.status.success(), "the receiver succeeded");
    let said = text(&sent.stderr);
    assert!(
        said.contains("refused") && said.contains("not a plain file name"),
        "sender: {said}"
    );
    assert!(
        text(&received.stderr).contains("not a plain file name"),
        "receiver: {}",
        text(&received.stderr)
    );
    assert!(!dir.join("escaped.bin").exists(), "written outside --out");
    assert_eq!(std::fs::read_dir(&out).expect("out").count(), 0);
}

/// Node 1's address is bound by nobody: the sender must give up and say why.
fn sender_to_nobody_fails(stack_file: &str, test: &str) {
    let dir = scratch(test);
    let file = dir.join("payload.bin");
    std::fs::write(&file, content(500_000, 2)).expect("write the input");
    let (p0, p1) = (free_port(), free_port());
    let sender = file_transfer("send", stack_file, 0, p0, p1)
        .arg(&file)
        .args(["--timeout", "2s", "--quiet"])
        .spawn()
        .expect("start the sender");
    let sent = finish(sender, "sender");
    assert!(!sent.status.success(), "the sender succeeded");
    let said = text(&sent.stderr);
    assert!(
        said.contains("node 1"),
        "the message names the peer: {said}"
    );
}

#[test]
fn a_sender_whose_peer_never_answers_fails_over_sp() {
    sender_to_nobody_fails("file-sp.toml", "nobody-sp");
}

#[test]
fn a_sender_whose_peer_never_answers_fails_over_reliable_fifo() {
    sender_to_nobody_fails("file-fifo.toml", "nobody-fifo");
}
