//! Teams: a coordinator agent forms a team for a goal, then coordinates it
//! with typed messages in one group conversation, on the delegation joins.
//!
//! - **Team up.** Members named in the [`TeamSpec`] join as they are; for
//!   each capability set to `find`, the registry is asked with the
//!   coordinator as `prefer`, so a past collaborator from its notebook
//!   wins when one fits, and the registry's best otherwise. The roster is
//!   in the `team` variable, and a `team_up` message says who and why.
//! - **Assign.** The coordinator delegates; each child is an assignment,
//!   synchronous unless its tag is `async`. All go out at once, on one
//!   asynchronous join. A synchronous assignment holds the discussion: the
//!   coordinator's turn comes when its result is in. An asynchronous one
//!   does not: its worker confirms receipt with a `progress` message, and
//!   its `result` is added to the group conversation when it arrives.
//! - **Pause.** A coordinator that waits ([`crate::Outcome::wait`]) while
//!   asynchronous assignments are out pauses the team: no worker is held,
//!   and its next turn comes when the last of them has reported.
//! - **Conclude.** A coordinator that completes or answers concludes: the
//!   goal is done, and the session (or the parent team's assignment) ends.
//! - **Nested.** A member that is a team coordinator itself, with `nested`
//!   on, forms a sub-team for its assignment, down to its `max_depth`.
//!
//! Every message is recorded in the conversation with its type
//! (`coordination`) and speaker (`name`).

use baton_proto::{AgentName, LookupRequest, Message, Role, Value};
use serde::{Deserialize, Serialize};

use crate::agent::{Agent, Task};
use crate::delegate::{ChildResult, DelegateMode, Results};
use crate::outcome::{AgentError, ContextUpdate, Outcome};

/// How a team is formed: the spec's `[team]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamSpec {
    /// Members by agent type.
    #[serde(default)]
    pub members: Vec<String>,
    /// Capability sets to find one member each with (notebook first, then
    /// the registry).
    #[serde(default)]
    pub find: Vec<Vec<String>>,
    /// Whether this agent forms a sub-team when it is itself a member of a
    /// team; otherwise it does its assignment alone.
    #[serde(default = "yes")]
    pub nested: bool,
    /// The deepest team level it forms a team at: 1, only as the top team.
    #[serde(default = "two")]
    pub max_depth: u32,
}

fn yes() -> bool {
    true
}

fn two() -> u32 {
    2
}

impl Default for TeamSpec {
    fn default() -> Self {
        Self {
            members: Vec::new(),
            find: Vec::new(),
            nested: true,
            max_depth: 2,
        }
    }
}

/// An agent that coordinates a team ([`TeamSpec`]); see the module docs.
///
/// # Examples
///
/// ```
/// use baton_author::{Agent, AgentError, Outcome, Task, Team, TeamSpec};
///
/// struct Lead;
///
/// impl Agent for Lead {
///     async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
///         Ok(Outcome::complete("done").into())
///     }
/// }
///
/// let spec = TeamSpec { find: vec![vec!["review".into()]], ..TeamSpec::default() };
/// let team = Team::new(Lead, spec);
/// ```
#[derive(Debug)]
pub struct Team<A> {
    inner: A,
    spec: TeamSpec,
}

impl<A> Team<A> {
    /// `inner` as the coordinator of teams formed by `spec`.
    #[must_use]
    pub fn new(inner: A, spec: TeamSpec) -> Self {
        Self { inner, spec }
    }
}

/// One member of a team, as the `team` variable lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Member {
    agent: String,
    /// `named`, `notebook` or `registry`.
    via: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    capabilities: Vec<String>,
    /// Sessions together, from the notebook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sessions: Option<u64>,
}

/// What the coordinator keeps between turns (`state.team`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Board {
    /// The team's level: 1 for a top team.
    depth: u32,
    coordinator: String,
    /// The assignments of the current round, by child index: agent, async.
    #[serde(default)]
    assigned: Vec<(String, bool)>,
    #[serde(default)]
    paused: bool,
}

fn board(task: &Task) -> Option<Board> {
    let value = task.envelope.context.state.get("team")?;
    let json = serde_json::to_value(value).ok()?;
    serde_json::from_value(json).ok()
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value)
        .ok()
        .and_then(|json| rmpv::ext::to_value(json).ok())
        .unwrap_or(Value::Nil)
}

/// A coordination message of `kind` from `speaker`.
fn said(kind: &str, speaker: &str, text: impl Into<String>) -> Message {
    let mut message = Message::new(Role::Agent, text).with_name(speaker);
    message.coordination = Some(kind.to_owned());
    message
}

