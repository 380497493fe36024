//! A profiler in the manner of `torch.profiler`: [`profile`] runs a closure while every op,
//! every derivative rule that backward runs (`matmul backward`) and every range named with
//! [`record_function`] is timed, and gives a [`Profile`]: a table by op, sorted by total time,
//! with the bytes of the tensors each op made, the floating-point operations of the products
//! and convolutions, and the most threads its kernels ran on; and a Chrome trace that Perfetto
//! (`ui.perfetto.dev`) or `chrome://tracing` opens.
//!
//! Off, each op pays one relaxed atomic load: `bench_autograd`'s scalar graph (about 200 ns a
//! node) ran as fast with the recording compiled in as without. On, an op costs 0.13–0.23 µs
//! more (two clock reads and a lock; measured from Python on a chain of scalar products), which
//! the table's smallest entries include.
//!
//! ```
//! use ferrograd::prelude::*;
//! use ferrograd::profiler::{profile, record_function};
//!
//! let w = Tensor::ones(&[64, 64], DType::F32).requires_grad();
//! let x = Tensor::ones(&[8, 64], DType::F32);
//! let (_, report) = profile(|| {
//!     let _step = record_function("step");
//!     x.matmul(&w).relu().sum().backward()
//! });
//! let table = report.table();
//! assert!(table.contains("matmul") && table.contains("matmul backward") && table.contains("step"));
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::tensor::profile::{scope, start, stop};
pub use crate::tensor::profile::{Event, Scope};

/// Runs `f` while recording, and gives its result with the profile. Profiles do not nest: a
/// profile started while another records panics.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Profile) {
    assert!(
        start(),
        "profile: another profile is already being recorded"
    );
    // Stops recording even when `f` panics.
    struct Recording(bool);
    impl Drop for Recording {
        fn drop(&mut self) {
            if !self.0 {
                stop();
            }
        }
    }
    let mut recording = Recording(false);
    let out = f();
    recording.0 = true;
    let events = stop();
    (out, Profile { events })
}

/// Starts recording; the caller stops it with [`stop_recording`] (for bindings whose scopes are
/// not closures). False when a profile is already being recorded.
pub fn start_recording() -> bool {
    start()
}

/// Stops recording and gives what was recorded since [`start_recording`].
pub fn stop_recording() -> Profile {
    Profile { events: stop() }
}

/// Times the scope until the returned guard drops, under `name`, as `torch.profiler`'s
/// `record_function` does (nothing when no profile is being recorded).
pub fn record_function(name: &str) -> Option<Scope> {
    scope(name.to_string())
}

/// The calls of one name.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStats {
    /// The op, rule or range.
    pub name: String,
    /// How many times it ran.
    pub calls: u64,
    /// Nanoseconds, nested scopes included.
    pub total_ns: u64,
    /// Nanoseconds outside nested scopes.
    pub self_ns: u64,
    /// Bytes of the tensors made, nested scopes included.
    pub bytes: u64,
    /// Bytes of the tensors made outside nested scopes.
    pub self_bytes: u64,
    /// Floating-point operations of its products and convolutions, nested included.
    pub flops: u64,
    /// The most threads a kernel inside it ran on.
    pub threads: usize,
}

/// The order of [`Profile::table_sorted`]'s rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Total time, nested scopes included (`cpu_time_total`).
    Total,
    /// Time outside nested scopes (`self_cpu_time_total`).
    SelfTime,
    /// Number of calls (`count`).
    Calls,
}

impl SortBy {
    /// PyTorch's name for the order: `cpu_time_total`, `self_cpu_time_total`, `count`
    /// (`calls`), or None for another.
    pub fn parse(name: &str) -> Option<SortBy> {
        match name {
            "cpu_time_total" | "cpu_time" | "total" => Some(SortBy::Total),
            "self_cpu_time_total" | "self_cpu_time" | "self" => Some(SortBy::SelfTime),
            "count" | "calls" => Some(SortBy::Calls),
            _ => None,
        }
    }
}

/// What a profile recorded.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    events: Vec<Event>,
}

impl Profile {
    /// Every recorded scope, in the order they closed.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The calls grouped by name, by total time, longest first.
    pub fn key_averages(&self) -> Vec<OpStats> {
        let mut by_name: HashMap<&str, OpStats> = HashMap::new();
        for e in &self.events {
            let s = by_name.entry(&e.name).or_insert_with(|| OpStats {
                name: e.name.clone(),
                calls: 0,
                total_ns: 0,
                self_ns: 0,
                bytes: 0,
                self_bytes: 0,
                flops: 0,
                threads: 0,
            });
            s.calls += 1;
            s.total_ns += e.total_ns;
            s.self_ns += e.self_ns;
            s.bytes += e.bytes;
            s.self_bytes += e.self_bytes;
            s.flops += e.flops;
            s.threads = s.threads.max(e.threads);
        }
        let mut stats: Vec<OpStats> = by_name.into_values().collect();
        stats.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        stats
    }

