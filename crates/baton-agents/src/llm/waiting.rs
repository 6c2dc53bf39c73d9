//! An LLM agent's tool calls that wait for a person: the inbox they wait
//! in, and the metrics of in-doubt calls and approvals (the parking itself
//! is in `calling.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_proto::Reason;
use baton_worker::Task;
use opentelemetry::metrics::Counter;

use super::LlmRunner;

/// In-doubt tool calls, by tool and decision (`baton.tool.in_doubt`).
pub(super) fn in_doubt() -> Counter<u64> {
    baton_nats::meter::meter()
        .u64_counter("baton.tool.in_doubt")
        .with_description("Tool calls whose outcome was unknown and that must not be repeated, by tool and decision: waiting (sent to the inbox), then happened, not_happened or fail as a person decided")
        .build()
}

/// Tool calls that needed approval, by tool and decision (`baton.tool.approvals`).
pub(super) fn approvals() -> Counter<u64> {
    baton_nats::meter::meter()
        .u64_counter("baton.tool.approvals")
        .with_description("Tool calls that needed a person's approval, by tool and decision: waiting (sent to the inbox), then approved or denied")
        .build()
}

impl LlmRunner {
    /// Parks tool calls that wait for a person in `inbox`. With tools that
    /// need approval, the gauge `baton.tool.approvals.pending` counts the
    /// calls of `agent` waiting for one, read from the inbox every few
    /// seconds.
    pub(crate) fn with_inbox(mut self, inbox: Option<baton_client::Inbox>, agent: &str) -> Self {
        if let Some(inbox) = inbox
            .clone()
            .filter(|_| self.offered.toolbox.tools().iter().any(|t| t.approve))
        {
            let pending = Arc::new(AtomicU64::new(0));
            let (seen, label) = (
                pending.clone(),
                opentelemetry::KeyValue::new("agent", agent.to_owned()),
            );
            baton_nats::meter::meter()
                .u64_observable_gauge("baton.tool.approvals.pending")
                .with_description(
                    "Tool calls of this agent type waiting in the inbox for a person's approval",
                )
                .with_callback(move |gauge| {
                    let now = seen.load(Ordering::Relaxed);
                    gauge.observe(now, std::slice::from_ref(&label));
                })
                .build();
            tokio::spawn(count_pending(inbox, agent.to_owned(), pending));
        }
        if inbox.is_none() {
            // No person can answer a server's question: it is declined.
            self.offered.toolbox.without_person();
        }
        self.inbox = inbox;
        self
    }

    /// Whether any of the agent's tools may have to wait for a person.
    pub(crate) fn may_wait(&self) -> bool {
        self.offered
            .toolbox
            .tools()
            .iter()
            .any(|tool| tool.approve || !tool.class.repeatable())
    }

    /// Whether a server's question during a call goes to a person
    /// (`elicitation = "ask"`), given an inbox.
    pub(crate) fn may_ask(&self) -> bool {
        self.offered.toolbox.tools().iter().any(|tool| tool.asks)
    }

    /// Counts a person's decision on a waiting tool call, once: on the
    /// first delivery of the envelope it sent back.
    pub(super) fn count_decision(&self, task: &Task) {
        let Some(resumed) = task.envelope.resumed.as_ref().filter(|_| task.attempt == 1) else {
            return;
        };
        let counter = match resumed.decision.as_str() {
            "approved" | "denied" => &self.meters.approvals,
            _ => &self.meters.in_doubt,
        };
        counter.add(
            1,
            &[
                opentelemetry::KeyValue::new("tool", resumed.tool.clone()),
                opentelemetry::KeyValue::new("decision", resumed.decision.clone()),
            ],
        );
    }
}

/// Counts, every few seconds, the calls of `agent` waiting in `inbox` for
/// approval, into `pending`.
async fn count_pending(inbox: baton_client::Inbox, agent: String, pending: Arc<AtomicU64>) {
    let mut every = tokio::time::interval(Duration::from_secs(2));
    loop {
        every.tick().await;
        match inbox.list().await {
            Ok(entries) => {
                let waiting = entries
                    .iter()
                    .filter(|entry| entry.agent() == agent)
                    .filter(|entry| {
                        entry
                            .gate()
                            .is_some_and(|gate| gate.reason == Reason::ApprovalRequired)
                    })
                    .count();
                pending.store(
                    u64::try_from(waiting).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
            Err(err) => tracing::debug!(error = %err, "cannot count the approvals waiting"),
        }
    }
}