impl<A: Agent> Agent for Team<A> {
    async fn handle(&self, mut task: Task) -> Result<Outcome, AgentError> {
        // The team this task is an assignment of, if any.
        let outer = board(&task).map_or(0, |board| board.depth);
        let member = task.envelope.parent.is_some() && outer > 0;
        if outer + 1 > self.spec.max_depth || (member && !self.spec.nested) {
            return self.inner.handle(task).await;
        }
        let roster = self.team_up(&task).await?;
        let me = task.agent.to_string();
        let names: Vec<String> = roster
            .iter()
            .map(|m| format!("{} ({})", m.agent, m.via))
            .collect();
        let goal = task.envelope.context.problem.clone();
        let goal = if goal.is_empty() {
            task.query().to_owned()
        } else {
            goal
        };
        let intro = said(
            "team_up",
            &me,
            format!("formed a team for \"{goal}\": {}", names.join(", ")),
        );
        let mut update = ContextUpdate::default();
        update.messages.push(intro);
        update
            .variables
            .insert("team".to_owned(), to_value(&roster));
        let board = Board {
            depth: outer + 1,
            coordinator: me,
            ..Board::default()
        };
        update.apply_to(&mut task.envelope.context);
        let outcome = self.inner.handle(task).await?;
        self.moved(outcome, update, board, &Outstanding::default())
    }

    async fn resume(&self, mut task: Task, results: Results) -> Result<Outcome, AgentError> {
        // Not a round of this agent's own team (it did the work alone, and
        // the board is the team it is a member of): a plain continuation.
        let Some(mut board) = board(&task).filter(|b| b.coordinator == task.agent.as_str()) else {
            return self.inner.resume(task, results).await;
        };
        let mut update = ContextUpdate::default();
        if let Some(latest) = results
            .latest
            .and_then(|i| results.results.iter().find(|r| r.index == i))
        {
            update.messages.push(result_message(latest));
        }
        let out = Outstanding::of(&board, &results);
        // The discussion waits for a synchronous result; a paused team for
        // every asynchronous one. Meanwhile results only join the conversation.
        if out.sync > 0 || (board.paused && out.asynchronous > 0) {
            return Ok(Outcome::Wait(crate::outcome::Wait {
                update,
                parked: false,
            }));
        }
        if board.paused {
            board.paused = false;
            update.state.insert("team".to_owned(), to_value(&board));
        }
        update.apply_to(&mut task.envelope.context);
        let outcome = self.inner.resume(task, results).await?;
        self.moved(outcome, update, board, &out)
    }

    fn retry_policy(&self) -> crate::RetryPolicy {
        self.inner.retry_policy()
    }

    fn timeout(&self) -> std::time::Duration {
        self.inner.timeout()
    }

    fn concurrency(&self) -> usize {
        self.inner.concurrency()
    }

    fn routing(&self) -> Option<&crate::Routing> {
        self.inner.routing()
    }
}

/// Assignments of the current round still out.
#[derive(Debug, Default)]
struct Outstanding {
    sync: usize,
    asynchronous: usize,
}

impl Outstanding {
    fn of(board: &Board, results: &Results) -> Self {
        let mut out = Self::default();
        for (index, (_, asynchronous)) in board.assigned.iter().enumerate() {
            let answered = results.results.iter().any(|r| r.index as usize == index);
            if !answered {
                if *asynchronous {
                    out.asynchronous += 1;
                } else {
                    out.sync += 1;
                }
            }
        }
        out
    }
}

/// A member's result as a coordination message.
fn result_message(result: &ChildResult) -> Message {
    let speaker = result.agent.as_deref().unwrap_or_default().to_owned();
    let text = if result.completed() {
        crate::delegate::text_of(&result.output)
    } else {
        format!("failed: {}", result.detail.clone().unwrap_or_default())
    };
    said("result", &speaker, text)
}

