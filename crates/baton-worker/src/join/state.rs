//! The join as a pure state machine: what one `result` envelope does to a
//! delegation's state, and what the runtime must do next. No I/O: the store
//! and the runtime around it live in the parent module.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, ResultStatus, Value};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use baton_author::ContextPolicy;
use baton_author::{ChildResult, DelegateMode, Recover, Results, slot_index};

/// One child as the join remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JoinChild {
    /// Checked when the join is read back: it names the child's subject.
    #[serde(deserialize_with = "baton_proto::AgentName::deserialize_checked")]
    pub(crate) agent: AgentName,
    pub(crate) input: String,
    pub(crate) tag: Option<String>,
    /// Messages kept: `None` for all.
    keep: Option<usize>,
    /// A chain's recovery step stands in for this step.
    recover_for: Option<usize>,
    /// A team's asynchronous assignment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) asynchronous: bool,
}

impl JoinChild {
    pub(crate) fn new(
        agent: AgentName,
        input: String,
        tag: Option<String>,
        context: ContextPolicy,
    ) -> Self {
        let keep = match context {
            ContextPolicy::Full => None,
            ContextPolicy::LastN(n) => Some(n),
            ContextPolicy::None => Some(0),
        };
        Self {
            agent,
            input,
            tag,
            keep,
            recover_for: None,
            asynchronous: false,
        }
    }

    /// How much of the parent's conversation the child gets.
    pub(crate) fn context(&self) -> ContextPolicy {
        match self.keep {
            None => ContextPolicy::Full,
            Some(0) => ContextPolicy::None,
            Some(n) => ContextPolicy::LastN(n),
        }
    }
}

/// A recorded result and the message that recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Slot {
    pub(crate) result: ChildResult,
    pub(crate) by: Uuid,
}

/// A delegation in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JoinState {
    /// The delegating envelope with the agent's update applied.
    pub(crate) envelope: Envelope,
    pub(crate) mode: DelegateMode,
    pub(crate) children: Vec<JoinChild>,
    pub(crate) slots: Vec<Option<Slot>>,
    /// Children sent so far (serial and chain send one at a time).
    pub(crate) started: usize,
    pub(crate) deadline: Option<u64>,
    /// Depth of the children.
    pub(crate) depth: u32,
    /// The message that completed the join; only it runs the continuation.
    pub(crate) fired_by: Option<Uuid>,
    /// Continuation calls so far (async mode calls it per result).
    pub(crate) reports: u32,
    /// What each child started from and spent of its own, by child.
    #[serde(default)]
    pub(crate) spent: Vec<Spend>,
    /// What async reports that kept waiting spent, by the result that ran
    /// each (so a redelivered result counts once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) waited: Vec<Waited>,
    /// The `progress` results added to the conversation, so that a
    /// redelivered one is added once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) progressed: Vec<Uuid>,
}

/// What one result did to the join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Receipt {
    /// This message completed the join before (a redelivery): run the
    /// continuation again, with the same output ids.
    Refire,
    /// This message's result is already on record (a redelivery): act on
    /// the stored state.
    Recorded,
    /// Nothing changes: ack, with a `result` note when there is something to say.
    Drop(Option<String>),
    /// The deadline timer is early: deliver it again after this long.
    Later(Duration),
    /// The state changed: store it (compare-and-swap), then act on it. The
    /// note goes out with the outputs.
    Changed(Option<&'static str>),
    /// A team member's `progress` went into the conversation: store the
    /// state, and nothing more.
    Noted,
}

/// What the runtime does once the state is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FollowUp {
    /// This message completed the join: run the continuation.
    Fire,
    /// Send child number `n` (serial and chain modes).
    Send(usize),
    /// Async mode: run the continuation on the results so far, without
    /// ending the join unless it returns something other than waiting.
    Report,
    /// Nothing more.
    Nothing,
}

impl JoinState {
    /// A new join of `children` in `mode`, with its first wave started.
    pub(crate) fn new(
        envelope: Envelope,
        mode: DelegateMode,
        children: Vec<JoinChild>,
        deadline: Option<u64>,
        depth: u32,
    ) -> Self {
        let started = Self::first_wave(&mode, children.len());
        Self {
            envelope,
            mode,
            slots: vec![None; children.len()],
            children,
            started,
            deadline,
            depth,
            fired_by: None,
            reports: 0,
            spent: Vec::new(),
            waited: Vec::new(),
            progressed: Vec::new(),
        }
    }

    fn first_wave(mode: &DelegateMode, children: usize) -> usize {
        match mode {
            DelegateMode::Serial | DelegateMode::Chain { .. } => 1,
            DelegateMode::Parallel | DelegateMode::Async => children,
        }
    }

