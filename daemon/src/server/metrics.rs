//! Request metrics: counts and latency histograms per op, errors by code, and the Prometheus
//! text form of those plus what the engine reports (lane depth, store size, model usage).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use recalld_protocol::ops::OPS;
use recalld_protocol::ErrorCode;
use serde_json::{json, Value};

/// Upper bounds of the latency buckets, in seconds (the last, +Inf, is implied).
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    ops: BTreeMap<&'static str, OpStats>,
    errors: BTreeMap<&'static str, u64>,
}

#[derive(Default, Clone)]
struct OpStats {
    count: u64,
    errors: u64,
    sum_seconds: f64,
    /// Per bucket (not cumulative); the last slot is +Inf.
    buckets: [u64; BUCKETS.len() + 1],
}

impl Metrics {
    /// Counts one finished request. Ops outside the known list are counted as `other`, so a
    /// client cannot grow the label set without bound.
    pub fn observe(&self, op: &str, seconds: f64, error: Option<ErrorCode>) {
        let op = OPS.iter().copied().find(|known| *known == op).unwrap_or("other");
        let slot = BUCKETS.iter().position(|le| seconds <= *le).unwrap_or(BUCKETS.len());
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = g.ops.entry(op).or_default();
        s.count += 1;
        s.sum_seconds += seconds;
        s.buckets[slot] += 1;
        if let Some(code) = error {
            s.errors += 1;
            *g.errors.entry(code.as_str()).or_default() += 1;
        }
    }

    /// `{"requests": {op: {count, errors, sum_seconds, buckets: [[le, cumulative], …]}},
    /// "errors": {code: n}}`.
    pub fn snapshot(&self) -> Value {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let requests: serde_json::Map<String, Value> = g
            .ops
            .iter()
            .map(|(op, s)| {
                let mut cumulative = 0;
                let buckets: Vec<Value> = s
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        cumulative += n;
                        let le = BUCKETS.get(i).map(|b| json!(b)).unwrap_or(json!("+Inf"));
                        json!([le, cumulative])
                    })
                    .collect();
                (
                    op.to_string(),
                    json!({"count": s.count, "errors": s.errors, "sum_seconds": s.sum_seconds, "buckets": buckets}),
                )
            })
            .collect();
        json!({ "requests": requests, "errors": g.errors })
    }
}

/// The Prometheus text exposition (version 0.0.4) of a `metrics` reply.
pub fn prometheus(m: &Value) -> String {
    let mut out = String::new();
    family(&mut out, "requests_total", "counter", "Requests served, by op.");
    let requests = m["requests"].as_object().cloned().unwrap_or_default();
    for (op, s) in &requests {
        let _ = writeln!(out, "recalld_requests_total{{op=\"{op}\"}} {}", s["count"]);
    }
    family(
        &mut out,
        "request_errors_total",
        "counter",
        "Requests answered with an error, by op.",
    );
    for (op, s) in &requests {
        let _ = writeln!(out, "recalld_request_errors_total{{op=\"{op}\"}} {}", s["errors"]);
    }
    family(
        &mut out,
        "request_duration_seconds",
        "histogram",
        "Time from decoded request to reply, by op.",
    );
    for (op, s) in &requests {
        for b in s["buckets"].as_array().into_iter().flatten() {
            let le = match &b[0] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let _ = writeln!(
                out,
                "recalld_request_duration_seconds_bucket{{op=\"{op}\",le=\"{le}\"}} {}",
                b[1]
            );
        }
        let _ = writeln!(
            out,
            "recalld_request_duration_seconds_sum{{op=\"{op}\"}} {}",
            s["sum_seconds"]
        );
        let _ = writeln!(
            out,
            "recalld_request_duration_seconds_count{{op=\"{op}\"}} {}",
            s["count"]
        );
    }
    family(&mut out, "errors_total", "counter", "Error replies, by wire code.");
    for (code, n) in m["errors"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "recalld_errors_total{{code=\"{code}\"}} {n}");
    }
    let gauges = [
        ("connections_open", "gauge", "Open client connections."),
        ("connections_total", "counter", "Connections accepted since start."),
        ("bad_frames_total", "counter", "Frames too large or undecodable."),
        (
            "lane_jobs",
            "gauge",
            "Background jobs queued in the store, all memories (lane depth).",
        ),
        ("store_bytes", "gauge", "Size of the LMDB data file."),
        ("store_map_bytes", "gauge", "Current LMDB map size."),
        ("memories", "gauge", "Memories stored, all namespaces."),
        ("uptime_seconds", "gauge", "Seconds since the daemon started."),
    ];
    for (name, kind, help) in gauges {
        if let Some(v) = m.get(name).filter(|v| v.is_number()) {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "recalld_{name} {v}");
        }
    }
    let models = &m["models"];
    let usage = [
        ("embed_calls", "Calls to the embedding model."),
        ("embed_tokens", "Tokens sent to the embedding model."),
        ("judge_calls", "Calls to the judge."),
        ("judge_tokens", "Tokens sent to the judge."),
        ("errors", "Model calls that failed after retries."),
    ];
    for (name, help) in usage {
        if let Some(v) = models.get(name).filter(|v| v.is_number()) {
            family(&mut out, &format!("model_{name}_total"), "counter", help);
            let _ = writeln!(out, "recalld_model_{name}_total {v}");
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP recalld_{name} {help}\n# TYPE recalld_{name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_unknown_ops_share_one_label() {
        let m = Metrics::default();
        m.observe("decorate", 0.0003, None);
        m.observe("decorate", 0.02, Some(ErrorCode::InvalidArgument));
        m.observe("decorate", 9.0, None);
        m.observe("made_up_1", 0.001, Some(ErrorCode::UnknownOp));
        m.observe("made_up_2", 0.001, Some(ErrorCode::UnknownOp));
        let snap = m.snapshot();
        let d = &snap["requests"]["decorate"];
        assert_eq!(d["count"], 3);
        assert_eq!(d["errors"], 1);
        let buckets = d["buckets"].as_array().unwrap();
        assert_eq!(buckets.last().unwrap(), &json!(["+Inf", 3]));
        assert_eq!(buckets[2], json!([0.0005, 1]));
        assert_eq!(snap["requests"]["other"]["count"], 2);
        assert_eq!(snap["errors"]["unknown_op"], 2);
        let text = prometheus(&snap);
        assert!(
            text.contains("recalld_request_duration_seconds_bucket{op=\"decorate\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("recalld_errors_total{code=\"invalid_argument\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE recalld_request_duration_seconds histogram\n"),
            "{text}"
        );
    }
}
