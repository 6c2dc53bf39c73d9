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

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use baton_proto::{
    AgentName, Envelope, Event, EventType, Kind, PROTOCOL_VERSION, Parent, Reason, ResultStatus,
    Value, derive_id_labelled, now_ms,
};
use uuid::Uuid;

use crate::agent::{Agent, AgentError, ContextPolicy, ContextUpdate, Target, Task};
use crate::delegate::{ChildResult, ChildTask, DelegateMode, Recover, Results};
use crate::error::Error;
use crate::outputs::Emitter;
use crate::plan::Planner;
use crate::publish::Outgoing;
use crate::worker::{Shared, best_candidate};

mod state;

pub(crate) use state::Joins;
use state::{JoinChild, JoinState, Slot};

/// What starting a delegation gave.
pub(crate) enum Started {
    /// Publish these, then ack.
    Outgoing(Vec<Outgoing>),
    /// The delegation is refused (depth limit, no children, no such agent).
    Refused(AgentError),
}

/// Starts a delegation: resolves the children, records the join, and
/// returns the first children and their `delegated` events.
pub(crate) async fn start<A: Agent>(
    shared: &Shared<A>,
    planner: &Planner<'_>,
    envelope: &Envelope,
    children: Vec<ChildTask>,
    mode: DelegateMode,
    update: ContextUpdate,
    emitter: &Emitter<'_>,
) -> Result<Started, Error> {
    let config = &shared.config;
    let depth = envelope.parent.as_ref().map_or(0, |p| p.depth) + 1;
    if depth > config.max_delegation_depth {
        return Ok(Started::Refused(AgentError::fatal(format!(
            "delegation depth limit {} reached: {} is at depth {} and cannot delegate further \
             (raise max_delegation_depth, or delegate less deeply)",
            config.max_delegation_depth,
            config.agent,
            depth - 1
        ))));
    }
    if children.is_empty() {
        return Ok(Started::Refused(AgentError::fatal(
            "a delegation needs at least one child",
        )));
    }
    let mut resolved = Vec::with_capacity(children.len());
    for child in children {
        match resolve(shared, &child.target).await {
            Ok(agent) => resolved.push(JoinChild {
                agent: agent.to_string(),
                input: child.input,
                tag: child.tag,
                keep: match child.context {
                    ContextPolicy::Full => None,
                    ContextPolicy::LastN(n) => Some(n),
                    ContextPolicy::None => Some(0),
                },
                recover_for: None,
            }),
            Err(why) => {
                return Ok(Started::Refused(AgentError::fatal(format!(
                    "cannot delegate {:?}: {why}",
                    child.input
                ))));
            }
        }
    }
    let mut stored = planner.advance(envelope, update);
    stored.path.pop();
    let deadline = config
        .join_timeout
        .map(|timeout| now_ms() + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
        .or(envelope.deadline);
    let first_wave = match mode {
        DelegateMode::Serial | DelegateMode::Chain { .. } => 1,
        DelegateMode::Parallel | DelegateMode::Async => resolved.len(),
    };
    let mut state = JoinState {
        envelope: stored,
        mode,
        slots: vec![None; resolved.len()],
        children: resolved,
        started: first_wave,
        deadline,
        depth,
        fired_by: None,
        reports: 0,
    };
    let joins = shared.joins().await?;
    if !joins.create(envelope.id, &state).await? {
        // A redelivery: the join exists; send what it says was started.
        if let Some((existing, _)) = joins.load(envelope.id).await? {
            state = existing;
        }
    }
    let mut outgoing = Vec::new();
    // On a redelivery, children that already answered are not sent again.
    for index in 0..state.started.min(first_wave) {
        if state.slots[index].is_none() {
            outgoing.extend(dispatch(
                shared,
                planner,
                emitter,
                envelope.id,
                &state,
                index,
            )?);
        }
    }
    if let Some(deadline) = state.deadline {
        outgoing.push(timer(shared, emitter, envelope.id, &state, deadline)?);
    }
    tracing::info!(children = state.children.len(), mode = ?state.mode, depth, "delegated");
    Ok(Started::Outgoing(outgoing))
}

/// Where a child target goes.
async fn resolve<A: Agent>(shared: &Shared<A>, target: &Target) -> Result<AgentName, String> {
    let config = &shared.config;
    let need = match target {
        Target::Agent(name) => return AgentName::new(name.as_str()).map_err(|err| err.to_string()),
        Target::Fallback => {
            return config
                .fallback
                .clone()
                .ok_or_else(|| "the worker has no fallback agent".to_owned());
        }
        Target::Capabilities(need) => need.clone(),
        Target::Escalate(need) => need.clone().above(config.profile.tier),
    };
    let Some(registry) = &shared.registry else {
        return Err(
            "capability targets need the registry, and this worker does not use it".to_owned(),
        );
    };
    let request = need.lookup(vec![config.agent.to_string()]);
    best_candidate(registry, &request).await
}

/// Child number `index` of join `join` and its `delegated` event.
fn dispatch<A: Agent>(
    shared: &Shared<A>,
    planner: &Planner<'_>,
    emitter: &Emitter<'_>,
    join: Uuid,
    state: &JoinState,
    index: usize,
) -> Result<Vec<Outgoing>, Error> {
    let config = &shared.config;
    let child = &state.children[index];
    let to = AgentName::new(child.agent.as_str())?;
    let mut envelope = planner.advance(&state.envelope, ContextUpdate::default());
    let policy = match child.keep {
        None => ContextPolicy::Full,
        Some(0) => ContextPolicy::None,
        Some(n) => ContextPolicy::LastN(n),
    };
    planner.trim_context(&mut envelope, policy);
    envelope.v = PROTOCOL_VERSION;
    envelope.id = derive_id_labelled(join, "child", u32::try_from(index).unwrap_or(u32::MAX));
    envelope.kind = Kind::Delegate;
    envelope.to = Some(child.agent.clone());
    envelope.from = Some(config.agent.to_string());
    envelope.reason = Some(Reason::parse("delegated"));
    envelope.suggested_next_action = None;
    envelope.reply_to = Some(config.subjects.agent(&config.agent));
    envelope.parent = Some(Parent {
        id: join,
        agent: config.agent.to_string(),
        depth: state.depth,
        index: Some(u32::try_from(index).unwrap_or(u32::MAX)),
        extra: baton_proto::Map::new(),
    });
    envelope.status = None;
    envelope.output = None;
    envelope.created_at = now_ms();
    let context = &mut envelope.context;
    context.problem.clone_from(&child.input);
    context.messages.push(
        baton_proto::Message::new(baton_proto::Role::User, child.input.clone())
            .with_name(config.agent.as_str()),
    );
    if matches!(state.mode, DelegateMode::Serial) {
        let earlier = state.results(None).outputs();
        context.state.insert("results".to_owned(), earlier);
    }
    let mut event = planner.event(
        &state.envelope,
        derive_id_labelled(join, "delegated", u32::try_from(index).unwrap_or(u32::MAX)),
        EventType::Delegated,
    );
    event.envelope = Some(join);
    event.to = Some(child.agent.clone());
    event.reason = Some(Reason::parse("delegated"));
    event.detail = Some(child.input.clone());
    event.path.clone_from(&envelope.path);
    Ok(vec![
        emitter.event(&event)?,
        emitter.envelope(&to, &envelope)?,
    ])
}

/// The join's deadline timer: a `result` with no child index, sent to the
/// parent's own subject and Nak'ed until the deadline passes.
fn timer<A: Agent>(
    shared: &Shared<A>,
    emitter: &Emitter<'_>,
    join: Uuid,
    state: &JoinState,
    deadline: u64,
) -> Result<Outgoing, Error> {
    let config = &shared.config;
    let mut envelope = state.envelope.clone();
    envelope.id = derive_id_labelled(join, "deadline", 0);
    envelope.kind = Kind::Result;
    envelope.to = Some(config.agent.to_string());
    envelope.status = Some(ResultStatus::Failed);
    envelope.reason = Some(Reason::DeadlineExceeded);
    envelope.deadline = Some(deadline);
    envelope.parent = Some(Parent {
        id: join,
        agent: config.agent.to_string(),
        depth: state.depth,
        index: None,
        extra: baton_proto::Map::new(),
    });
    emitter.envelope(&config.agent, &envelope)
}

/// What handling one result message produced.
pub(crate) enum Handled {
    /// Publish these, then ack.
    Done(Vec<Outgoing>),
    /// The deadline timer is early: deliver it again after this long.
    Later(Duration),
    /// Not a result this runtime can place: dead-letter it with this detail.
    Malformed(&'static str),
    /// The join is complete and this message completed it: run the
    /// continuation on `task` with `results`; publish `outgoing` with its outputs.
    Fire {
        outgoing: Vec<Outgoing>,
        task: Box<Task>,
        results: Results,
        /// Whether this message completed the join. An async report that has
        /// not must [`claim`] the join before its outcome counts.
        claimed: bool,
    },
}

/// Records a `result` envelope in its join.
pub(crate) async fn on_result<A: Agent>(
    shared: &Shared<A>,
    planner: &Planner<'_>,
    emitter: &Emitter<'_>,
    result: &Envelope,
) -> Result<Handled, Error> {
    let Some(parent) = result.parent.clone() else {
        return Ok(Handled::Malformed(
            "a `result` envelope without `parent`: it cannot be matched to a delegation",
        ));
    };
    let joins = shared.joins().await?;
    let me = result.id;
    loop {
        let Some((mut state, revision)) = joins.load(parent.id).await? else {
            return Ok(Handled::Done(vec![note(
                planner,
                emitter,
                result,
                "dropped: no join is open for it (it completed long ago, or never existed)",
            )?]));
        };
        let now = now_ms();
        let late = state.deadline.is_some_and(|deadline| now > deadline);
        let index = parent.index.map(|i| i as usize);
        // A redelivery of the message that completed the join: run it again.
        if state.fired_by == Some(me) {
            return Ok(fire(shared, &state, parent.id, Vec::new(), index));
        }
        let mine = index
            .and_then(|i| state.slots.get(i))
            .and_then(Option::as_ref)
            .is_some_and(|slot| slot.by == me);
        let mut outgoing = Vec::new();
        if !mine {
            match index {
                None if state.fired_by.is_some() => return Ok(Handled::Done(Vec::new())),
                None if !late => {
                    let wait = state.deadline.map_or(0, |d| d.saturating_sub(now));
                    return Ok(Handled::Later(Duration::from_millis(wait)));
                }
                None => {}
                Some(i) if i >= state.slots.len() => {
                    return Ok(Handled::Done(vec![note(
                        planner,
                        emitter,
                        result,
                        &format!("dropped: the join has no child {i}"),
                    )?]));
                }
                Some(_) if state.fired_by.is_some() => {
                    return Ok(Handled::Done(vec![note(
                        planner,
                        emitter,
                        result,
                        "dropped: the join is already complete",
                    )?]));
                }
                Some(i) if state.slots[i].is_some() => {
                    return Ok(Handled::Done(vec![note(
                        planner,
                        emitter,
                        result,
                        "dropped: a duplicate of a recorded result",
                    )?]));
                }
                Some(_) if late => {
                    outgoing.push(note(
                        planner,
                        emitter,
                        result,
                        "dropped: it arrived after the join's deadline",
                    )?);
                }
                Some(i) => {
                    record(&mut state, i, result, me);
                    outgoing.push(note(planner, emitter, result, "recorded")?);
                }
            }
            if late {
                // The deadline passed: the missing children failed.
                for (i, slot) in state.slots.iter_mut().enumerate() {
                    if slot.is_none() {
                        *slot = Some(Slot {
                            result: ChildResult {
                                index: u32::try_from(i).unwrap_or(u32::MAX),
                                agent: Some(state.children[i].agent.clone()),
                                tag: state.children[i].tag.clone(),
                                status: ResultStatus::Failed,
                                output: Value::Nil,
                                detail: Some(
                                    "deadline_exceeded: no result before the join's deadline"
                                        .to_owned(),
                                ),
                            },
                            by: me,
                        });
                    }
                }
                state.fired_by = Some(me);
            } else if let Some(i) = index {
                advance(&mut state, i, me);
            }
            if !joins.swap(parent.id, &state, revision).await? {
                continue; // someone else changed the join first: read it again
            }
        }
        // Outputs implied by the state this message left behind.
        if state.fired_by == Some(me) {
            return Ok(fire(shared, &state, parent.id, outgoing, index));
        }
        if mine {
            outgoing.push(note(planner, emitter, result, "recorded")?);
        }
        if matches!(
            state.mode,
            DelegateMode::Serial | DelegateMode::Chain { .. }
        ) {
            let next = state.started - 1;
            if state.slots[next].is_none() {
                outgoing.extend(dispatch(shared, planner, emitter, parent.id, &state, next)?);
            }
        }
        if matches!(state.mode, DelegateMode::Async) && !mine {
            let results = state.results(index.map(|i| u32::try_from(i).unwrap_or(u32::MAX)));
            let task = continuation_task(
                shared,
                &state,
                parent.id,
                u32::try_from(results.results.len()).unwrap_or(0),
            );
            return Ok(Handled::Fire {
                outgoing,
                task: Box::new(task),
                results,
                claimed: false,
            });
        }
        return Ok(Handled::Done(outgoing));
    }
}

/// After an async report returned something other than "wait": claims the
/// join for this message. `false` when another report already ended it.
pub(crate) async fn claim<A: Agent>(
    shared: &Shared<A>,
    join: Uuid,
    me: Uuid,
) -> Result<bool, Error> {
    let joins = shared.joins().await?;
    loop {
        let Some((mut state, revision)) = joins.load(join).await? else {
            return Ok(false);
        };
        match state.fired_by {
            Some(by) => return Ok(by == me),
            None => {
                state.fired_by = Some(me);
                state.reports += 1;
                if joins.swap(join, &state, revision).await? {
                    return Ok(true);
                }
            }
        }
    }
}

fn fire<A: Agent>(
    shared: &Shared<A>,
    state: &JoinState,
    join: Uuid,
    outgoing: Vec<Outgoing>,
    index: Option<usize>,
) -> Handled {
    let results = state.results(index.map(|i| u32::try_from(i).unwrap_or(u32::MAX)));
    let step = if matches!(state.mode, DelegateMode::Async) {
        u32::try_from(results.results.len()).unwrap_or(0)
    } else {
        0
    };
    Handled::Fire {
        outgoing,
        task: Box::new(continuation_task(shared, state, join, step)),
        results,
        claimed: true,
    }
}

/// The task the continuation runs on: the delegating envelope under an id of its own.
fn continuation_task<A: Agent>(
    shared: &Shared<A>,
    state: &JoinState,
    join: Uuid,
    step: u32,
) -> Task {
    let mut envelope = state.envelope.clone();
    envelope.id = derive_id_labelled(join, "resume", step);
    Task {
        envelope,
        attempt: 1,
        agent: shared.config.agent.clone(),
        instance: shared.config.instance.clone(),
    }
}

/// Puts child `i`'s result in its slot (a recovery step's result in the step it stands for).
fn record(state: &mut JoinState, i: usize, result: &Envelope, me: Uuid) {
    let child = &state.children[i];
    let failed = result.status == Some(ResultStatus::Failed);
    let output = result.output.clone().unwrap_or(Value::Nil);
    let entry = ChildResult {
        index: u32::try_from(child.recover_for.unwrap_or(i)).unwrap_or(u32::MAX),
        agent: result.from.clone(),
        tag: child.tag.clone(),
        status: if failed {
            ResultStatus::Failed
        } else {
            ResultStatus::Completed
        },
        detail: failed.then(|| match &output {
            Value::String(s) => s.as_str().unwrap_or_default().to_owned(),
            other => other.to_string(),
        }),
        output: if failed { Value::Nil } else { output },
    };
    if let Some(step) = child.recover_for {
        state.slots[step] = Some(Slot {
            result: entry.clone(),
            by: me,
        });
    }
    state.slots[i] = Some(Slot {
        result: entry,
        by: me,
    });
}

/// Decides what the join does after child `i`'s result: start the next
/// child, recover, or complete (setting `fired_by`).
fn advance(state: &mut JoinState, i: usize, me: Uuid) {
    let main = state.main();
    let step = state.children[i].recover_for.unwrap_or(i);
    match state.mode.clone() {
        DelegateMode::Parallel => {
            if state.all_in() {
                state.fired_by = Some(me);
            }
        }
        DelegateMode::Async => {
            if state.all_in() {
                state.fired_by = Some(me);
            }
        }
        DelegateMode::Serial => {
            if step + 1 < main {
                state.started = step + 2;
            } else {
                state.fired_by = Some(me);
            }
        }
        DelegateMode::Chain { recover } => {
            let slot = state.slots[step].as_ref().map(|s| s.result.clone());
            let failed = slot.as_ref().is_some_and(|r| !r.completed());
            let recovering = state.children[i].recover_for.is_some();
            if failed && !recovering {
                match recover {
                    Some(Recover::Agent(agent)) => {
                        let detail = slot.and_then(|r| r.detail).unwrap_or_default();
                        state.children.push(JoinChild {
                            agent,
                            input: detail,
                            tag: None,
                            keep: None,
                            recover_for: Some(step),
                        });
                        state.slots.push(None);
                        state.started = state.children.len();
                        return;
                    }
                    Some(Recover::Value(value)) => {
                        if let Some(slot) = state.slots[step].as_mut() {
                            slot.result.status = ResultStatus::Completed;
                            slot.result.output = value;
                        }
                    }
                    None => {
                        state.fired_by = Some(me);
                        return;
                    }
                }
            } else if failed {
                // The recovery failed too: the chain halts.
                state.fired_by = Some(me);
                return;
            }
            if step + 1 < main {
                let output = state.slots[step]
                    .as_ref()
                    .map(|s| text(&s.result.output))
                    .unwrap_or_default();
                state.children[step + 1].input = output;
                state.started = step + 2;
            } else {
                state.fired_by = Some(me);
            }
        }
    }
}

/// A value as the next step's input: strings as they are, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().unwrap_or_default().to_owned(),
        other => other.to_string(),
    }
}

/// A `result` event: what became of a child's result.
fn note(
    planner: &Planner<'_>,
    emitter: &Emitter<'_>,
    result: &Envelope,
    what: &str,
) -> Result<Outgoing, Error> {
    let mut event: Event = planner.event(
        result,
        derive_id_labelled(result.id, "result", 0),
        EventType::Result,
    );
    event.to = result.to.clone();
    event.reason.clone_from(&result.reason);
    event.detail = Some(match (&result.from, result.status.as_ref()) {
        (Some(from), Some(status)) => format!("{status} result from {from}: {what}"),
        _ => what.to_owned(),
    });
    event.output.clone_from(&result.output);
    event.path.clone_from(&result.path);
    emitter.event(&event)
}

/// Settles a result message that arrived before its time.
pub(crate) async fn later(message: &jetstream::Message, delay: Duration) {
    if let Err(err) = message.ack_with(AckKind::Nak(Some(delay))).await {
        tracing::debug!(error = %err, "could not reschedule the join timer");
    }
}
