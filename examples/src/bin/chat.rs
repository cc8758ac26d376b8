//! `chat`: a text chat over a reliable stack between processes.
//!
//! ```text
//! chat --id 0 --addr 127.0.0.1:7000 --peer 1=127.0.0.1:7001
//! chat --id 1 --addr 127.0.0.1:7001 --peer 0=127.0.0.1:7000
//! ```
//!
//! Each line read on standard input goes to every other member; each line received is printed
//! as `<node>: <text>`. A line the stack could not deliver comes back as a notice naming it.
//! At the end of input the node closes: what is unacknowledged is settled or reported first,
//! and the exit status is 1 if any line was not acknowledged.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::Parser;
use viastack::{Node, NodeEvent, Notice};

#[derive(Parser)]
#[command(about = "Text chat over a reliable viastack stack")]
struct Args {
    /// The stack file (its channel `chat` carries the lines).
    #[arg(long, default_value = "stacks/chat.toml")]
    stack: PathBuf,
    #[command(flatten)]
    place: viastack_examples::Where,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let node = Node::open(&args.stack, args.place.deployment()?)?;
    let chat = node.channel("chat")?;
    let events = node.events();
    // Print what arrives while the main thread reads standard input.
    let printer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        while let Some(event) = events.recv() {
            match event {
                NodeEvent::Message(m) => {
                    writeln!(out, "{}: {}", m.from, String::from_utf8_lossy(&m.payload))?
                }
                NodeEvent::Notice(Notice::SendFailed {
                    kind, peer, tags, ..
                }) => writeln!(
                    out,
                    "! {} line(s) to {peer} not delivered: {kind:?}",
                    tags.len()
                )?,
                NodeEvent::Notice(n) => writeln!(out, "! {n:?}")?,
            }
            out.flush()?;
        }
        Ok(())
    });
    let mut sent = HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let tag = chat.send_to_all(line.clone().into_bytes())?;
        sent.insert(tag, line);
    }
    let report = node.close()?;
    printer
        .join()
        .map_err(|_| anyhow::anyhow!("the printer thread panicked"))??;
    if report.aborted > 0 {
        anyhow::bail!(
            "{} line(s) unacknowledged at close (reported above)",
            report.aborted
        );
    }
    Ok(())
}
