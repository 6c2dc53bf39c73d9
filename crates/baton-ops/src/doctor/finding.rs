//! What a check reports: a finding, how serious it is, and its fix.

use serde::Serialize;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// As it should be.
    Ok,
    /// Worth knowing.
    Info,
    /// Works, but risks losing or doubling work; fix it.
    Warn,
    /// Broken.
    Error,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Which check: servers, replicas, dedup, payload, fsync, consumers.
    pub check: &'static str,
    /// How bad.
    pub level: Level,
    /// What it is about: a server, a stream, a consumer.
    pub subject: String,
    /// What was found.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn new(
        check: &'static str,
        level: Level,
        subject: impl Into<String>,
        message: String,
    ) -> Self {
        Self {
            check,
            level,
            subject: subject.into(),
            message,
            fix: None,
        }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}
