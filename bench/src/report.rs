//! The results file (`latest.json`), its markdown twin (`latest.md`), the list of
//! keys every run must produce, and the performance targets.

use std::fmt::Write as _;

use serde_json::{Value, json};

/// Keys of every scenario × concurrency entry.
pub const PAIR_KEYS: [&str; 8] = [
    "direct_rps",
    "gateway_rps",
    "ratio",
    "direct_p50_us",
    "gateway_p50_us",
    "added_p50_us",
    "added_p99_us",
    "gateway_cpu_us_per_call",
];

/// Scenario → the entries it must have.
const ENTRIES: [(&str, &[&str]); 4] = [
    ("http_echo", &["c1", "c16", "c64"]),
    ("stdio_echo", &["c1", "c16"]),
    ("fanout_list", &["b1", "b4", "b16"]),
    ("payload", &["c1", "c4"]),
];

/// Every key that is missing from `doc` (empty when complete).
pub fn missing_keys(doc: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    for (scenario, entries) in ENTRIES {
        for entry in entries {
            for key in PAIR_KEYS {
                if doc["scenarios"][scenario][entry][key].is_null() {
                    missing.push(format!("scenarios.{scenario}.{entry}.{key}"));
                }
            }
        }
    }
    for key in [
        "idle_session_kib",
        "sse_stream_kib",
        "fanout16_cached_ms",
        "machine",
        "commit",
        "date",
    ] {
        if doc[key].is_null() {
            missing.push(key.to_owned());
        }
    }
    for key in [
        "fanout_list.b16.cold_ms",
        "payload.c1.gateway_mb_s",
        "idle_sessions.memory_returned",
        "sse_streams.hold_cpu_ms",
    ] {
        let (s, rest) = key.split_once('.').unwrap_or((key, ""));
        let v = rest.split('.').fold(&doc["scenarios"][s], |v, k| &v[k]);
        if v.is_null() {
            missing.push(format!("scenarios.{key}"));
        }
    }
    missing
}

/// The performance targets, each with the value reached and whether it is met.
pub fn targets(doc: &Value) -> Value {
    let s = &doc["scenarios"];
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut out = vec![
        target(
            "http_echo c16 ratio ≥ 0.8",
            num(&s["http_echo"]["c16"]["ratio"]),
            |v| v >= 0.8,
        ),
        target(
            "http_echo c1 added_p50_us ≤ 200",
            num(&s["http_echo"]["c1"]["added_p50_us"]),
            |v| v <= 200.0,
        ),
        target(
            "http_echo c16 added_p99_us ≤ 1000",
            num(&s["http_echo"]["c16"]["added_p99_us"]),
            |v| v <= 1000.0,
        ),
        target(
            "stdio_echo c16 ratio ≥ 0.8",
            num(&s["stdio_echo"]["c16"]["ratio"]),
            |v| v >= 0.8,
        ),
        target(
            "idle_session_kib ≤ 10",
            num(&doc["idle_session_kib"]),
            |v| v <= 10.0,
        ),
        target(
            "idle memory after expiry within 10% of baseline (%)",
            num(&s["idle_sessions"]["after_expiry_vs_baseline_pct"]),
            |v| v <= 10.0,
        ),
        target(
            "fanout16_cached_ms ≤ 5",
            num(&doc["fanout16_cached_ms"]),
            |v| v <= 5.0,
        ),
        target("sse_stream_kib ≤ 16", num(&doc["sse_stream_kib"]), |v| {
            v <= 16.0
        }),
        target(
            "gateway CPU per call, http_echo c16 (µs; aim ≤ 20)",
            num(&s["http_echo"]["c16"]["gateway_cpu_us_per_call"]),
            |v| v <= 20.0,
        ),
    ];
    if let Some(peers) = s["stdio_echo"]["c16"]["peers"].as_object() {
        for (name, p) in peers {
            out.push(target(
                &format!("faster than {name} (stdio_echo c16, × rps)"),
                num(&p["mcpgate_speedup"]),
                |v| v > 1.0,
            ));
        }
    }
    Value::Array(out)
}

