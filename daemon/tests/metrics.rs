//! The `metrics` op and `recalld metrics` (Prometheus text) on a real daemon.

use crate::convo;
use crate::util;

use std::process::Command;

use convo::Convo;
use serde_json::json;
use util::{bin, code, Daemon};

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_requests_latency_errors_and_gauges() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut convo = Convo::new("m");
    for _ in 0..3 {
        convo.turn_trip(&mut c).unwrap();
    }
    assert_eq!(
        code(c.call("decorate", json!({"memory": "m", "request": {}}))),
        "invalid_argument"
    );
    assert_eq!(code(c.call("no_such_op", json!({}))), "unknown_op");

    let m = c.call("metrics", json!({})).unwrap();
    assert_eq!(m["requests"]["decorate"]["count"], 4);
    assert_eq!(m["requests"]["decorate"]["errors"], 1);
    assert_eq!(m["requests"]["report"]["count"], 3);
    assert_eq!(m["requests"]["other"]["count"], 1, "unknown ops share one label");
    assert_eq!(m["errors"]["invalid_argument"], 1);
    assert!(m["connections_open"].as_u64().unwrap() >= 1);
    assert!(m["store_bytes"].as_u64().unwrap() > 0);
    assert!(m["lane_jobs"].is_u64());

    let out = Command::new(bin())
        .args(["metrics", "--socket", d.socket.to_str().unwrap()])
        .env_remove("RECALLD_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(sample(&text, "recalld_requests_total{op=\"decorate\"}"), 4.0);
    assert_eq!(
        sample(&text, "recalld_request_duration_seconds_count{op=\"report\"}"),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            "recalld_request_duration_seconds_bucket{op=\"report\",le=\"+Inf\"}"
        ),
        3.0
    );
    assert_eq!(sample(&text, "recalld_errors_total{code=\"unknown_op\"}"), 1.0);
    assert!(
        sample(&text, "recalld_connections_open") >= 2.0,
        "this client and the CLI's"
    );
    assert!(sample(&text, "recalld_store_bytes") > 0.0);
    assert!(sample(&text, "recalld_lane_jobs") >= 0.0);
    assert!(text.contains("# TYPE recalld_request_duration_seconds histogram"));
    // Every line is a comment or `name{labels} value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').unwrap();
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad sample line {line:?}"));
    }
}
