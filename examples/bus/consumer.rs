//! The Rust consumer of the three-language example (`examples/bus/three-languages.tb`, seed
//! 003's producer/consumer by reference across languages): on
//! `consume(transformed("complement", SHA, SHA', BLOB'))`, received as a reference, it fetches
//! the value from its owner (the Java transformer), checks that BLOB' hashes to SHA' and that
//! its complement hashes to SHA (the Python producer's original), and answers
//! `ok(BYTES, FETCHES)` — or `bad("why")` — so the script's trace records the verdict.

use std::process::ExitCode;
use std::time::Instant;

use ring::digest::{digest, SHA256};
use viastack_bus::client::{Request, Tool, ToolConfig};
use viastack_bus::{Kind, Term};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn args(t: &Term) -> &[Term] {
    match t.kind() {
        Kind::Appl { args, .. } => args,
        _ => &[],
    }
}

fn text(t: &Term) -> Option<&str> {
    match t.kind() {
        Kind::Str(s) => Some(s),
        _ => None,
    }
}

/// The check: Ok(bytes) or why not.
fn check(value: &Term) -> Result<usize, String> {
    let [inner] = args(value) else {
        return Err(format!("consume/1 expected, got {value}"));
    };
    let [how, original, mapped, blob] = args(inner) else {
        return Err("transformed/4 expected".into());
    };
    let Kind::Blob(data) = blob.kind() else {
        return Err("no blob".into());
    };
    if text(how) != Some("complement") {
        return Err("unknown transformation".into());
    }
    if text(mapped) != Some(&hex(digest(&SHA256, data).as_ref())) {
        return Err("the transformed value does not match its SHA-256".into());
    }
    let back: Vec<u8> = data.iter().map(|b| !b).collect();
    if text(original) != Some(&hex(digest(&SHA256, &back).as_ref())) {
        return Err("the complement does not match the producer's SHA-256".into());
    }
    Ok(data.len())
}

/// The clock, for the tool's own measurement of its fetch.
#[allow(clippy::disallowed_methods)] // an application times its own transfer
fn now() -> Instant {
    Instant::now()
}

fn main() -> ExitCode {
    let (Ok(bus), name) = (
        std::env::var("VIASTACK_BUS"),
        std::env::var("VIASTACK_TOOL").unwrap_or_else(|_| "consumer".into()),
    ) else {
        eprintln!("consumer (Rust): VIASTACK_BUS is not set (the bus starts this tool)");
        return ExitCode::FAILURE;
    };
    let mut config = ToolConfig::new(&name);
    config.serve = None; // it only fetches
                         // On a TLS bus (VIASTACK_BUS_CA: the PEM roots to trust) it verifies the bus and fetches
                         // only from owners whose certificate matches the pin in their reference.
    if let Ok(ca) = std::env::var("VIASTACK_BUS_CA") {
        let name = std::env::var("VIASTACK_BUS_NAME").unwrap_or_else(|_| "localhost".into());
        match viastack_bus::net::TlsClient::from_pem(std::path::Path::new(&ca), &name) {
            Ok(tls) => config.tls = Some(tls),
            Err(e) => {
                eprintln!("consumer (Rust): VIASTACK_BUS_CA={ca}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut tool = match Tool::connect(&bus, config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("consumer (Rust): cannot connect to {bus}: {e}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        match tool.next_request() {
            Ok(Request::Eval {
                request,
                delivery,
                term,
            }) => {
                let by_ref = term.refs().len();
                let t0 = now();
                let answer = match tool.resolve(&term, delivery) {
                    Ok(value) => {
                        let fetched = t0.elapsed();
                        let verdict = check(&value);
                        tool.release(&term);
                        match verdict {
                            Ok(n) if by_ref == 1 => {
                                eprintln!(
                                    "consumer (Rust): check passed: {n} bytes by reference \
                                     ({} fetch, {} over TLS, {:.0} ms), producer's SHA-256 \
                                     matches after the Java complement",
                                    tool.stats.fetches,
                                    tool.stats.tls_fetches,
                                    fetched.as_secs_f64() * 1e3
                                );
                                let (n, f) = (
                                    tool.arena.int(n as i64),
                                    tool.arena.int(tool.stats.fetches as i64),
                                );
                                tool.arena.appl("ok", vec![n, f])
                            }
                            Ok(_) => {
                                let why = tool.arena.str("the value came by value");
                                tool.arena.appl("bad", vec![why])
                            }
                            Err(e) => {
                                eprintln!("consumer (Rust): check FAILED: {e}");
                                let why = tool.arena.str(&e);
                                tool.arena.appl("bad", vec![why])
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("consumer (Rust): transfer FAILED: {e}");
                        let why = tool.arena.str(&e.to_string());
                        tool.arena.appl("bad", vec![why])
                    }
                };
                if tool.value(request, answer).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            Ok(Request::Terminate { .. }) => {
                tool.close();
                return ExitCode::SUCCESS;
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("consumer (Rust): {e}");
                return ExitCode::FAILURE;
            }
        }
    }
}
