//! The main table's two halves: each side's medians, and the ratios.

use super::{Figures, Side, median};

/// Each side's median figures over its rounds.
pub(super) fn print_sides(rounds: &[Vec<Figures>]) {
    println!();
    println!(
        "{:<26} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "", "tasks/s", "hops/s", "hop p50 µs", "hop p99 µs", "writes/hop"
    );
    for side in Side::ALL {
        let runs = &rounds[side as usize];
        if runs.is_empty() {
            continue; // `--only`: one side ran.
        }
        let median = |pick: fn(&Figures) -> f64| median(runs.iter().map(pick));
        println!(
            "{:<26} {:>10.0} {:>10.0} {:>12.0} {:>12.0} {:>12.2}",
            side.label(),
            median(|f| f.tasks_per_sec),
            median(|f| f.hops_per_sec),
            median(|f| f.p50_us),
            median(|f| f.p99_us),
            median(|f| f.writes_per_hop)
        );
    }
}

/// The ratios between sides: the median of each round's ratio, and each
/// round's throughput ratio.
pub(super) fn print_ratios(rounds: &[Vec<Figures>]) {
    if rounds.iter().filter(|runs| !runs.is_empty()).count() < 2 {
        return; // `--only`: one side ran, no ratio to show.
    }
    println!();
    println!(
        "{:<26} {:>10} {:>10} {:>12} {:>12}   tasks/s by round",
        "ratio (median of rounds)", "tasks/s", "hops/s", "hop p50", "hop p99"
    );
    for (name, side, base) in [
        ("full / raw", Side::Full, Side::Raw),
        ("full / same writes", Side::Full, Side::SameWrites),
        ("full / unfolded", Side::Full, Side::Unfolded),
        ("unfolded / 3 writes", Side::Unfolded, Side::ThreeWrites),
        ("plain / confirmed", Side::Full, Side::Confirmed),
        ("lean / raw", Side::Lean, Side::Raw),
        ("lean / full", Side::Lean, Side::Full),
        ("versioned / full", Side::Versioned, Side::Full),
    ] {
        let (side, base) = (&rounds[side as usize], &rounds[base as usize]);
        // Each round's ratio, then their median: the two sides of a ratio
        // ran seconds apart within a round, not the whole run apart.
        let ratio = |pick: fn(&Figures) -> f64| -> Vec<f64> {
            side.iter()
                .zip(base)
                .map(|(s, b)| pick(s) / pick(b))
                .collect()
        };
        let throughput = ratio(|f| f.tasks_per_sec);
        let by_round: Vec<String> = throughput.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{name:<26} {:>10.2} {:>10.2} {:>12.2} {:>12.2}   {}",
            median(throughput.iter().copied()),
            median(ratio(|f| f.hops_per_sec).into_iter()),
            median(ratio(|f| f.p50_us).into_iter()),
            median(ratio(|f| f.p99_us).into_iter()),
            by_round.join(" ")
        );
    }
}

/// What each side's hop costs in CPU: the bench's process (the stages and
/// the client) and the nats-server it started, medians of the rounds; then
/// Baton's total against the raw relays'.
pub(super) fn print_cpu(rounds: &[Vec<Figures>]) {
    println!();
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>10}",
        "cpu per hop (µs)", "worker", "server", "total", "bytes in"
    );
    for side in Side::ALL {
        let runs = &rounds[side as usize];
        if runs.is_empty() {
            continue;
        }
        let median = |pick: fn(&Figures) -> f64| cell(median(runs.iter().map(pick)));
        println!(
            "{:<26} {:>8} {:>8} {:>8} {:>10}",
            side.label(),
            median(|f| f.cpu_worker_us),
            median(|f| f.cpu_server_us),
            median(|f| f.cpu_worker_us + f.cpu_server_us),
            median(|f| f.bytes_per_hop)
        );
    }
    let cpu = |f: &Figures| f.cpu_worker_us + f.cpu_server_us;
    let bytes = |f: &Figures| f.bytes_per_hop;
    for (name, side, base, pick) in [
        (
            "full / same writes cpu",
            Side::Full,
            Side::SameWrites,
            cpu as fn(&Figures) -> f64,
        ),
        ("lean / raw cpu", Side::Lean, Side::Raw, cpu),
        (
            "full / same writes bytes",
            Side::Full,
            Side::SameWrites,
            bytes,
        ),
        ("lean / raw bytes", Side::Lean, Side::Raw, bytes),
    ] {
        let (side, base) = (&rounds[side as usize], &rounds[base as usize]);
        if side.is_empty() || base.is_empty() {
            continue;
        }
        let ratio = median(side.iter().zip(base).map(|(s, b)| pick(s) / pick(b)));
        if ratio.is_finite() {
            println!("{name} {ratio:.2}");
        } else {
            println!("{name} -");
        }
    }
    println!(
        "cpu: user + system time from the process counters over each round's measured tasks, \
         per hop; the worker column is the bench's own process (the stages and the client); \
         the server's is known when the bench started it (no --nats-url); bytes in: what that \
         server received per hop (its /varz in_bytes: messages and headers)"
    );
}

/// A CPU figure in whole µs, or `-` when it is not known.
fn cell(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.0}")
    } else {
        "-".to_owned()
    }
}
