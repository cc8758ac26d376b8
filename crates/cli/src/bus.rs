//! `viastack bus`: the coordination bus (seed 003) from the command line.
//!
//! - `bus serve [--listen ADDR] [--trace] [--seed N] [--lease 10s] [--threshold BYTES]
//!   [--token T]… [--tls-cert PEM --tls-key PEM] [--max-queued BYTES] SCRIPT` runs a T-script; tools connect over TCP (`host:port`) or a Unix
//!   socket (`unix:/path`); the first line on stdout says where it listens; it exits when the
//!   script's processes have all ended. `--trace` prints every step as a JSON line on stdout;
//! - `bus check SCRIPT` parses and checks a script (errors as `file:line:col`);
//! - `bus decode HEX` prints one bus frame as JSON, or exits 1 naming what is wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use viastack_bus::interp::{Bus, Config};
use viastack_bus::net::{serve, tls_server_config, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::{decode_hex, Arena};
use viastack_bus::wire::Frame;
use viastack_kernel::Instant;
use viastack_stack::units::parse_duration;

/// What to do with the bus.
#[derive(Subcommand)]
pub enum BusCommand {
    /// Run a bus executing SCRIPT until its processes end.
    Serve(ServeArgs),
    /// Parse and check a T-script.
    Check {
        /// The script.
        script: PathBuf,
    },
    /// Decode one bus frame given in hex and print it as JSON.
    Decode {
        /// The frame, hex (whitespace ignored).
        hex: String,
    },
}

/// Options of `bus serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// The T-script.
    script: PathBuf,
    /// Where tools connect: host:port (port 0 picks one) or unix:/path.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Print every step as a JSON line.
    #[arg(long)]
    trace: bool,
    /// Seed of the choice among enabled atoms.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Lease: a tool silent this long loses its references (e.g. "10s").
    #[arg(long, default_value = "10s")]
    lease: String,
    /// Values whose encoding exceeds this many bytes go by reference.
    #[arg(long, default_value_t = Config::default().threshold)]
    threshold: u32,
    /// Largest frame accepted, in bytes (values sent by value must fit).
    #[arg(long, default_value_t = Config::default().max_frame)]
    max_frame: usize,
    /// A token tools must present (repeatable; none: no token needed).
    #[arg(long)]
    token: Vec<String>,
    /// TLS on TCP: the bus's certificate chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS on TCP: the bus's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Bytes queued for one tool before it is closed as a slow reader (default 4 × --max-frame).
    #[arg(long)]
    max_queued: Option<usize>,
}

fn load(path: &PathBuf, arena: &mut Arena) -> anyhow::Result<Result<Script, String>> {
    let src = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(Script::parse(&path.display().to_string(), &src, arena).map_err(|e| e.to_string()))
}

/// Runs a `bus` command.
pub fn run(cmd: BusCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BusCommand::Check { script } => {
            let mut arena = Arena::new();
            match load(&script, &mut arena)? {
                Ok(s) => {
                    for (name, def) in &s.processes {
                        let formals: Vec<String> = def
                            .formals
                            .iter()
                            .map(|(v, t)| format!("{v} : {t}"))
                            .collect();
                        outln!(
                            "process {name}({}): {} variables",
                            formals.join(", "),
                            def.vars.len()
                        )?;
                    }
                    for (name, def) in &s.tools {
                        outln!(
                            "tool {name}: {}",
                            def.command.as_deref().unwrap_or("(connects itself)")
                        )?;
                    }
                    let starts: Vec<&str> = s.toolbus.iter().map(|(n, _, _)| n.as_str()).collect();
                    outln!("toolbus: {}", starts.join(", "))?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("{e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        BusCommand::Decode { hex } => {
            let clean: String = hex.split_whitespace().collect();
            let Some(bytes) = decode_hex(&clean) else {
                eprintln!("invalid hex");
                return Ok(ExitCode::FAILURE);
            };
            let mut arena = Arena::new();
            match Frame::parse(&mut arena, &bytes, usize::MAX) {
                Ok(f) => {
                    outln!("{}", f.fields())?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("invalid frame: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        BusCommand::Serve(args) => {
            let mut arena = Arena::new();
            let script = match load(&args.script, &mut arena)? {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            let lease = parse_duration(&args.lease).map_err(|e| anyhow::anyhow!("--lease: {e}"))?;
            let config = Config {
                lease,
                threshold: args.threshold,
                max_frame: args.max_frame,
                seed: args.seed,
                trace: args.trace,
                tokens: args.token,
                ..Config::default()
            };
            let tls = match (&args.tls_cert, &args.tls_key) {
                (Some(c), Some(k)) => {
                    Some(tls_server_config(c, k).context("--tls-cert/--tls-key")?)
                }
                _ => None,
            };
            let max_queued = args.max_queued.unwrap_or(4 * config.max_frame);
            let listener = Listener::bind(&Endpoint::parse(&args.listen))
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            outln!("viastack bus listening on {}", listener.endpoint())?;
            let bus = Bus::new(script, arena, config, Instant::ZERO);
            let trace: Option<Box<dyn std::io::Write + Send>> = args
                .trace
                .then(|| Box::new(std::io::stdout()) as Box<dyn std::io::Write + Send>);
            serve(
                listener,
                bus,
                ServeOptions {
                    trace,
                    tls,
                    max_queued_bytes: max_queued,
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