impl<A: Agent> Team<A> {
    /// The members: named ones, then one per capability set, found with
    /// the coordinator's notebook first.
    async fn team_up(&self, task: &Task) -> Result<Vec<Member>, AgentError> {
        let mut roster: Vec<Member> = self
            .spec
            .members
            .iter()
            .map(|agent| Member {
                agent: agent.clone(),
                via: "named".to_owned(),
                capabilities: Vec::new(),
                sessions: None,
            })
            .collect();
        for need in &self.spec.find {
            let Some(registry) = &task.registry else {
                return Err(AgentError::fatal(
                    "a team with `find` needs the registry: run the worker without --no-registry",
                ));
            };
            let members = roster
                .iter()
                .map(|m| AgentName::unchecked(m.agent.as_str()));
            let mut exclude: Vec<AgentName> = members.collect();
            exclude.push(task.agent.clone());
            let request = LookupRequest {
                requires: need.clone(),
                exclude,
                prefer: Some(task.agent.to_string()),
                query: Some(task.query().to_owned()),
                ..LookupRequest::default()
            };
            let answer = registry
                .lookup(&request)
                .await
                .map_err(|err| AgentError::retryable(format!("team-up: {err}")))?;
            let Some(best) = answer.candidates.into_iter().next() else {
                return Err(AgentError::fatal(format!(
                    "team-up: no live agent offers [{}] (and none is in the notebook)",
                    need.join(", ")
                )));
            };
            let known = best.why.as_ref().and_then(|why| why.notebook.as_ref());
            roster.push(Member {
                via: if known.is_some() {
                    "notebook"
                } else {
                    "registry"
                }
                .to_owned(),
                sessions: known.map(|k| k.sessions),
                agent: best.agent.to_string(),
                capabilities: need.clone(),
            });
        }
        Ok(roster)
    }

    /// The coordinator's move, as the team makes it: assignments go out on
    /// one asynchronous join, a wait pauses, an answer concludes.
    fn moved(
        &self,
        mut outcome: Outcome,
        mut update: ContextUpdate,
        mut board: Board,
        out: &Outstanding,
    ) -> Result<Outcome, AgentError> {
        let me = board.coordinator.clone();
        // What the coordinator said is discussion.
        for message in &mut outcome.update_mut().messages {
            if message.coordination.is_none() && message.role == Role::Agent {
                message.coordination = Some("discussion".to_owned());
                message.name.get_or_insert_with(|| me.clone());
            }
        }
        match &mut outcome {
            Outcome::Delegate(delegation) => {
                if out.asynchronous > 0 {
                    return Err(AgentError::fatal(format!(
                        "{} asynchronous assignment(s) are still out: pause (wait) until they report, then assign more",
                        out.asynchronous
                    )));
                }
                board.assigned.clear();
                for child in &mut delegation.children {
                    let asynchronous = child.tag.as_deref() == Some("async");
                    let agent = child.target.label();
                    let kind = if asynchronous {
                        "assign_async"
                    } else {
                        "assign_sync"
                    };
                    update
                        .messages
                        .push(said(kind, &me, format!("{agent}: {}", child.input)));
                    if asynchronous {
                        // The tag was the agent's mark; the runtime carries it now.
                        child.tag = None;
                        child.asynchronous = true;
                    }
                    board.assigned.push((agent, asynchronous));
                }
                delegation.mode = DelegateMode::Async;
            }
            Outcome::Wait(_) => {
                if out.asynchronous == 0 {
                    return Err(AgentError::fatal(
                        "pause: no asynchronous assignment is out to wait for; conclude or assign instead",
                    ));
                }
                board.paused = true;
                update.messages.push(said(
                    "pause",
                    &me,
                    format!("waiting for {} assignment(s)", out.asynchronous),
                ));
            }
            Outcome::Complete(_) | Outcome::Answer(_) => {
                update
                    .messages
                    .push(said("conclude", &me, "the goal is done"));
            }
            Outcome::Handoff(_) => {}
        }
        update.state.insert("team".to_owned(), to_value(&board));
        let mine = outcome.update_mut();
        let theirs = std::mem::take(mine);
        *mine = merged(update, theirs);
        Ok(outcome)
    }
}

/// The team's update, then the coordinator's own.
fn merged(mut team: ContextUpdate, theirs: ContextUpdate) -> ContextUpdate {
    // The coordinator's messages come before the team's notes of its move.
    let notes = std::mem::take(&mut team.messages);
    let (before, after): (Vec<_>, Vec<_>) = notes.into_iter().partition(|m| {
        matches!(
            m.coordination.as_deref(),
            Some("team_up" | "result" | "progress")
        )
    });
    team.messages = before;
    team.messages.extend(theirs.messages);
    team.messages.extend(after);
    team.variables.extend(theirs.variables);
    team.trace.extend(theirs.trace);
    let board = team.state.remove("team");
    team.state.extend(theirs.state);
    if let Some(board) = board {
        team.state.insert("team".to_owned(), board);
    }
    team.problem = theirs.problem.or(team.problem);
    team.compaction = theirs.compaction.or(team.compaction);
    team.hand_back |= theirs.hand_back;
    team
}

#[cfg(test)]
#[path = "team_tests.rs"]
mod tests;