fn target(name: &str, value: f64, ok: impl Fn(f64) -> bool) -> Value {
    json!({"target": name, "value": value, "met": value.is_finite() && ok(value)})
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The markdown report.
pub fn markdown(doc: &Value) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# mcpgate benchmark{}\n",
        if doc["smoke"] == json!(true) {
            " (smoke run: numbers mean nothing)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "{} · commit `{}` · {} · {}\n",
        cell(&doc["date"]),
        cell(&doc["commit"]),
        cell(&doc["machine"]["cpu"]),
        cell(&doc["machine"]["cores"]).to_owned() + " cores"
    );
    let s = &doc["scenarios"];
    md.push_str(
        "Direct backend and mcpgate measured in alternation in the same run. Latencies in µs; ",
    );
    md.push_str(
        "`added` = gateway − direct; CPU = the gateway process's utime+stime per call.\n\n",
    );
    md.push_str("| scenario | C | direct rps | gateway rps | ratio | direct p50 | gateway p50 | added p50 | added p99 | gateway CPU µs/call |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for (scenario, entries) in ENTRIES {
        for entry in entries {
            let e = &s[scenario][entry];
            if e.is_null() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {scenario} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                &entry[1..],
                cell(&e["direct_rps"]),
                cell(&e["gateway_rps"]),
                cell(&e["ratio"]),
                cell(&e["direct_p50_us"]),
                cell(&e["gateway_p50_us"]),
                cell(&e["added_p50_us"]),
                cell(&e["added_p99_us"]),
                cell(&e["gateway_cpu_us_per_call"]),
            );
        }
    }
    md.push_str(
        "\nfanout_list: C is the number of backends; rps = new sessions + tools/list per second.\n",
    );
    for n in ["b1", "b4", "b16"] {
        let e = &s["fanout_list"][n];
        let _ = writeln!(
            md,
            "- {} backends: cached p50 {} ms, cold (start → first list) {} ms",
            &n[1..],
            cell(&e["gateway_p50_ms"]),
            cell(&e["cold_ms"])
        );
    }
    for c in ["c1", "c4"] {
        let e = &s["payload"][c];
        let _ = writeln!(
            md,
            "- payload (1 MiB result) C={}: direct {} MB/s, gateway {} MB/s",
            &c[1..],
            cell(&e["direct_mb_s"]),
            cell(&e["gateway_mb_s"])
        );
    }
    let i = &s["idle_sessions"];
    let _ = writeln!(
        md,
        "- idle_sessions: {} sessions, {} KiB each (RSS {} → {} KiB); after expiry {} KiB ({}% vs baseline)",
        cell(&i["sessions"]),
        cell(&doc["idle_session_kib"]),
        cell(&i["baseline_rss_kib"]),
        cell(&i["open_rss_kib"]),
        cell(&i["expired_rss_kib"]),
        cell(&i["after_expiry_vs_baseline_pct"])
    );
    let e = &s["sse_streams"];
    let _ = writeln!(
        md,
        "- sse_streams: {} GET streams, {} KiB each; held {} s: {} ms CPU ({}% of one core)",
        cell(&e["streams"]),
        cell(&doc["sse_stream_kib"]),
        cell(&e["hold_s"]),
        cell(&e["hold_cpu_ms"]),
        cell(&e["cpu_pct_of_one_core"])
    );
    if let Some(peers) = s["stdio_echo"]["c1"]["peers"].as_object() {
        md.push_str("\n## Peers (stdio echo backend behind each gateway)\n\n");
        md.push_str("| gateway | C | rps | ratio vs direct | p50 µs | added p50 | added p99 | CPU µs/call | mcpgate faster by |\n|---|---|---|---|---|---|---|---|---|\n");
        for c in ["c1", "c16"] {
            let e = &s["stdio_echo"][c];
            let _ = writeln!(
                md,
                "| mcpgate | {} | {} | {} | {} | {} | {} | {} | |",
                &c[1..],
                cell(&e["gateway_rps"]),
                cell(&e["ratio"]),
                cell(&e["gateway_p50_us"]),
                cell(&e["added_p50_us"]),
                cell(&e["added_p99_us"]),
                cell(&e["gateway_cpu_us_per_call"])
            );
            for name in peers.keys() {
                let p = &e["peers"][name];
                let _ = writeln!(
                    md,
                    "| {name} {} | {} | {} | {} | {} | {} | {} | {} | {}× |",
                    cell(&doc["peer_versions"][name]),
                    &c[1..],
                    cell(&p["rps"]),
                    cell(&p["ratio"]),
                    cell(&p["p50_us"]),
                    cell(&p["added_p50_us"]),
                    cell(&p["added_p99_us"]),
                    cell(&p["cpu_us_per_call"]),
                    cell(&p["mcpgate_speedup"])
                );
            }
        }
    }
    instructions_section(doc, &mut md);
    md.push_str("\n## Targets\n\n| target | value | met |\n|---|---|---|\n");
    for t in doc["targets"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            cell(&t["target"]),
            cell(&t["value"]),
            cell(&t["met"])
        );
    }
    md
}

/// The instruction counts of `scripts/bench.sh --instructions`, when the results
/// file has them (they may come from another commit than the timed scenarios).
fn instructions_section(doc: &Value, md: &mut String) {
    let i = &doc["instructions"];
    let Some(scenarios) = i["scenarios"].as_object() else {
        return;
    };
    md.push_str("\n## Instructions per call (callgrind)\n\n");
    let _ = writeln!(
        md,
        "Gateway process only ({} tokio worker), (Ir(N2) − Ir(N1)) / (N2 − N1) with N1 = {}, N2 = {} calls; \
         {} · commit `{}` · {}. Steady to ≈1 % between runs (times drift ±25 %): the \
         figure to compare builds with. Syscalls (callgrind's sysCount, without \
         `clock_gettime`, which is a vDSO call natively) show part of the kernel's share, \
         which instructions do not count. Per-call top symbols: `bench/results/callgrind/*.top.txt`.\n",
        cell(&i["tokio_workers"]),
        cell(&i["n1"]),
        cell(&i["n2"]),
        cell(&i["date"]),
        cell(&i["commit"]),
        cell(&i["counter"]),
    );
    md.push_str("| scenario | C | request | instructions/call | syscalls/call | clock_gettime/call | spread of repeats % |\n|---|---|---|---|---|---|---|\n");
    for (key, e) in scenarios {
        let _ = writeln!(
            md,
            "| {key} | {} | {} | {} | {} | {} | {} |",
            cell(&e["concurrency"]),
            cell(&e["request"]),
            cell(&e["per_call"]),
            cell(&e["syscalls_per_call"]),
            cell(&e["clock_reads_per_call"]),
            if e["runs"].as_array().is_some_and(|r| r.len() > 1) {
                cell(&e["spread_pct"])
            } else {
                "–".into()
            },
        );
    }
    // `[cluster]` on against off, same scenario (issue 11: ≤ 1.10).
    for (key, e) in scenarios {
        let Some(base) = key.strip_suffix("_cluster") else {
            continue;
        };
        if let (Some(on), Some(off)) = (
            e["per_call"].as_f64(),
            scenarios.get(base).and_then(|b| b["per_call"].as_f64()),
        ) && off > 0.0
        {
            let _ = writeln!(
                md,
                "\n`{base}` with `[cluster]` (a local Redis) against without: {on:.0} / {off:.0} = {:.3}",
                on / off
            );
        }
    }
}