    /// The children of the first wave with no result yet: what a
    /// (re)delivery of the delegating message sends.
    pub(crate) fn unanswered_first_wave(&self) -> impl Iterator<Item = usize> + '_ {
        let first = Self::first_wave(&self.mode, self.children.len());
        (0..self.started.min(first)).filter(|&i| self.slots[i].is_none())
    }

    /// The children that are steps of their own (not recovery steps).
    pub(crate) fn main(&self) -> usize {
        self.children
            .iter()
            .filter(|c| c.recover_for.is_none())
            .count()
    }

    /// The results so far, in child order; `latest` marks the one that
    /// triggered an async report.
    pub(crate) fn results(&self, latest: Option<u32>) -> Results {
        let main = self.main();
        Results {
            mode: self.mode.clone(),
            results: self.slots[..main]
                .iter()
                .flatten()
                .map(|slot| slot.result.clone())
                .collect(),
            total: main,
            latest,
        }
    }

    /// In serial mode, the outputs of the children answered so far.
    pub(crate) fn earlier_outputs(&self) -> Option<Value> {
        matches!(self.mode, DelegateMode::Serial).then(|| self.results(None).outputs())
    }

    pub(crate) fn all_in(&self) -> bool {
        self.slots[..self.main()].iter().all(Option::is_some)
    }

    /// Records `result`, delivered as message `me` at `now`.
    pub(crate) fn receive(&mut self, result: &Envelope, me: Uuid, now: u64) -> Receipt {
        if result.status == Some(ResultStatus::Progress) {
            return self.progress(result, me);
        }
        let index = child_index(result);
        if self.fired_by == Some(me) {
            return Receipt::Refire;
        }
        let slot = index
            .and_then(|i| self.slots.get(i))
            .and_then(Option::as_ref);
        if slot.is_some_and(|slot| slot.by == me) {
            return Receipt::Recorded;
        }
        let late = self.deadline.is_some_and(|deadline| now > deadline);
        let note = match index {
            None if self.fired_by.is_some() => return Receipt::Drop(None),
            None => match self.deadline {
                None => {
                    return Receipt::Drop(Some(
                        "dropped: a result without a child index, for a join with no deadline"
                            .to_owned(),
                    ));
                }
                Some(deadline) if !late => {
                    return Receipt::Later(Duration::from_millis(deadline.saturating_sub(now)));
                }
                Some(_) => None,
            },
            Some(i) if i >= self.slots.len() => {
                return Receipt::Drop(Some(format!("dropped: the join has no child {i}")));
            }
            Some(_) if self.fired_by.is_some() => {
                return Receipt::Drop(Some("dropped: the join is already complete".to_owned()));
            }
            Some(i) if self.slots[i].is_some() => {
                return Receipt::Drop(Some("dropped: a duplicate of a recorded result".to_owned()));
            }
            Some(i) if late => {
                // Dropped, but what it spent was spent.
                self.charge(i, result);
                Some("dropped: it arrived after the join's deadline")
            }
            Some(i) => {
                self.charge(i, result);
                self.record(i, result, me);
                Some("recorded")
            }
        };
        let before = self.started;
        if late {
            self.expire(me);
        } else if let Some(i) = index {
            self.advance(i, me);
        }
        self.begin_from(before);
        Receipt::Changed(note)
    }

    /// A team member's note that it took its asynchronous assignment: into
    /// the group conversation, once, while the join is open.
    fn progress(&mut self, result: &Envelope, me: Uuid) -> Receipt {
        if self.fired_by.is_some() {
            return Receipt::Drop(Some("dropped: progress after the join ended".to_owned()));
        }
        if self.progressed.contains(&me) {
            return Receipt::Drop(None);
        }
        let from = result.from.as_deref().unwrap_or_default().to_owned();
        let mut note = baton_proto::Message::new(
            baton_proto::Role::Agent,
            result.output.as_ref().map(text).unwrap_or_default(),
        )
        .with_name(from);
        note.coordination = Some("progress".to_owned());
        self.envelope.context.messages.push(note);
        self.progressed.push(me);
        Receipt::Noted
    }

    /// What message `me` does next, with the state as stored; `recorded`
    /// says its result was already on record before it came (a redelivery).
    pub(crate) fn follow_up(&self, me: Uuid, recorded: bool) -> FollowUp {
        if self.fired_by == Some(me) {
            return FollowUp::Fire;
        }
        match self.mode {
            DelegateMode::Serial | DelegateMode::Chain { .. } => {
                let next = self.started - 1;
                if self.slots[next].is_none() {
                    FollowUp::Send(next)
                } else {
                    FollowUp::Nothing
                }
            }
            DelegateMode::Async if !recorded => FollowUp::Report,
            _ => FollowUp::Nothing,
        }
    }

    /// An async report that returned an outcome ends the join, unless
    /// another ended it first: `true` when `me` holds it now.
    pub(crate) fn claim(&mut self, me: Uuid) -> Claim {
        match self.fired_by {
            Some(by) => Claim::Held(by == me),
            None => {
                self.fired_by = Some(me);
                self.reports += 1;
                Claim::Changed
            }
        }
    }

    /// Puts child `i`'s result in its slot (a recovery step's result also
    /// in the step it stands for).
    fn record(&mut self, i: usize, result: &Envelope, me: Uuid) {
        let child = &self.children[i];
        let failed = result.status == Some(ResultStatus::Failed);
        let output = result.output.clone().unwrap_or(Value::Nil);
        let entry = ChildResult {
            index: slot_index(child.recover_for.unwrap_or(i)),
            agent: result.from.as_ref().map(ToString::to_string),
            tag: child.tag.clone(),
            status: if failed {
                ResultStatus::Failed
            } else {
                ResultStatus::Completed
            },
            detail: failed.then(|| text(&output)),
            output: if failed { Value::Nil } else { output },
        };
        if let Some(step) = child.recover_for {
            self.slots[step] = Some(Slot {
                result: entry.clone(),
                by: me,
            });
        }
        self.slots[i] = Some(Slot {
            result: entry,
            by: me,
        });
    }

    /// The deadline passed: every missing child failed, and `me` completes the join.
    fn expire(&mut self, me: Uuid) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = Some(Slot {
                    result: ChildResult {
                        index: slot_index(i),
                        agent: Some(self.children[i].agent.to_string()),
                        tag: self.children[i].tag.clone(),
                        status: ResultStatus::Failed,
                        output: Value::Nil,
                        detail: Some(
                            "deadline_exceeded: no result before the join's deadline".to_owned(),
                        ),
                    },
                    by: me,
                });
            }
        }
        self.fired_by = Some(me);
    }

    /// Decides what the join does after child `i`'s result: start the next
    /// child, recover, or complete (setting `fired_by`).
    fn advance(&mut self, i: usize, me: Uuid) {
        let main = self.main();
        let step = self.children[i].recover_for.unwrap_or(i);
        let recover = match &self.mode {
            DelegateMode::Parallel | DelegateMode::Async => {
                if self.all_in() {
                    self.fired_by = Some(me);
                }
                return;
            }
            DelegateMode::Serial => None,
            DelegateMode::Chain { recover } => Some(recover.clone()),
        };
        if let Some(recover) = recover {
            let failed = self.slots[step]
                .as_ref()
                .is_some_and(|slot| !slot.result.completed());
            if failed {
                match self.recover(step, i, recover) {
                    Recovery::Halt => {
                        self.fired_by = Some(me);
                        return;
                    }
                    Recovery::Started => return,
                    Recovery::StoodIn => {}
                }
            }
        }
        if step + 1 < main {
            if matches!(self.mode, DelegateMode::Chain { .. }) {
                let output = self.slots[step]
                    .as_ref()
                    .map(|slot| text(&slot.result.output))
                    .unwrap_or_default();
                self.children[step + 1].input = output;
            }
            self.started = step + 2;
        } else {
            self.fired_by = Some(me);
        }
    }

    /// A chain's step `step` failed (reported by child `i`): start a
    /// recovery step, stand a value in, or halt.
    fn recover(&mut self, step: usize, i: usize, recover: Option<Recover>) -> Recovery {
        if self.children[i].recover_for.is_some() {
            return Recovery::Halt; // the recovery failed too
        }
        match recover {
            Some(Recover::Agent(agent)) => {
                let detail = self.slots[step]
                    .as_ref()
                    .and_then(|slot| slot.result.detail.clone())
                    .unwrap_or_default();
                self.children.push(JoinChild {
                    recover_for: Some(step),
                    ..JoinChild::new(agent, detail, None, ContextPolicy::Full)
                });
                self.slots.push(None);
                self.started = self.children.len();
                Recovery::Started
            }
            Some(Recover::Value(value)) => {
                if let Some(slot) = self.slots[step].as_mut() {
                    slot.result.status = ResultStatus::Completed;
                    slot.result.output = value;
                }
                Recovery::StoodIn
            }
            None => Recovery::Halt,
        }
    }
}

/// What a chain does about a failed step.
enum Recovery {
    /// Nothing: the chain ends here.
    Halt,
    /// A recovery step was added; its result decides.
    Started,
    /// A value stands in for the step's output; the chain goes on.
    StoodIn,
}

/// The outcome of [`JoinState::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The join was already ended: by this message (`true`) or another.
    Held(bool),
    /// The state changed: store it to hold the join.
    Changed,
}

/// Which child a result answers: `None` for the deadline timer.
pub(crate) fn child_index(result: &Envelope) -> Option<usize> {
    result
        .parent
        .as_ref()
        .and_then(|parent| parent.index)
        .map(|i| i as usize)
}

use baton_author::text_of as text;

mod spending;
pub(crate) use spending::{Spend, Waited};

#[cfg(test)]
mod tests;
