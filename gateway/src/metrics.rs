//! Process metrics for `GET /metrics`, in the Prometheus text format (DESIGN.md §10).
//!
//! One registry per process ([`metrics()`]): counters and a latency histogram kept in atomics
//! and small label maps, gauges read when scraped. Labels are only low-cardinality names — a
//! source, a platform, a provider kind, an error class — never a user, conversation or session
//! id, so the series count stays bounded whatever the traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds (seconds) of the model-call latency buckets.
const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// Counters by label values.
#[derive(Default)]
struct Family(Mutex<BTreeMap<Vec<String>, f64>>);

impl Family {
    fn add(&self, labels: &[&str], value: f64) {
        if let Ok(mut map) = self.0.lock() {
            *map.entry(labels.iter().map(|l| (*l).to_owned()).collect())
                .or_default() += value;
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str, kind: &str, labels: &[&str]) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        let Ok(map) = self.0.lock() else { return };
        for (values, total) in map.iter() {
            let _ = writeln!(out, "{name}{} {total}", label_set(labels, values));
        }
    }
}

/// One series of a histogram: counts per bucket, the sum and the count of observations.
type Series = (Vec<u64>, f64, u64);

/// A latency histogram per label value.
#[derive(Default)]
struct Histogram(Mutex<BTreeMap<String, Series>>);

impl Histogram {
    fn observe(&self, label: &str, seconds: f64) {
        let Ok(mut map) = self.0.lock() else { return };
        let (buckets, sum, count) = map
            .entry(label.to_owned())
            .or_insert_with(|| (vec![0; LATENCY_BUCKETS.len()], 0.0, 0));
        for (bucket, bound) in buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        *sum += seconds;
        *count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let Ok(map) = self.0.lock() else { return };
        for (value, (buckets, sum, count)) in map.iter() {
            for (bucket, bound) in buckets.iter().zip(LATENCY_BUCKETS) {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{{label}=\"{value}\",le=\"{bound}\"}} {bucket}"
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{{label}=\"{value}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(out, "{name}_sum{{{label}=\"{value}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{{label}=\"{value}\"}} {count}");
        }
    }
}

/// A gauge read at scrape time.
type Gauge = Box<dyn Fn() -> f64 + Send + Sync>;

/// The process's metrics.
#[derive(Default)]
pub struct Metrics {
    turns: Family,
    model_calls: Family,
    model_latency: Histogram,
    tokens: Family,
    /// Estimated cost in micro-dollars (an integer, so concurrent adds are exact).
    cost_micro_usd: AtomicU64,
    compressions: AtomicU64,
    errors: Family,
    deliveries: Family,
    messages: Family,
    gauges: Mutex<Vec<(&'static str, &'static str, Gauge)>>,
}

/// The process-wide registry.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

impl Metrics {
    /// A message taken in from `source`.
    pub fn message_received(&self, source: &str) {
        self.messages.add(&[source], 1.0);
    }

    /// A turn of a `source` conversation ended: `ok`, `error` or `interrupted`.
    pub fn turn_finished(&self, source: &str, outcome: &str, compressions: u32) {
        self.turns.add(&[source, outcome], 1.0);
        self.compressions
            .fetch_add(u64::from(compressions), Ordering::Relaxed);
    }

    /// A turn failed with an error of `class` (`rate_limit`, `auth`, `store`…).
    pub fn error(&self, class: &str) {
        self.errors.add(&[class], 1.0);
    }

    /// One model call: the provider kind, `ok` or the error class, how long it took, and what
    /// it used and cost.
    pub fn model_call(
        &self,
        kind: &str,
        outcome: &str,
        took: Duration,
        tokens: Option<(u64, u64)>,
        cost_usd: f64,
    ) {
        self.model_calls.add(&[kind, outcome], 1.0);
        self.model_latency.observe(kind, took.as_secs_f64());
        if let Some((input, output)) = tokens {
            self.tokens.add(&["in"], input as f64);
            self.tokens.add(&["out"], output as f64);
        }
        if cost_usd.is_finite() && cost_usd > 0.0 {
            self.cost_micro_usd
                .fetch_add((cost_usd * 1e6).round() as u64, Ordering::Relaxed);
        }
    }

    /// A reply on `platform`: `delivered`, `retry` (a failed attempt to be made again) or
    /// `failed` (given up).
    pub fn delivery(&self, platform: &str, outcome: &str) {
        self.deliveries.add(&[platform, outcome], 1.0);
    }

    /// Registers a gauge read at each scrape (queue depth, resident conversations…).
    pub fn gauge(&self, name: &'static str, help: &'static str, read: Gauge) {
        if let Ok(mut gauges) = self.gauges.lock() {
            gauges.retain(|(n, _, _)| *n != name);
            gauges.push((name, help, read));
        }
    }

    /// Everything, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.messages.render(
            &mut out,
            "iris_messages_received_total",
            "Messages taken in, by source.",
            "counter",
            &["source"],
        );
        self.turns.render(
            &mut out,
            "iris_turns_total",
            "Turns finished, by source and outcome.",
            "counter",
            &["source", "outcome"],
        );
        self.model_calls.render(
            &mut out,
            "iris_model_calls_total",
            "Model calls, by provider kind and outcome (ok or the error class).",
            "counter",
            &["provider", "outcome"],
        );
        self.model_latency.render(
            &mut out,
            "iris_model_call_duration_seconds",
            "Model call latency, by provider kind.",
            "provider",
        );
        self.tokens.render(
            &mut out,
            "iris_tokens_total",
            "Tokens the model calls used, by direction (in = prompt, out = completion).",
            "counter",
            &["direction"],
        );
        let cost = self.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "# HELP iris_estimated_cost_usd_total Estimated model cost, US dollars.\n# TYPE iris_estimated_cost_usd_total counter\niris_estimated_cost_usd_total {cost}"
        );
        let compressions = self.compressions.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP iris_compressions_total Context compressions inside turns.\n# TYPE iris_compressions_total counter\niris_compressions_total {compressions}"
        );
        self.errors.render(
            &mut out,
            "iris_errors_total",
            "Failed turns, by error class.",
            "counter",
            &["class"],
        );
        self.deliveries.render(
            &mut out,
            "iris_deliveries_total",
            "Reply deliveries, by platform and outcome (delivered, retry, failed).",
            "counter",
            &["platform", "outcome"],
        );
        if let Ok(gauges) = self.gauges.lock() {
            for (name, help, read) in gauges.iter() {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                    read()
                );
            }
        }
        out
    }
}

