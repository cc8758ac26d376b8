//! `chat` between two processes on loopback: lines typed at one reach the other, once each,
//! in order; the end of input closes cleanly.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::free_port;

#[test]
fn two_processes_chat() {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/../stacks/chat.toml");
    let (p0, p1) = (free_port(), free_port());
    let chat = |id: u32, me: u16, peer: u16| {
        Command::new(env!("CARGO_BIN_EXE_chat"))
            .args(["--stack", stack, "--id", &id.to_string()])
            .args(["--addr", &format!("127.0.0.1:{me}")])
            .args(["--peer", &format!("{}=127.0.0.1:{peer}", 1 - id)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start chat")
    };
    let mut listener = chat(1, p1, p0);
    let mut talker = chat(0, p0, p1);
    let lines: Vec<String> = (0..50)
        .map(|i| format!("line {i} {}", "x".repeat(i * 40)))
        .collect();
    {
        let mut input = talker.stdin.take().expect("stdin");
        for l in &lines {
            writeln!(input, "{l}").expect("write");
        }
    } // end of input: the talker closes after its lines are acknowledged
    let status = talker.wait().expect("talker");
    assert!(status.success());
    let out = BufReader::new(listener.stdout.take().expect("stdout"));
    let mut got = Vec::new();
    for line in out.lines() {
        let line = line.expect("read");
        got.push(line);
        if got.len() == lines.len() {
            break;
        }
    }
    let expected: Vec<String> = lines.iter().map(|l| format!("n0: {l}")).collect();
    assert_eq!(got, expected);
    drop(listener.stdin.take());
    assert!(listener.wait().expect("listener").success());
}
