//! One chart per benchmark, drawn from the benchmark's JSON document (what `--json` prints and
//! `bench all` records), so a chart shows exactly the recorded figures.

use serde_json::Value;

use super::plot::{Chart, Scale, Series};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// `bench kernel`: time per event against the layers it crosses, per kind of layer.
pub fn kernel(doc: &Value, footnote: &str) -> Chart {
    let mut series: Vec<Series> = Vec::new();
    for (kind, name) in [
        (
            "transparent",
            "transparent layers (kernel routes past them)",
        ),
        ("ghost", "ghost layers (each handles and forwards)"),
        ("direct", "direct calls (no kernel, reference)"),
    ] {
        let mut points: Vec<(f64, f64)> = doc
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| {
                k.strip_prefix(kind)
                    .and_then(|r| r.strip_prefix('_'))
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .map(|(_, v)| (f(&v["layers"]), f(&v["ns_per_event"])))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(Series {
            name: name.into(),
            points,
        });
    }
    Chart {
        title: "bench kernel: cost of an event crossing layers".into(),
        x_label: "layers between the two ends".into(),
        y_label: "time per event (ns)".into(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series,
        bars: vec![],
        footnote: footnote.into(),
    }
}

/// `bench unicast`: median throughput per lane against message size.
pub fn unicast(doc: &Value, footnote: &str) -> Chart {
    let mut sizes: Vec<(f64, &Value)> = doc
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.parse::<f64>().ok()?, v)))
        .collect();
    sizes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let lanes = [
        ("reliable_fifo", "viastack reliable-fifo + bundle"),
        (
            "reliable_fifo_unbundled",
            "viastack reliable-fifo, no bundle",
        ),
        ("reliable_fifo_encrypt", "viastack + encrypt"),
        ("tcp", "kernel TCP"),
        ("udp", "raw UDP (unreliable)"),
        ("quinn", "QUIC (quinn)"),
        ("jgroups_unicast3", "JGroups tcp.xml (UNICAST3)"),
        ("jgroups_unicast4", "JGroups tcp-new.xml (UNICAST4)"),
    ];
    let series = lanes
        .iter()
        .map(|(lane, name)| Series {
            name: (*name).into(),
            points: sizes
                .iter()
                .map(|(s, row)| (*s, f(&row[lane]["mb_per_sec"])))
                .collect(),
        })
        .filter(|s| s.points.iter().any(|p| p.1.is_finite()))
        .collect();
    Chart {
        title: "bench unicast: throughput on loopback (median of rounds)".into(),
        x_label: "message size (bytes)".into(),
        y_label: "throughput (MB/s of payload)".into(),
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
        bars: vec![],
        footnote: footnote.into(),
    }
}

/// `bench sp`: median transfer time per protocol against message size.
pub fn sp(doc: &Value, footnote: &str) -> Chart {
    let rows: Vec<&Value> = doc["sizes"].as_array().into_iter().flatten().collect();
    let series = [
        ("sp_reliable", "SP RELIABLE"),
        ("sp_unreliable", "SP UNRELIABLE"),
        ("tcp", "kernel TCP"),
        ("udp", "kernel UDP"),
    ]
    .iter()
    .map(|(p, name)| Series {
        name: (*name).into(),
        points: rows
            .iter()
            .map(|r| (f(&r["size"]), f(&r[p]["p50_us"])))
            .collect(),
    })
    .collect();
    Chart {
        title: "bench sp: time to transfer one message on loopback (median)".into(),
        x_label: "message size (bytes)".into(),
        y_label: "transfer time (µs)".into(),
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
        bars: vec![],
        footnote: footnote.into(),
    }
}

/// `bench spec`: events per second of the h2hack service, three ways.
pub fn spec(doc: &Value, footnote: &str) -> Chart {
    Chart {
        title: "bench spec: h2hack delivery service, events per second".into(),
        x_label: "implementation".into(),
        y_label: "events per second".into(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series: vec![],
        bars: ["compiled", "table", "handwritten"]
            .iter()
            .map(|k| ((*k).to_string(), f(&doc[k]["events_per_s"])))
            .collect(),
        footnote: footnote.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn charts_take_their_points_from_the_documents() {
        let u = unicast(
            &json!({
                "1024": {"reliable_fifo": {"mb_per_sec": 1800.0}, "tcp": null},
                "65536": {"reliable_fifo": {"mb_per_sec": 3300.0}, "tcp": {"mb_per_sec": 2400.0}},
                "pingpong_64": {},
            }),
            "m",
        );
        assert_eq!(u.series.len(), 2);
        assert_eq!(
            u.series[0].points,
            vec![(1024.0, 1800.0), (65536.0, 3300.0)]
        );
        let k = kernel(
            &json!({"ghost_10": {"layers": 10, "ns_per_event": 90.0},
                    "ghost_1": {"layers": 1, "ns_per_event": 20.0},
                    "ghost_ns_per_layer": 7.0}),
            "m",
        );
        assert_eq!(k.series[1].points, vec![(1.0, 20.0), (10.0, 90.0)]);
        let s = spec(&json!({"compiled": {"events_per_s": 2.0}}), "m");
        assert_eq!(s.bars[0], ("compiled".to_string(), 2.0));
        assert!(s.bars[1].1.is_nan());
    }
}
