//! Where a running hop's reports go: a `tool_called` event for each tool
//! call, stored at the `full` event level and live at `lean`, and `delta`
//! events, live only, for a session that asked for them; best effort (a
//! report that cannot be sent is logged, and the hop goes on). A program's
//! steps early in a short hop are held, and ride in the hop's next event
//! ([`fold_steps`]).

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
    pub(crate) agent: baton_proto::AgentName,
    pub(crate) instance: String,
    pub(crate) version: Option<baton_proto::Version>,
    /// How young a hop holds its steps' events, to fold them into its
    /// next event: `None` sends each at once.
    pub(crate) fold_steps: Option<std::time::Duration>,
}

/// One hop's reporting: the worker's, and the hop's session and trace.
struct Hop {
    reporter: Arc<Reporter>,
    session: Uuid,
    envelope: Uuid,
    /// The session a replay replays: its events say so.
    replay_of: Option<Uuid>,
    headers: async_nats::HeaderMap,
    /// What the hop's model calls spent.
    usage: std::sync::Mutex<Usage>,
    /// The session asked for answers as they are written.
    stream: bool,
    /// A root task's first write checks that its session has not ended.
    opening: Option<Arc<Opening>>,
    /// When the hop started.
    started: std::time::Instant,
    /// The steps' events held for the hop's next event.
    held: std::sync::Mutex<Vec<baton_proto::FoldedStep>>,
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
            replay_of: envelope.replay.as_ref().map(|replay| replay.of),
            headers,
            usage: std::sync::Mutex::default(),
            stream: envelope.stream,
            opening,
            started: std::time::Instant::now(),
            held: std::sync::Mutex::default(),
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
        // The steps held so far go first, so they are stored in order.
        Box::pin(async move {
            for held in self.held_steps() {
                self.report_tool(as_call(&held)).await;
            }
            self.report_tool(call).await;
        })
    }

    fn step_ran<'a>(&'a self, call: ToolCall<'a>) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        let young =
            (self.reporter.fold_steps).is_some_and(|within| self.started.elapsed() < within);
        if !young {
            return self.tool_called(call);
        }
        let step = baton_proto::FoldedStep {
            id: tool_called_id(self.envelope, call.call),
            at: baton_proto::now_ms(),
            tool: call.tool.to_owned(),
            call: call.call.to_owned(),
            outcome: call.outcome.to_owned(),
            duration_ms: u64::try_from(call.took.as_millis()).unwrap_or(u64::MAX),
            extra: baton_proto::Map::new(),
        };
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(step);
        Box::pin(std::future::ready(()))
    }

    fn held_steps(&self) -> Vec<baton_proto::FoldedStep> {
        std::mem::take(
            &mut *self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
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
        let id = tool_called_id(hop.envelope, call.call);
        let mut event = Event::new(id, hop.session, EventType::ToolCalled);
        event.agent = Some(reporter.agent.clone());
        event.instance = Some(reporter.instance.clone());
        event.version.clone_from(&reporter.version);
        event.envelope = Some(hop.envelope);
        event.replay_of = hop.replay_of;
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

/// The id of the `tool_called` event of call `call` of the hop that runs
/// `envelope`: a redelivered hop that reports the same call again reports it
/// once.
fn tool_called_id(envelope: Uuid, call: &str) -> Uuid {
    derive_id_labelled(envelope, &format!("tool_called/{call}"), 0)
}

/// Folds the steps `progress` holds into the first of `outputs` that is an
/// event of hop `hop` other than its `started` event (which folds on into a
/// later one); with no such event, sends each on its own.
pub(crate) async fn fold_steps(
    progress: &Progress,
    outputs: &mut [crate::decide::Output],
    hop: Uuid,
) {
    let steps = progress.held_steps();
    if steps.is_empty() {
        return;
    }
    let carrier = outputs.iter_mut().find_map(|output| match output {
        crate::decide::Output::Event(event)
            if event.envelope == Some(hop) && event.kind != EventType::Started =>
        {
            Some(event)
        }
        _ => None,
    });
    match carrier {
        Some(event) => event.steps = steps,
        None => send_steps(progress, steps).await,
    }
}

/// Sends `steps`, held for a next event that will not carry them, each as
/// its own `tool_called` event, best effort.
pub(crate) async fn send_steps(progress: &Progress, steps: Vec<baton_proto::FoldedStep>) {
    for step in &steps {
        progress.tool_called(as_call(step)).await;
    }
}

/// A held step as the tool call it reports.
fn as_call(step: &baton_proto::FoldedStep) -> ToolCall<'_> {
    ToolCall {
        tool: &step.tool,
        call: &step.call,
        outcome: &step.outcome,
        took: std::time::Duration::from_millis(step.duration_ms),
    }
}
