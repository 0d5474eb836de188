//! The load test's report: wrk's text layout (plus 99.9% and 99.99% in the latency
//! distribution and, with --server-pid, the server's CPU per 1000 requests), or JSON.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::load::ThreadResult;
use crate::units;

/// Socket errors, counted as wrk counts them.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
}

impl Errors {
    pub fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
    }
    pub fn any(&self) -> bool {
        self.total() > 0
    }
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout
    }
}

/// Everything the threads measured, merged.
pub struct Summary {
    pub url: String,
    pub threads: usize,
    pub connections: usize,
    pub duration: Duration,
    pub latency: Histogram<u64>,
    pub rate_samples: Vec<f64>,
    pub requests: u64,
    pub bytes: u64,
    pub errors: Errors,
    pub non_2xx_3xx: u64,
    /// The longest thread's run time.
    pub elapsed: Duration,
    /// (pid, CPU seconds the server spent during the run).
    pub server_cpu: Option<(u32, f64)>,
    /// `--rate`: the total rate asked for.
    pub rate_target: Option<f64>,
    /// `--rate`: requests due by the end without a response (see `ThreadResult`).
    pub unfinished: u64,
    /// `--h3`: response body bytes in all.
    pub body_bytes: Option<u64>,
    /// `--h3`: the first error a thread met, in words.
    pub first_error: Option<String>,
}

