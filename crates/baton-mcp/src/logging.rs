//! MCP logging: a client that sets a level (`logging/setLevel`) gets the
//! events of the sessions its calls run as log notifications at that level
//! and above, each with the session, the event's type, the agent and the
//! event as a line of text. A client that sets none gets none. The level
//! is the MCP session's own: each session of the HTTP server starts
//! without one.
//!
//! MCP 2025-11-25 has logging, and its conformance suite checks it. SEP-2577
//! deprecates it from protocol version 2026-07-28, keeping it working
//! through a deprecation window; `rmcp` marks it deprecated accordingly.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use baton_proto::{Event, EventType};
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};

/// The level an MCP session set, if it set one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level(Arc<Mutex<Option<LoggingLevel>>>);

impl Level {
    pub(crate) fn set(&self, level: LoggingLevel) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(level);
    }

    fn get(&self) -> Option<LoggingLevel> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The log notification of `event`, when the level set lets it
    /// through.
    pub(crate) fn logged(&self, event: &Event) -> Option<LoggingMessageNotificationParam> {
        let least = self.get()?;
        let level = level_of(event);
        if rank(level) < rank(least) {
            return None;
        }
        let data = serde_json::json!({
            "session": event.session.to_string(),
            "event": event.kind.as_str(),
            "agent": event.agent,
            "text": baton_gateway::text::line(event),
        });
        let mut logged = LoggingMessageNotificationParam::new(level, data);
        logged.logger = Some("baton".to_owned());
        Some(logged)
    }
}

/// How severe an event is: an end that failed is an error; a retry, an
/// escalation, a loop or a refusal is a warning; a session that waits for
/// a person is a notice; an answer's piece is debug; the rest is info.
fn level_of(event: &Event) -> LoggingLevel {
    match event.kind {
        EventType::Failed | EventType::DeadLettered => LoggingLevel::Error,
        EventType::Retrying
        | EventType::Escalated
        | EventType::LoopDetected
        | EventType::Rejected
        | EventType::ToolDenied => LoggingLevel::Warning,
        EventType::Waiting | EventType::ToolApprovalRequested => LoggingLevel::Notice,
        EventType::Delta => LoggingLevel::Debug,
        _ => LoggingLevel::Info,
    }
}

/// MCP's levels in order of severity (RFC 5424's, lowest first).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_at_the_level_set_or_above_are_logged() {
        let session = uuid::Uuid::new_v4();
        let failed = Event::new(uuid::Uuid::new_v4(), session, EventType::Failed);
        let completed = Event::new(uuid::Uuid::new_v4(), session, EventType::Completed);
        let level = Level::default();
        assert!(level.logged(&completed).is_none(), "no level set");
        level.set(LoggingLevel::Warning);
        assert!(level.logged(&completed).is_none());
        let logged = level.logged(&failed).expect("an error passes");
        assert_eq!(logged.level, LoggingLevel::Error);
        assert_eq!(logged.data["event"], "failed");
        assert_eq!(logged.data["session"], session.to_string());
        level.set(LoggingLevel::Info);
        assert!(level.logged(&completed).is_some());
    }
}
