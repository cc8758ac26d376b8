//! `viastack check FILE`: validates a stack file and prints, for each QoS, what the application
//! on top may count on, who provides each event a layer requires, and the route table (event
//! type → the layers it visits, bottom first); then every channel of node 0 with each slot's
//! session and how it was bound (explicitly, automatically by a bound session, or by default). Errors are
//! printed as `file:line: message`, one per line, and the exit status is non-zero.

use std::fmt::Write as _;

use viastack_stack::{channel_bindings, qos_tables, Catalog, StackFile};

/// Renders the check report of a valid file.
pub fn render(file: &StackFile, catalog: &Catalog) -> Result<String, viastack_stack::Diagnostics> {
    let tables = qos_tables(file, catalog)?;
    let mut out = String::new();
    let _ = writeln!(out, "{}: ok", file.path);
    let _ = writeln!(out, "layers:");
    for l in file.layers.values() {
        let params: Vec<String> = l.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "  {:<16} {:<14} {}", l.name, l.kind, params.join(" "));
    }
    for table in &tables {
        let layers = file
            .qos
            .get(&table.name)
            .map(|q| q.layers.join(" < "))
            .unwrap_or_default();
        let _ = writeln!(out, "qos {} (bottom first: {layers})", table.name);
        let _ = writeln!(out, "  delivers            {}", table.delivery);
        for (layer, event, provider) in &table.requires {
            let _ = writeln!(
                out,
                "  requires            {layer} needs {event} from {provider}"
            );
        }
        for (event, visits) in &table.routes {
            let path = if visits.is_empty() {
                "(no layer accepts it)".to_string()
            } else {
                visits.join(" -> ")
            };
            let _ = writeln!(out, "  {event:<20} {path}");
        }
    }
    if !file.channels.is_empty() {
        let _ = writeln!(
            out,
            "channels (node 0; each slot's session and how it was bound):"
        );
        for (name, slots) in channel_bindings(file, catalog)? {
            let qos = file
                .channels
                .iter()
                .find(|c| c.name == name)
                .map_or("?", |c| c.qos.as_str());
            let shown: Vec<String> = slots
                .iter()
                .map(|s| format!("{}={} ({})", s.layer, s.session, s.mode))
                .collect();
            let _ = writeln!(out, "  {name:<16} qos {qos}: {}", shown.join("  "));
        }
    }
    if let Some(t) = &file.topology {
        let routers = t
            .nodes
            .iter()
            .filter(|n| n.role == viastack_stack::Role::Router)
            .count();
        let segments = t.links.iter().filter(|l| l.nodes.len() > 2).count();
        let _ = writeln!(
            out,
            "topology: {} nodes ({routers} routers, {} hosts), {} links ({segments} LAN \
             segments)",
            t.nodes.len(),
            t.nodes.len() - routers,
            t.links.len()
        );
    }
    if let Some(s) = &file.scenario {
        let _ = writeln!(
            out,
            "scenario: {} nodes, {:?}, seed {}, expect {}, {} workload(s)",
            s.nodes,
            s.duration,
            s.seed,
            s.expect.name(),
            s.workloads.len()
        );
    }
    Ok(out)
}