/// `{a="x",b="y"}`, values escaped as the format requires.
fn label_set(names: &[&str], values: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{n}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_histograms_and_gauges_render_in_the_text_format() {
        let m = Metrics::default();
        m.turn_finished("telegram", "ok", 1);
        m.turn_finished("telegram", "ok", 0);
        m.model_call(
            "openai",
            "ok",
            Duration::from_millis(300),
            Some((100, 20)),
            0.0015,
        );
        m.model_call("openai", "rate_limit", Duration::from_secs(3), None, 0.0);
        m.delivery("discord", "retry");
        m.gauge("iris_queue_depth", "Messages waiting.", Box::new(|| 3.0));
        let text = m.render();
        for line in [
            "iris_turns_total{source=\"telegram\",outcome=\"ok\"} 2",
            "iris_model_calls_total{provider=\"openai\",outcome=\"rate_limit\"} 1",
            "iris_model_call_duration_seconds_bucket{provider=\"openai\",le=\"0.5\"} 1",
            "iris_model_call_duration_seconds_bucket{provider=\"openai\",le=\"5\"} 2",
            "iris_model_call_duration_seconds_count{provider=\"openai\"} 2",
            "iris_tokens_total{direction=\"in\"} 100",
            "iris_estimated_cost_usd_total 0.0015",
            "iris_compressions_total 1",
            "iris_deliveries_total{platform=\"discord\",outcome=\"retry\"} 1",
            "iris_queue_depth 3",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert_eq!(label_set(&["a"], &["x\"y".into()]), "{a=\"x\\\"y\"}");
    }
}
