//! What an agent reports while its hop runs: a `tool_called` event for each
//! tool call, stored at the `full` event level and live at `lean`, and the
//! pieces of an answer as a model writes it (`delta` events, live only, for
//! a session that asked for them); best effort (a report that cannot be
//! sent is logged, and the hop goes on). It also keeps what the hop spent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_proto::Usage;

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
pub struct Progress(Option<Arc<dyn Report>>);

/// Where one hop's reports go; the worker loop provides it.
#[doc(hidden)]
pub trait Report: Send + Sync {
    /// Adds `usage` to what the hop spent.
    fn spent(&self, usage: Usage);
    /// What the hop spent so far.
    fn spending(&self) -> Usage;
    /// Reports `call`, best effort.
    fn tool_called<'a>(
        &'a self,
        call: ToolCall<'a>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
    /// Whether the session asked for answers as they are written.
    fn streams(&self) -> bool;
    /// Sends a piece of an answer live, best effort.
    fn delta<'a>(
        &'a self,
        step: u32,
        offset: u64,
        text: &'a str,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
    /// Reports a program's step that ran: held, to be folded into the
    /// hop's next event, while the hop is young; else as `tool_called`.
    fn step_ran<'a>(&'a self, call: ToolCall<'a>) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        self.tool_called(call)
    }
    /// Takes the steps held for the hop's next event.
    fn held_steps(&self) -> Vec<baton_proto::FoldedStep> {
        Vec::new()
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Progress").field(&self.0.is_some()).finish()
    }
}

impl Progress {
    /// Progress that goes to `report`.
    #[doc(hidden)]
    pub fn to(report: Arc<dyn Report>) -> Self {
        Self(Some(report))
    }

    /// Adds what a model call spent to the hop's usage. It travels on with
    /// the session, in every envelope and terminal event after this hop.
    pub fn spent(&self, usage: Usage) {
        if let Some(report) = &self.0 {
            report.spent(usage);
        }
    }

    /// What the hop spent so far (nothing for a run outside a worker).
    #[must_use]
    pub fn spending(&self) -> Usage {
        self.0
            .as_ref()
            .map(|report| report.spending())
            .unwrap_or_default()
    }

    /// Whether the session asked for its answers as they are written: an
    /// agent that can stream its model's answer should, and report the
    /// pieces with [`Progress::delta`].
    #[must_use]
    pub fn streams(&self) -> bool {
        self.0.as_ref().is_some_and(|report| report.streams())
    }

    /// Sends `text`, the piece of the answer of model call `step` (from 1)
    /// that starts `offset` bytes into it, live to the session's readers
    /// (when it asked for them; nothing otherwise). A call made again after
    /// its stream was cut sends its pieces from offset 0 again: readers
    /// show only what is new.
    pub async fn delta(&self, step: u32, offset: u64, text: &str) {
        if let Some(report) = self.0.as_ref().filter(|report| report.streams()) {
            report.delta(step, offset, text).await;
        }
    }

    /// Reports `call` as a `tool_called` event of the session.
    pub async fn tool_called(&self, call: ToolCall<'_>) {
        if let Some(report) = &self.0 {
            report.tool_called(call).await;
        }
    }

    /// Reports a step a program ran (`call.tool` is `step:NAME`) as a
    /// `tool_called` event of the session. A step early in a hop is held
    /// and rides in the hop's next event, one stored message fewer.
    pub async fn step_ran(&self, call: ToolCall<'_>) {
        if let Some(report) = &self.0 {
            report.step_ran(call).await;
        }
    }

    /// Takes the steps held for the hop's next event (the worker folds
    /// them into it).
    #[doc(hidden)]
    #[must_use]
    pub fn held_steps(&self) -> Vec<baton_proto::FoldedStep> {
        self.0
            .as_ref()
            .map(|report| report.held_steps())
            .unwrap_or_default()
    }
}
