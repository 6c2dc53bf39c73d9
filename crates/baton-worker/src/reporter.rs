//! Where a running hop's reports go: a `tool_called` event for each tool
//! call, stored at the `full` event level and live at `lean`, and `delta`
//! events, live only, for a session that asked for them; best effort (a
//! report that cannot be sent is logged, and the hop goes on).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use baton_proto::{Event, EventType, Usage, Value, derive_id_labelled};
use uuid::Uuid;

use crate::outbox::Outbox;
use baton_author::{Progress, Report, ToolCall};
use baton_nats::pipeline::opening::Opening;

/// What a worker's hops share when they report: made once per worker.
pub(crate) struct Reporter {
    pub(crate) outbox: Arc<Outbox>,
    pub(crate) agent: String,
    pub(crate) instance: String,
    pub(crate) version: Option<String>,
}

/// One hop's reporting: the worker's, and the hop's session and trace.
struct Hop {
    reporter: Arc<Reporter>,
    session: Uuid,
    envelope: Uuid,
    headers: async_nats::HeaderMap,
    /// What the hop's model calls spent.
    usage: std::sync::Mutex<Usage>,
    /// The session asked for answers as they are written.
    stream: bool,
    /// A root task's first write checks that its session has not ended.
    opening: Option<Arc<Opening>>,
}

impl Reporter {
    /// The progress of the hop that runs `envelope`, in the trace `headers` carry.
    pub(crate) fn progress(
        self: &Arc<Self>,
        envelope: &baton_proto::Envelope,
        headers: async_nats::HeaderMap,
        opening: Option<Arc<Opening>>,
    ) -> Progress {
        Progress::to(Arc::new(Hop {
            reporter: self.clone(),
            session: envelope.session,
            envelope: envelope.id,
            headers,
            usage: std::sync::Mutex::default(),
            stream: envelope.stream,
            opening,
        }))
    }
}

impl Report for Hop {
    fn spent(&self, usage: Usage) {
        let mut spent = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *spent = spent.plus(usage);
    }

    fn spending(&self) -> Usage {
        *self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tool_called<'a>(
        &'a self,
        call: ToolCall<'a>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(self.report_tool(call))
    }

    fn streams(&self) -> bool {
        self.stream
    }

    fn delta<'a>(
        &'a self,
        step: u32,
        offset: u64,
        text: &'a str,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let delta = baton_proto::Delta {
                envelope: self.envelope,
                step,
                offset,
                text: text.to_owned(),
            };
            let event = delta.event(self.session, &self.reporter.agent);
            self.reporter.outbox.live(&event).await;
        })
    }
}

impl Hop {
    async fn report_tool(&self, call: ToolCall<'_>) {
        let hop = self;
        let reporter = &hop.reporter;
        let id = derive_id_labelled(hop.envelope, &format!("tool_called/{}", call.call), 0);
        let mut event = Event::new(id, hop.session, EventType::ToolCalled);
        event.agent = Some(reporter.agent.clone());
        event.instance = Some(reporter.instance.clone());
        event.version.clone_from(&reporter.version);
        event.envelope = Some(hop.envelope);
        let millis = u64::try_from(call.took.as_millis()).unwrap_or(u64::MAX);
        event.detail = Some(format!("{} {} in {millis} ms", call.tool, call.outcome));
        event.output = Some(Value::Map(vec![
            (Value::from("tool"), Value::from(call.tool)),
            (Value::from("call"), Value::from(call.call)),
            (Value::from("outcome"), Value::from(call.outcome)),
            (Value::from("duration_ms"), Value::from(millis)),
        ]));
        let opening = hop.opening.as_deref();
        (reporter.outbox)
            .report(&event, hop.headers.clone(), opening)
            .await;
    }
}
