//! Delegation joins: the state of a delegation in a JetStream key-value
//! bucket (`BATON_JOINS`, key = the delegating envelope's id), updated by
//! compare-and-swap as results arrive, so the continuation runs exactly once.
//!
//! A child's `result` envelope comes back to the parent agent type's subject,
//! where any replica records it. The message that completes the join also
//! writes its own id as `fired_by` in the same swap; only that message runs
//! the continuation, and its redelivery (after a crash) runs it again with the
//! same derived output ids, which JetStream deduplicates. Every other late or
//! duplicate result is recorded in a `result` event and dropped.
//!
//! [`state`] is the pure state machine, [`store`] the bucket; this module
//! ties them to the runtime. The worker runs the continuation itself.

mod state;
pub(crate) mod store;

use std::time::Duration;

use baton_proto::{Envelope, Usage, now_ms};
use uuid::Uuid;

use crate::decide::{ChildSpec, Output, Plan, usage};
use crate::runtime::Runtime;
use baton_author::Delegation;
use baton_author::Target;
use baton_author::Task;
use baton_author::{DelegateMode, Results, slot_index};
use baton_nats::Error;
use state::{Claim, FollowUp, JoinChild, JoinState, Receipt, child_index};

/// Starts a delegation: resolves the children, records the join, and plans
/// the first children, their `delegated` events and the deadline timer. A
/// delegation that cannot start is a failure of the delegating task:
/// `fatal` for the depth limit or no children, `no_route` for a child
/// nobody can take.
///
/// # Errors
///
/// When the join bucket cannot be read or written: the message is left for
/// redelivery.
pub(crate) async fn start(
    rt: &Runtime,
    envelope: &Envelope,
    delegation: Delegation,
    spent: Usage,
) -> Result<Plan, Error> {
    let config = &rt.config;
    let planner = rt.planner();
    let depth = envelope.parent.as_ref().map_or(0, |p| p.depth) + 1;
    if depth > config.max_delegation_depth {
        let detail = format!(
            "delegation depth limit {} reached: {} is at depth {} and cannot delegate further \
             (raise max_delegation_depth, or delegate less deeply)",
            config.max_delegation_depth,
            config.agent,
            depth - 1
        );
        return Ok(planner.fatal(envelope, &detail));
    }
    if delegation.children.is_empty() {
        return Ok(planner.fatal(envelope, "a delegation needs at least one child"));
    }
    let mut children = Vec::with_capacity(delegation.children.len());
    for child in delegation.children {
        match resolve(rt, &child.target).await {
            Ok(agent) => {
                let mut joined = JoinChild::new(agent, child.input, child.tag, child.context);
                joined.asynchronous = child.asynchronous;
                children.push(joined);
            }
            Err(why) => {
                let detail = format!("cannot delegate {:?}: {why}", child.input);
                return Ok(planner.no_route(envelope, &detail));
            }
        }
    }
    let mut stored = planner.advance(envelope, delegation.update);
    stored.path.pop();
    // What the delegating hop spent counts: the children and the
    // continuation start from it.
    stored.usage = usage::after(envelope, spent);
    // The session's versions of its children's types, chosen once: every
    // child, sent now or later, and the continuation go to them.
    for child in &children {
        baton_nats::pipeline::address::pin_ahead(&rt.outbox.rollouts, &child.agent, &mut stored);
    }
    let deadline = config
        .join_timeout
        .map(|timeout| now_ms() + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
        .or(envelope.deadline);
    let mut state = JoinState::new(stored, delegation.mode, children, deadline, depth);
    let joins = rt.joins().await?;
    if !joins.create(envelope.id, &state).await? {
        // A redelivery: the join exists; send what it says was started.
        if let Some((existing, _)) = joins.load(envelope.id).await? {
            state = existing;
        }
    }
    // On a redelivery, children that already answered are not sent again.
    let mut outputs = Vec::new();
    for index in state.unanswered_first_wave() {
        outputs.extend(child(rt, envelope.id, &state, index));
    }
    if let Some(deadline) = state.deadline {
        outputs.push(planner.join_timer(&state.envelope, envelope.id, state.depth, deadline));
    }
    tracing::info!(children = state.children.len(), mode = ?state.mode, depth, "delegated");
    Ok(Plan::ack(outputs))
}

/// Where a child target goes.
async fn resolve(rt: &Runtime, target: &Target) -> Result<baton_proto::AgentName, Error> {
    let config = &rt.config;
    let need = match target {
        Target::Agent(agent) => return rt.served.check(agent).await.map(|()| agent.clone()),
        Target::Fallback => {
            return config.fallback.clone().ok_or_else(|| {
                Error::new(
                    baton_nats::ErrorKind::Config,
                    "the worker has no fallback agent",
                )
            });
        }
        Target::Capabilities(need) => need.clone(),
        Target::Escalate(need) => need.clone().above(config.profile.tier),
    };
    rt.best(&need.lookup(vec![config.agent.clone()])).await
}

/// Child number `index` of join `join` and its `delegated` event.
fn child(rt: &Runtime, join: Uuid, state: &JoinState, index: usize) -> [Output; 2] {
    let child = &state.children[index];
    let earlier = state.earlier_outputs();
    let mut from = state.envelope.clone();
    from.usage = state.usage_from(index);
    rt.planner().child(
        &from,
        ChildSpec {
            join,
            index: slot_index(index),
            agent: &child.agent,
            input: &child.input,
            context: child.context(),
            depth: state.depth,
            earlier: earlier.as_ref(),
            asynchronous: child.asynchronous,
        },
    )
}

/// What one result message leads to.
pub(crate) enum Received {
    /// Carry this plan out (a note, the next child, a dead letter).
    Plan(Plan),
    /// The deadline timer is early: deliver it again after this long.
    Later(Duration),
    /// Run the continuation on `task` with `results`, after `outputs` are durable.
    Continue {
        outputs: Vec<Output>,
        task: Box<Task>,
        results: Results,
        /// Whether this message completed the join. An async report that has
        /// not must [`claim`] the join before its outcome counts.
        claimed: bool,
    },
}

/// Records a `result` envelope in its join.
///
/// # Errors
///
/// When the join bucket cannot be read or written: the message is left for
/// redelivery.
pub(crate) async fn on_result(rt: &Runtime, result: &Envelope) -> Result<Received, Error> {
    let planner = rt.planner();
    let Some(join) = result.parent.as_ref().map(|parent| parent.id) else {
        let detail = "a `result` envelope without `parent`: it cannot be matched to a delegation";
        return Ok(Received::Plan(planner.malformed(result, detail)));
    };
    let me = result.id;
    let (state, recorded, note) = match record(rt, join, result).await? {
        Ok(recorded) => recorded,
        Err(received) => return Ok(received),
    };
    let mut outputs: Vec<Output> = note
        .map(|note| planner.result_note(result, note))
        .into_iter()
        .collect();
    let index = child_index(result).map(slot_index);
    let continuation = |step: u32| {
        let mut envelope = planner.continuation(&state.envelope, join, step);
        envelope.usage = state.usage();
        Box::new(rt.task_of(envelope.into(), 1, async_nats::HeaderMap::new(), None))
    };
    Ok(match state.follow_up(me, recorded) {
        FollowUp::Fire => {
            let results = state.results(index);
            let step = if matches!(state.mode, DelegateMode::Async) {
                slot_index(results.results.len())
            } else {
                0
            };
            Received::Continue {
                outputs,
                task: continuation(step),
                results,
                claimed: true,
            }
        }
        FollowUp::Report => {
            let results = state.results(index);
            Received::Continue {
                outputs,
                task: continuation(slot_index(results.results.len())),
                results,
                claimed: false,
            }
        }
        FollowUp::Send(next) => {
            outputs.extend(child(rt, join, &state, next));
            Received::Plan(Plan::ack(outputs))
        }
        FollowUp::Nothing => Received::Plan(Plan::ack(outputs)),
    })
}

/// The join state after result `result` is recorded in it (or found on
/// record): the state, whether it was on record before, and the note to
/// send; or, when nothing more is to be done, what to do instead.
async fn record(
    rt: &Runtime,
    join: Uuid,
    result: &Envelope,
) -> Result<Result<(JoinState, bool, Option<&'static str>), Received>, Error> {
    let planner = rt.planner();
    let joins = rt.joins().await?;
    let me = result.id;
    loop {
        let Some((mut state, revision)) = joins.load(join).await? else {
            // Joins are kept (completed ones too) for the bucket's max age:
            // a result that matches none is not from a delegation of ours.
            let detail = format!(
                "a `result` for delegation {join}, which {} never started (or whose record expired with the join bucket's max age)",
                rt.config.agent
            );
            // It ends here, as the session's failure: answered as a result,
            // it would come back to this same missing join.
            let mut orphan = result.clone();
            orphan.parent = None;
            return Ok(Err(Received::Plan(planner.malformed(&orphan, &detail))));
        };
        match state.receive(result, me, now_ms()) {
            Receipt::Refire => return Ok(Ok((state, true, None))),
            Receipt::Recorded => return Ok(Ok((state, true, Some("recorded")))),
            Receipt::Later(delay) => return Ok(Err(Received::Later(delay))),
            Receipt::Drop(why) => {
                let notes = why.map(|why| planner.result_note(result, &why));
                return Ok(Err(Received::Plan(Plan::ack(notes.into_iter().collect()))));
            }
            Receipt::Changed(note) => {
                if joins.swap(join, &state, revision).await? {
                    return Ok(Ok((state, false, note)));
                }
                // Someone else changed the join first: read it again.
            }
            Receipt::Noted => {
                if joins.swap(join, &state, revision).await? {
                    let note = planner.result_note(result, "progress added to the conversation");
                    return Ok(Err(Received::Plan(Plan::ack(vec![note]))));
                }
            }
        }
    }
}

/// After an async report kept waiting: notes in join `join` what it spent
/// and what it added to the context (once for result message `me`), so
/// that later continuations and the session's end count it, and a team's
/// conversation grows as results arrive.
///
/// # Errors
///
/// When the join bucket cannot be read or written.
pub(crate) async fn note_wait(
    rt: &Runtime,
    join: Uuid,
    me: Uuid,
    spent: Usage,
    update: &baton_author::ContextUpdate,
) -> Result<(), Error> {
    let joins = rt.joins().await?;
    loop {
        let Some((mut state, revision)) = joins.load(join).await? else {
            return Ok(());
        };
        if !state.note_wait(me, spent, update) || joins.swap(join, &state, revision).await? {
            return Ok(());
        }
    }
}

/// After an async report returned something other than "wait": claims the
/// join for message `me`; then what the session has spent, with what
/// reports that kept waiting spent. `None` when another report already
/// ended it.
///
/// # Errors
///
/// When the join bucket cannot be read or written.
pub(crate) async fn claim(
    rt: &Runtime,
    join: Uuid,
    me: Uuid,
) -> Result<Option<Option<Usage>>, Error> {
    let joins = rt.joins().await?;
    loop {
        let Some((mut state, revision)) = joins.load(join).await? else {
            return Ok(None);
        };
        match state.claim(me) {
            Claim::Held(mine) => return Ok(mine.then(|| state.usage())),
            Claim::Changed => {
                if joins.swap(join, &state, revision).await? {
                    return Ok(Some(state.usage()));
                }
            }
        }
    }
}
