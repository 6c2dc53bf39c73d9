//! Tool calls that wait for a person in the inbox. An LLM agent's hop
//! parks its envelope here ([`Inbox::park`]) with a [`Gate`] when a call
//! may not go on without one: its outcome is unknown after a crash and its
//! tool must not be called twice (`tool_outcome_unknown`), or its tool needs
//! approval (`approval_required`). A person's [`Decision`] is written to the
//! hop journal, then the envelope goes back to the agent under a derived id,
//! carrying [`Resumed`], and the hop continues from its journal: nothing
//! answered is asked again, and the call is made at most once more.

use baton_proto::{
    AgentName, Envelope, Event, EventType, Gate, JournalEntry, Reason, Resumed, Value,
    derive_id_labelled,
};

use super::decided::{Decision, authorized, decision_entry};
use super::{Inbox, InboxEntry, encode};
use baton_nats::{Error, ErrorKind};

/// The commands that settle an entry waiting for `reason`, for messages.
pub(super) fn commands_for(reason: &Reason, id: &str) -> String {
    if *reason == Reason::ApprovalRequired {
        format!("baton inbox approve {id} or baton inbox deny {id}")
    } else if *reason == Reason::AuthorizationRequired {
        format!("baton inbox authorize {id}, which signs in to the MCP server again")
    } else if *reason == Reason::InputRequired {
        "the user's answer (an A2A message to the task, or the next message of its conversation)"
            .to_owned()
    } else {
        format!("baton inbox resolve {id} --happened | --not-happened | --fail")
    }
}

impl InboxEntry {
    /// The tool call it waits on, when it is one (not a task for a person).
    #[must_use]
    pub fn gate(&self) -> Option<&Gate> {
        self.envelope.gate.as_ref()
    }

    /// Why it waits: the gate's reason for a tool call, else the reason
    /// the task came to the person.
    #[must_use]
    pub fn reason(&self) -> Option<&Reason> {
        self.gate()
            .map(|gate| &gate.reason)
            .or(self.envelope.reason.as_ref())
    }
}

