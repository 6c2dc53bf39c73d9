//! `baton doctor`'s knowledge: what it reads from a deployment
//! ([`gather`]), the checks over those facts ([`check`]), and the report.
//!
//! Every check names its fix. The facts about servers come from the
//! caller, which knows how to reach them; the rest is read here.

mod checks;
mod facts;
mod finding;
pub mod gather;
pub mod signins;
pub mod storage;
#[cfg(test)]
mod tests;
mod workers;

use baton_proto::Subjects;
use baton_proto::footprint::Footprint;

pub use checks::MIN_VERSION;
pub use facts::{ConsumerFacts, Facts, LimitFacts, ServerFacts, SignInFacts, StreamFacts, Sync};
pub use finding::{Finding, Level};

/// Every check over `facts`, in order.
#[must_use]
pub fn check(facts: &Facts) -> Vec<Finding> {
    checks::all(facts)
}

/// The findings as JSON: each one, and how many errors and warnings.
#[must_use]
pub fn report(findings: &[Finding]) -> serde_json::Value {
    let errors = findings.iter().filter(|f| f.level == Level::Error).count();
    let warnings = findings.iter().filter(|f| f.level == Level::Warn).count();
    serde_json::json!({
        "findings": findings,
        "errors": errors,
        "warnings": warnings,
    })
}

/// What the doctor reads beyond the streams: every consumer of the tasks
/// stream, the joins bucket, and the registry's live workers.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    gather::footprint(subjects)
}

/// The findings as text: one line each, its fix indented below.
#[must_use]
pub fn render(findings: &[Finding]) -> String {
    let mut text = String::new();
    for finding in findings {
        let mark = match finding.level {
            Level::Ok => "ok   ",
            Level::Info => "info ",
            Level::Warn => "WARN ",
            Level::Error => "ERROR",
        };
        text.push_str(&format!(
            "{mark} {:<9} {}\n",
            finding.check, finding.message
        ));
        if let Some(fix) = &finding.fix {
            text.push_str(&format!("{:16}fix: {fix}\n", ""));
        }
    }
    let count = |level| findings.iter().filter(|f| f.level == level).count();
    text.push_str(&format!(
        "{} error(s), {} warning(s)\n",
        count(Level::Error),
        count(Level::Warn)
    ));
    text
}