impl Summary {
    pub fn merge(
        url: &str,
        connections: usize,
        duration: Duration,
        results: Vec<ThreadResult>,
    ) -> Result<Summary, hdrhistogram::CreationError> {
        let mut s = Summary {
            url: url.to_string(),
            threads: results.len(),
            connections,
            duration,
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)?,
            rate_samples: Vec::new(),
            requests: 0,
            bytes: 0,
            errors: Errors::default(),
            non_2xx_3xx: 0,
            elapsed: Duration::ZERO,
            server_cpu: None,
            rate_target: None,
            unfinished: 0,
            body_bytes: None,
            first_error: None,
        };
        for r in results {
            let _ = s.latency.add(&r.latency);
            s.rate_samples.extend(r.rate_samples);
            s.requests += r.requests;
            s.bytes += r.bytes;
            s.errors.add(&r.errors);
            s.non_2xx_3xx += r.non_2xx_3xx;
            s.elapsed = s.elapsed.max(r.elapsed);
            s.unfinished += r.unfinished;
            if let Some(b) = r.body_bytes {
                *s.body_bytes.get_or_insert(0) += b;
            }
            if s.first_error.is_none() {
                s.first_error = r.first_error;
            }
        }
        Ok(s)
    }

    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The percentiles printed under --latency.
    const PERCENTILES: [f64; 6] = [50.0, 75.0, 90.0, 99.0, 99.9, 99.99];

    pub fn text(&self, with_distribution: bool) -> String {
        let mut out = String::new();
        self.text_heading(&mut out);
        self.text_thread_stats(&mut out, with_distribution);
        self.text_totals(&mut out);
        out
    }

    /// What ran: duration, URL, threads and connections, and the stats table's heading.
    fn text_heading(&self, out: &mut String) {
        line(
            out,
            format!(
                "Running {} test @ {}",
                units::duration_secs(self.duration.as_secs_f64()),
                self.url
            ),
        );
        line(
            out,
            format!(
                "  {} threads and {} connections",
                self.threads, self.connections
            ),
        );
        line(
            out,
            format!(
                "  Thread Stats{:>6}{:>11}{:>8}{:>12}",
                "Avg", "Stdev", "Max", "+/- Stdev"
            ),
        );
    }

    /// The Latency and Req/Sec rows, and the latency percentiles under --latency.
    fn text_thread_stats(&self, out: &mut String, with_distribution: bool) {
        let lat = &self.latency;
        let (mean, stdev) = (lat.mean(), lat.stdev());
        let within = if lat.is_empty() {
            0.0
        } else {
            let inside: u64 = lat
                .iter_recorded()
                .filter(|v| (v.value_iterated_to() as f64 - mean).abs() <= stdev)
                .map(|v| v.count_at_value())
                .sum();
            100.0 * inside as f64 / lat.len() as f64
        };
        line(
            out,
            stats_row(
                "Latency",
                units::time_us(mean),
                units::time_us(stdev),
                units::time_us(lat.max() as f64),
                within,
            ),
        );
        let (rmean, rstdev, rmax, rwithin) = sample_stats(&self.rate_samples);
        line(
            out,
            stats_row(
                "Req/Sec",
                units::metric(rmean),
                units::metric(rstdev),
                units::metric(rmax),
                rwithin,
            ),
        );
        if with_distribution {
            line(out, "  Latency Distribution".to_string());
            for p in Self::PERCENTILES {
                let label = format!("{}%", p);
                let v = lat.value_at_quantile(p / 100.0) as f64;
                line(
                    out,
                    format!("{label:>8}{}", units::column(&units::time_us(v), 10)),
                );
            }
        }
    }

    /// Requests, bytes, errors, rates and the server's CPU.
    fn text_totals(&self, out: &mut String) {
        line(
            out,
            format!(
                "  {} requests in {}, {} read",
                self.requests,
                units::time_us(self.elapsed.as_secs_f64() * 1e6),
                units::binary(self.bytes as f64)
            ),
        );
        let e = &self.errors;
        if e.any() {
            line(
                out,
                format!(
                    "  Socket errors: connect {}, read {}, write {}, timeout {}",
                    e.connect, e.read, e.write, e.timeout
                ),
            );
        }
        if self.non_2xx_3xx > 0 {
            line(
                out,
                format!("  Non-2xx or 3xx responses: {}", self.non_2xx_3xx),
            );
        }
        line(
            out,
            format!("Requests/sec: {:>9.2}", self.requests as f64 / self.secs()),
        );
        line(
            out,
            format!(
                "Transfer/sec: {:>10}",
                units::binary(self.bytes as f64 / self.secs())
            ),
        );
        if let Some(target) = self.rate_target {
            line(
                out,
                format!(
                    "Rate asked:   {target:.2}/s; due by the end without a response: {}",
                    self.unfinished
                ),
            );
        }
        if let Some((pid, cpu)) = self.server_cpu {
            line(
                out,
                format!(
                    "Server CPU:   {:.3}s per 1000 requests ({cpu:.2}s total, pid {pid})",
                    cpu_per_1000(cpu, self.requests)
                ),
            );
        }
    }

    pub fn json(&self) -> String {
        let lat = &self.latency;
        let (rmean, rstdev, rmax, _) = sample_stats(&self.rate_samples);
        let percentiles: Vec<(String, u64)> = Self::PERCENTILES
            .iter()
            .map(|p| (format!("p{p}"), lat.value_at_quantile(p / 100.0)))
            .collect();
        let report = JsonReport {
            mode: "load",
            url: &self.url,
            threads: self.threads,
            connections: self.connections,
            duration_secs: self.elapsed.as_secs_f64(),
            requests: self.requests,
            bytes: self.bytes,
            body_bytes: self.body_bytes,
            requests_per_sec: self.requests as f64 / self.secs(),
            bytes_per_sec: self.bytes as f64 / self.secs(),
            errors: self.errors,
            non_2xx_3xx: self.non_2xx_3xx,
            latency_us: LatencyJson {
                mean: lat.mean(),
                stdev: lat.stdev(),
                max: lat.max(),
                percentiles: percentiles.into_iter().collect(),
            },
            thread_req_per_sec: RateJson {
                mean: rmean,
                stdev: rstdev,
                max: rmax,
            },
            rate_target: self.rate_target,
            rate_unfinished: self.rate_target.map(|_| self.unfinished),
            server_pid: self.server_cpu.map(|s| s.0),
            server_cpu_secs: self.server_cpu.map(|s| s.1),
            server_cpu_secs_per_1000_requests: self
                .server_cpu
                .map(|s| cpu_per_1000(s.1, self.requests)),
        };
        serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

fn cpu_per_1000(cpu: f64, requests: u64) -> f64 {
    cpu * 1000.0 / (requests.max(1) as f64)
}

fn stats_row(name: &str, avg: String, stdev: String, max: String, within: f64) -> String {
    format!(
        "    {name:<10}{}{}{}{within:>8.2}%",
        units::column(&avg, 8),
        units::column(&stdev, 10),
        units::column(&max, 9)
    )
}

/// Mean, standard deviation, maximum, and the share of samples within one deviation.
fn sample_stats(samples: &[f64]) -> (f64, f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let var = if samples.len() > 1 {
        samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    let stdev = var.sqrt();
    let max = samples.iter().cloned().fold(0.0, f64::max);
    let within = samples
        .iter()
        .filter(|s| (*s - mean).abs() <= stdev)
        .count() as f64;
    (mean, stdev, max, 100.0 * within / n)
}

#[derive(Serialize)]
struct JsonReport<'a> {
    mode: &'static str,
    url: &'a str,
    threads: usize,
    connections: usize,
    duration_secs: f64,
    requests: u64,
    bytes: u64,
    /// `--h3` only: the response bodies' bytes (`bytes` counts the UDP payloads received).
    #[serde(skip_serializing_if = "Option::is_none")]
    body_bytes: Option<u64>,
    requests_per_sec: f64,
    bytes_per_sec: f64,
    errors: Errors,
    non_2xx_3xx: u64,
    latency_us: LatencyJson,
    thread_req_per_sec: RateJson,
    /// `--rate`: the rate asked for, and the requests due by the end that got no response.
    rate_target: Option<f64>,
    rate_unfinished: Option<u64>,
    server_pid: Option<u32>,
    server_cpu_secs: Option<f64>,
    server_cpu_secs_per_1000_requests: Option<f64>,
}

#[derive(Serialize)]
struct LatencyJson {
    mean: f64,
    stdev: f64,
    max: u64,
    percentiles: std::collections::BTreeMap<String, u64>,
}

#[derive(Serialize)]
struct RateJson {
    mean: f64,
    stdev: f64,
    max: f64,
}

/// Appends `s` and a newline.
fn line(out: &mut String, s: String) {
    out.push_str(&s);
    out.push('\n');
}
