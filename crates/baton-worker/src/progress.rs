//! What an agent reports while its hop runs: a `tool_called` event for each
//! tool call, stored at the `full` event level and live at `lean`, best
//! effort (a report that cannot be sent is logged, and the hop goes on).

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{Event, EventType, Subjects, Value, derive_id_labelled};
use uuid::Uuid;

use crate::config::EventLevel;
use crate::publish::{Class, Outgoing, Publisher};

/// One tool call, as reported.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// The tool's name, as the model called it.
    pub tool: &'a str,
    /// The call's key, unique within the session (its idempotency key): a
    /// redelivered hop that reports the same call again reports it once.
    pub call: &'a str,
    /// `ok`, `error` (the tool said the call failed) or `failed` (no answer).
    pub outcome: &'a str,
    /// How long it took.
    pub took: Duration,
}

/// Where a running hop reports its progress. [`Progress::default`] reports
/// nothing (an agent run outside a worker).
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<Inner>>);

struct Inner {
    publisher: Publisher,
    subjects: Subjects,
    level: EventLevel,
    session: Uuid,
    envelope: Uuid,
    agent: String,
    instance: String,
    headers: async_nats::HeaderMap,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Progress").field(&self.0.is_some()).finish()
    }
}

impl Progress {
    pub(crate) fn new(
        publisher: Publisher,
        subjects: Subjects,
        level: EventLevel,
        envelope: &baton_proto::Envelope,
        agent: String,
        instance: String,
        headers: async_nats::HeaderMap,
    ) -> Self {
        Self(Some(Arc::new(Inner {
            publisher,
            subjects,
            level,
            session: envelope.session,
            envelope: envelope.id,
            agent,
            instance,
            headers,
        })))
    }

    /// Reports `call` as a `tool_called` event of the session.
    pub async fn tool_called(&self, call: ToolCall<'_>) {
        let Some(inner) = &self.0 else {
            return;
        };
        let id = derive_id_labelled(inner.envelope, &format!("tool_called/{}", call.call), 0);
        let mut event = Event::new(id, inner.session, EventType::ToolCalled);
        event.agent = Some(inner.agent.clone());
        event.instance = Some(inner.instance.clone());
        event.envelope = Some(inner.envelope);
        let millis = u64::try_from(call.took.as_millis()).unwrap_or(u64::MAX);
        event.detail = Some(format!("{} {} in {millis} ms", call.tool, call.outcome));
        event.output = Some(Value::Map(vec![
            (Value::from("tool"), Value::from(call.tool)),
            (Value::from("call"), Value::from(call.call)),
            (Value::from("outcome"), Value::from(call.outcome)),
            (Value::from("duration_ms"), Value::from(millis)),
        ]));
        let payload = match baton_proto::Wire::to_msgpack(&event) {
            Ok(payload) => bytes::Bytes::from(payload),
            Err(err) => return tracing::warn!(error = %err, "cannot encode a tool_called event"),
        };
        let lean = inner.level == EventLevel::Lean;
        let message = Outgoing {
            class: Class::Plain,
            subject: if lean {
                inner.subjects.live(inner.session)
            } else {
                inner.subjects.events(inner.session)
            },
            id,
            payload,
            headers: inner.headers.clone(),
        };
        if lean {
            inner
                .publisher
                .publish_live(std::slice::from_ref(&message))
                .await;
        } else if let Err(err) = inner.publisher.publish_one(&message).await {
            tracing::warn!(error = %err, tool = call.tool, "cannot store a tool_called event");
        }
    }
}