impl Inbox {
    /// Parks `envelope` (whose `gate` is set, and whose id is the entry's)
    /// for a person; a call that waits for approval is announced with a
    /// `tool_approval_requested` event. A redelivered hop parks it again
    /// under the same ids, harmlessly.
    ///
    /// # Errors
    ///
    /// When the bucket or the events stream does not acknowledge the write.
    pub async fn park(&self, envelope: &Envelope, agent: &AgentName) -> Result<(), Error> {
        let gate = envelope.gate.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::WrongAnswer,
                "only a tool call with a gate is parked",
            )
        })?;
        self.put(envelope).await?;
        if gate.reason == Reason::ApprovalRequired {
            let id = derive_id_labelled(envelope.id, "approval_requested", 0);
            let mut event = Event::new(id, envelope.session, EventType::ToolApprovalRequested);
            event.agent = Some(agent.clone());
            event.envelope = Some(envelope.id);
            event.reason = Some(Reason::ApprovalRequired);
            event.detail = Some(format!("{} {}", gate.tool, gate.arguments));
            event.output = Some(gate_output(gate, envelope.id));
            let subject = self.subjects.events(envelope.session);
            self.publish(subject, event.id, encode(&event)?.into())
                .await?;
        }
        Ok(())
    }

    /// Settles waiting tool call `id` with `decision` by `person`: records
    /// the decision in the hop journal, announces an approval or denial,
    /// sends the envelope back to its agent, and only then removes the
    /// entry. Returns what happens next, for the person.
    ///
    /// # Errors
    ///
    /// When nothing waits under `id` (resolved already?), the entry is a
    /// task for a person or waits for another kind of decision, its
    /// session was cancelled or passed its deadline, or a write is not
    /// acknowledged (then the entry stays, and settling it again is safe).
    pub async fn resolve(
        &self,
        id: &str,
        decision: Decision,
        person: &str,
    ) -> Result<String, Error> {
        self.resolve_with(id, decision, person, None).await
    }

    /// As [`Inbox::resolve`], with the `variables` that came with a user's
    /// answer (`a2a` for an A2A message), recorded beside it in the hop
    /// journal for the agent that asked.
    ///
    /// # Errors
    ///
    /// As for [`Inbox::resolve`].
    pub async fn resolve_with(
        &self,
        id: &str,
        decision: Decision,
        person: &str,
        variables: Option<Value>,
    ) -> Result<String, Error> {
        let (entry, gate) = self.settleable(id, &decision).await?;
        let agent = AgentName::new(entry.agent()).map_err(|err| {
            Error::with_source(
                ErrorKind::Decode,
                format!("entry {id} names no agent type"),
                err,
            )
        })?;
        self.record(&gate, &decision, person, variables).await?;
        self.announce(&entry, &gate, &decision, person).await?;
        self.send_back(&entry, &gate, &decision, &agent).await?;
        self.forget(&entry).await;
        Ok(match decision {
            Decision::Happened(_) => {
                format!("{agent} goes on with the call's result; it is not made again")
            }
            Decision::NotHappened => format!("{agent} makes the call once"),
            Decision::Fail(_) => {
                format!("{agent} ends the session as failed (tool_outcome_unknown)")
            }
            Decision::Approve => format!("{agent} makes the approved call once"),
            Decision::Deny(_) => format!("{agent} tells the model the call was denied"),
            Decision::Answer(_) => format!("{agent} goes on with the answer"),
            Decision::Authorized => format!("{agent} makes the call again, signed in anew"),
        })
    }

    /// The entry under `id` and its gate, when `decision` may settle it.
    async fn settleable(&self, id: &str, decision: &Decision) -> Result<(InboxEntry, Gate), Error> {
        let entry = self.entry(id).await?.ok_or_else(|| {
            Error::new(ErrorKind::NotWaiting, format!(
                "nothing is waiting in the inbox under {id}: it was settled already, or the id is wrong (see `baton inbox ls`)"
            ))
        })?;
        let Some(gate) = entry.gate().cloned() else {
            return Err(Error::new(
                ErrorKind::WrongAnswer,
                format!(
                    "{id} is a task for a person, not a tool call: answer it with `baton inbox reply {id} TEXT`"
                ),
            ));
        };
        if gate.reason != decision.answers() {
            let waits = match gate.reason {
                Reason::ApprovalRequired => "an approval",
                Reason::InputRequired => "the user's answer",
                Reason::AuthorizationRequired => "a new sign-in to its MCP server",
                _ => "a person to say whether the call happened",
            };
            return Err(Error::new(
                ErrorKind::WrongAnswer,
                format!(
                    "{id} waits for {waits} ({}): settle it with {}",
                    gate.reason,
                    commands_for(&gate.reason, id)
                ),
            ));
        }
        self.still_open(&entry, id).await?;
        Ok((entry, gate))
    }

    /// A `tool_approved` or `tool_denied` event for an approval's decision.
    async fn announce(
        &self,
        entry: &InboxEntry,
        gate: &Gate,
        decision: &Decision,
        person: &str,
    ) -> Result<(), Error> {
        let kind = match decision {
            Decision::Approve => EventType::ToolApproved,
            Decision::Deny(_) => EventType::ToolDenied,
            _ => return Ok(()),
        };
        let envelope = &entry.envelope;
        let id = derive_id_labelled(envelope.id, "decided", 0);
        let mut event = Event::new(id, envelope.session, kind);
        event.agent = Some(entry.agent_type());
        event.instance = Some(person.to_owned());
        event.envelope = Some(envelope.id);
        if let Decision::Deny(Some(note)) = decision {
            event.detail = Some(note.clone());
        }
        event.output = Some(gate_output(gate, envelope.id));
        let subject = self.subjects.events(envelope.session);
        self.publish(subject, event.id, encode(&event)?.into())
            .await
    }

    /// Sends the parked envelope back to `agent`, under an id derived from
    /// the entry's, carrying the journal to continue and the decision.
    async fn send_back(
        &self,
        entry: &InboxEntry,
        gate: &Gate,
        decision: &Decision,
        agent: &AgentName,
    ) -> Result<(), Error> {
        let parked = &entry.envelope;
        let id = derive_id_labelled(parked.id, "resume", 0);
        let mut resumed = parked
            .clone()
            .resent(id, parked.kind.clone(), agent.clone());
        resumed.resumed = Some(Resumed {
            journal: gate.journal,
            decision: decision.as_str().to_owned(),
            tool: gate.tool.clone(),
            extra: baton_proto::Map::new(),
        });
        // Pinned where it was parked already; addressed as every sender does.
        let rollouts = self.rollouts().await;
        let sending = baton_nats::pipeline::address::Sending::HandedOn;
        let sent = baton_nats::pipeline::address::addressed(
            (rollouts, &self.subjects),
            sending,
            agent,
            &mut resumed,
        );
        let payload = self
            .claims
            .pack(encode(&resumed)?.into())
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot send the task back", err)
            })?;
        self.publish(sent.subject, sent.id, payload).await
    }

    /// Refuses to settle an entry whose session was cancelled (removing
    /// it) or passed its deadline.
    async fn still_open(&self, entry: &InboxEntry, id: &str) -> Result<(), Error> {
        let session = entry.envelope.session;
        if self.cancelled(session).await {
            self.forget(entry).await;
            return Err(Error::new(
                ErrorKind::Ended,
                format!(
                    "{id}'s session {session} was cancelled; the entry is removed from the inbox"
                ),
            ));
        }
        if entry
            .envelope
            .deadline
            .is_some_and(|deadline| baton_proto::now_ms() > deadline)
        {
            return Err(Error::new(
                ErrorKind::Ended,
                format!(
                    "{id}'s session passed its deadline and has ended; the decision would come too late"
                ),
            ));
        }
        Ok(())
    }

    /// Writes `decision` on `gate`'s call into the hop journal, where the
    /// resumed hop reads it.
    async fn record(
        &self,
        gate: &Gate,
        decision: &Decision,
        person: &str,
        variables: Option<Value>,
    ) -> Result<(), Error> {
        let journal = self
            .jetstream
            .get_key_value(self.subjects.journal_bucket())
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot open the hop journal", err)
            })?;
        if *decision == Decision::Authorized {
            return authorized(&journal, gate, person).await;
        }
        let Some((suffix, mut entry)) = decision_entry(gate, decision, person) else {
            // A program's step keeps its place (its label was in its start)
            // as a marker (proto-schemas/exec-calls.md).
            if gate.tool.starts_with("step:") {
                let marker = JournalEntry {
                    calls: vec![gate.tool.clone()],
                    ..JournalEntry::default()
                };
                let bytes = rmp_serde::to_vec_named(&marker).map_err(|err| {
                    Error::with_source(ErrorKind::Encode, "cannot encode a marker", err)
                })?;
                let key = format!("{}.{}.call", gate.journal, gate.step);
                (journal.put(key, bytes.into()).await).map_err(|err| {
                    Error::with_source(ErrorKind::JetStream, "cannot record the decision", err)
                })?;
            }
            // With no start on record, the hop makes the call (once).
            let key = JournalEntry::call_key(gate.journal, gate.step, gate.call, "started");
            return journal.delete(key).await.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot record the decision", err)
            });
        };
        if matches!(decision, Decision::Answer(_)) {
            entry.variables = variables;
        }
        let key = JournalEntry::call_key(gate.journal, gate.step, gate.call, suffix);
        let bytes = rmp_serde::to_vec_named(&entry).map_err(|err| {
            Error::with_source(ErrorKind::Encode, "cannot encode the decision", err)
        })?;
        journal
            .put(key, bytes.into())
            .await
            .map(drop)
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot record the decision", err)
            })
    }
}

/// What a gate's events carry: the tool, its arguments and the entry.
fn gate_output(gate: &Gate, entry: uuid::Uuid) -> Value {
    let arguments: serde_json::Value =
        serde_json::from_str(&gate.arguments).unwrap_or(serde_json::Value::Null);
    rmpv::ext::to_value(serde_json::json!({
        "tool": gate.tool,
        "arguments": arguments,
        "entry": entry.to_string(),
    }))
    .unwrap_or(Value::Nil)
}