    /// [`Profile::table_sorted`] by total time, every row.
    pub fn table(&self) -> String {
        self.table_sorted(SortBy::Total, usize::MAX)
    }

    /// A text table, one row per name (`torch.profiler`'s columns: self time and its share,
    /// total time and its share, the mean, the calls; then the bytes of the tensors it made
    /// itself, its products' floating-point operations and the most threads its kernels ran
    /// on), the first `rows` in `order`.
    pub fn table_sorted(&self, order: SortBy, rows: usize) -> String {
        let mut stats = self.key_averages();
        match order {
            SortBy::Total => {}
            SortBy::SelfTime => stats.sort_by_key(|s| std::cmp::Reverse(s.self_ns)),
            SortBy::Calls => stats.sort_by_key(|s| std::cmp::Reverse(s.calls)),
        }
        // Shares are of the time outside every scope's parent: the sum of self times.
        let whole = stats.iter().map(|s| s.self_ns).sum::<u64>().max(1) as f64;
        let width = stats
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(4)
            .clamp(4, 60);
        let mut out = format!(
            "{:<width$}  {:>10}  {:>7}  {:>10}  {:>7}  {:>10}  {:>8}  {:>10}  {:>9}  {:>7}\n",
            "Name",
            "Self",
            "Self %",
            "Total",
            "Total %",
            "Mean",
            "Calls",
            "Self mem",
            "FLOPs",
            "Threads"
        );
        out += &"-".repeat(width + 100);
        out.push('\n');
        for s in stats.iter().take(rows) {
            let _ = writeln!(
                out,
                "{:<width$}  {:>10}  {:>6.1}%  {:>10}  {:>6.1}%  {:>10}  {:>8}  {:>10}  {:>9}  {:>7}",
                s.name,
                duration(s.self_ns),
                100.0 * s.self_ns as f64 / whole,
                duration(s.total_ns),
                100.0 * s.total_ns as f64 / whole,
                duration(s.total_ns / s.calls.max(1)),
                s.calls,
                bytes(s.self_bytes),
                count(s.flops),
                s.threads
            );
        }
        let _ = writeln!(out, "Self time in all: {}", duration(whole as u64));
        out
    }

    /// The events as a Chrome trace (JSON of complete events, times in microseconds, a row
    /// per recording thread).
    pub fn chrome_trace(&self) -> String {
        let mut out = String::from("{\"traceEvents\":[");
        for (i, e) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"name\":{},\"cat\":\"op\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":0,\"tid\":{},\
                 \"args\":{{\"bytes\":{},\"flops\":{},\"threads\":{}}}}}",
                json_string(&e.name),
                e.start_ns as f64 / 1e3,
                e.total_ns as f64 / 1e3,
                e.thread,
                e.bytes,
                e.flops,
                e.threads
            );
        }
        out + "],\"displayTimeUnit\":\"ms\"}"
    }

    /// Writes [`Profile::chrome_trace`] to `path`.
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.chrome_trace()).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// `1.234ms`, `56.7us`, `890ns`.
fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3}s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.3}ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.3}us", n as f64 / 1e3),
        n => format!("{n}ns"),
    }
}

/// `1.50 MB`, `512 B`: powers of 1000, as `torch.profiler`'s memory columns.
fn bytes(b: u64) -> String {
    scaled(b, ["B", "kB", "MB", "GB"], "0 B")
}

/// `2.36 G`, `12.5 k`, `--` for none.
fn count(n: u64) -> String {
    scaled(n, ["", "k", "M", "G"], "--")
}

/// `n` with two decimals in the largest power of 1000 it reaches, named by `units` (for 1,
/// 10³, 10⁶, 10⁹); `zero` for 0, and a whole number below 1000.
fn scaled(n: u64, units: [&str; 4], zero: &str) -> String {
    let power = [1e9, 1e6, 1e3].iter().position(|&p| n as f64 >= p);
    match (n, power) {
        (0, _) => zero.to_string(),
        (n, None) => format!("{n} {}", units[0]).trim_end().to_string(),
        (n, Some(i)) => format!("{:.2} {}", n as f64 / [1e9, 1e6, 1e3][i], units[3 - i]),
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out + "\""
}
