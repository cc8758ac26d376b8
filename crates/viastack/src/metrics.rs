//! A node's counters as one snapshot, and their Prometheus text exposition (DESIGN.md §4.9;
//! the format: <https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Kernel counters are named `layer.counter` (`rel.retransmitted`, `kernel.fell_off_bottom`);
//! they become one family, `viastack_layer_events_total{layer="rel",counter="retransmitted"}`,
//! so a new counter in a layer needs no new metric declaration. Transport and queue figures
//! have families of their own.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use viastack_kernel::NodeId;
use viastack_net::TransportStats;

pub use crate::engine::ChannelStats;

/// A snapshot of a node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// The node.
    pub node: NodeId,
    /// Kernel and layer counters, `layer.counter` → value.
    pub counters: BTreeMap<String, u64>,
    /// What each channel carried, by channel name.
    pub channels: BTreeMap<String, ChannelStats>,
    /// The transport's counters.
    pub transport: TransportStats,
    /// Messages the stack holds unsettled (neither acknowledged nor reported).
    pub unsettled: u64,
    /// Events waiting for the application.
    pub events_waiting: u64,
    /// Messages waiting in the send queue.
    pub sends_waiting: u64,
}

impl Metrics {
    /// The counter `name` (`layer.counter`), 0 if the stack never counted it.
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// The Prometheus text format (version 0.0.4) of this snapshot.
    pub fn to_prometheus(&self) -> String {
        let node = self.node.0;
        let mut out = String::new();
        out += "# HELP viastack_layer_events_total Events counted by a layer of the stack (kernel counters are layer \"kernel\").\n";
        out += "# TYPE viastack_layer_events_total counter\n";
        for (name, value) in &self.counters {
            let (layer, counter) = name.split_once('.').unwrap_or(("kernel", name));
            let _ = writeln!(
                out,
                "viastack_layer_events_total{{node=\"{node}\",layer=\"{}\",counter=\"{}\"}} {value}",
                escape(layer),
                escape(counter)
            );
        }
        out += "# HELP viastack_channel_messages_total Messages of a channel, as the application sees them: sent (accepted from the application), refused, received (delivered to it), failed (reported undelivered), notices.\n";
        out += "# TYPE viastack_channel_messages_total counter\n";
        for (channel, c) in &self.channels {
            let channel = escape(channel);
            for (what, value) in [
                ("sent", c.sent),
                ("refused", c.refused),
                ("received", c.received),
                ("failed", c.failed),
                ("notices", c.notices),
            ] {
                let _ = writeln!(
                    out,
                    "viastack_channel_messages_total{{node=\"{node}\",channel=\"{channel}\",kind=\"{what}\"}} {value}"
                );
            }
        }
        let t = &self.transport;
        let families: [(&str, &str, &str, u64); 8] = [
            (
                "viastack_transport_sent_total",
                "counter",
                "Datagrams handed to the operating system.",
                t.sent,
            ),
            (
                "viastack_transport_send_failed_total",
                "counter",
                "Datagrams dropped on the way out (buffer full, peer unreachable).",
                t.send_failed,
            ),
            (
                "viastack_transport_received_total",
                "counter",
                "Datagrams received from nodes of the deployment.",
                t.received,
            ),
            (
                "viastack_transport_bad_frames_total",
                "counter",
                "Datagrams from unknown addresses, or malformed frames.",
                t.bad_frames,
            ),
            (
                "viastack_transport_connections_total",
                "counter",
                "Connections opened (TCP).",
                t.connections,
            ),
            (
                "viastack_unsettled_messages",
                "gauge",
                "Messages the stack holds, neither acknowledged nor reported.",
                self.unsettled,
            ),
            (
                "viastack_events_waiting",
                "gauge",
                "Events waiting for the application.",
                self.events_waiting,
            ),
            (
                "viastack_sends_waiting",
                "gauge",
                "Messages waiting in the send queue.",
                self.sends_waiting,
            ),
        ];
        for (name, ty, help, value) in families {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {ty}\n{name}{{node=\"{node}\"}} {value}"
            );
        }
        out
    }
}

/// A label value with `\`, `"` and newlines escaped, as the text format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_line_names_a_declared_family() {
        let m = Metrics {
            node: NodeId(3),
            counters: [
                ("rel.retransmitted".to_string(), 7),
                ("kernel.fell_off_bottom".to_string(), 1),
                ("odd\"name".to_string(), 2),
            ]
            .into_iter()
            .collect(),
            channels: [(
                "data".to_string(),
                ChannelStats {
                    sent: 4,
                    ..ChannelStats::default()
                },
            )]
            .into_iter()
            .collect(),
            transport: TransportStats {
                sent: 5,
                ..TransportStats::default()
            },
            unsettled: 0,
            events_waiting: 1,
            sends_waiting: 0,
        };
        let text = m.to_prometheus();
        assert!(text.contains("viastack_layer_events_total{node=\"3\",layer=\"rel\",counter=\"retransmitted\"} 7\n"), "{text}");
        assert!(text.contains("counter=\"odd\\\"name\"} 2"), "{text}");
        assert!(
            text.contains(
                "viastack_channel_messages_total{node=\"3\",channel=\"data\",kind=\"sent\"} 4\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("viastack_transport_sent_total{node=\"3\"} 5\n"),
            "{text}"
        );
        let declared: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let family = line.split('{').next().unwrap_or_default();
            assert!(declared.contains(&family), "{line} has no # TYPE");
        }
    }
}
