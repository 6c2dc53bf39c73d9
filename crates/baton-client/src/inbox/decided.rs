//! What a person's decision on a waiting tool call writes into the hop
//! journal.

use baton_proto::{Gate, JournalEntry, Reason};

use baton_nats::{Error, ErrorKind};

/// What a person decides about a waiting tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A call whose outcome was unknown did happen; the text is its result
    /// as the model will read it (a default sentence when `None`).
    Happened(Option<String>),
    /// A call whose outcome was unknown did not happen: it is made once.
    NotHappened,
    /// The session fails (reason `tool_outcome_unknown`), with the note.
    Fail(Option<String>),
    /// The call waiting for approval is made, once.
    Approve,
    /// The call waiting for approval is not made; the model is told so,
    /// with the note.
    Deny(Option<String>),
    /// The user's answer to the question an agent asked (`ask_user`): the
    /// call's result, and the agent goes on from where it asked.
    Answer(String),
    /// A person signed in to the call's MCP server again (`baton inbox
    /// authorize`): the call, refused before it ran, is made again.
    Authorized,
}

impl Decision {
    /// Its name, as the resumed envelope and the metrics carry it.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Happened(_) => "happened",
            Self::NotHappened => "not_happened",
            Self::Fail(_) => "fail",
            Self::Approve => "approved",
            Self::Deny(_) => "denied",
            Self::Answer(_) => "answered",
            Self::Authorized => "authorized",
        }
    }

    /// The gate reason it answers.
    pub(super) fn answers(&self) -> Reason {
        match self {
            Self::Happened(_) | Self::NotHappened | Self::Fail(_) => Reason::ToolOutcomeUnknown,
            Self::Approve | Self::Deny(_) => Reason::ApprovalRequired,
            Self::Answer(_) => Reason::InputRequired,
            Self::Authorized => Reason::AuthorizationRequired,
        }
    }
}

/// Counts one more sign-in for `gate`'s call (`.authorized`, `{text: the
/// count}`), which the hop reads to stop after a few, and forgets the
/// call's start: it was refused before it ran.
pub(super) async fn authorized(
    journal: &async_nats::jetstream::kv::Store,
    gate: &Gate,
    person: &str,
) -> Result<(), Error> {
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::JetStream,
            format!("cannot record the sign-in: {err}"),
        )
    };
    let key = JournalEntry::call_key(gate.journal, gate.step, gate.call, "authorized");
    let held = (journal.entry(&key).await)
        .map_err(|err| failed(&err))?
        .filter(|entry| entry.operation == async_nats::jetstream::kv::Operation::Put);
    let before = (held.as_ref())
        .and_then(|entry| rmp_serde::from_slice::<JournalEntry>(&entry.value).ok())
        .and_then(|entry| entry.text)
        .and_then(|count| count.parse::<u32>().ok())
        .unwrap_or(0);
    let entry = JournalEntry {
        text: Some((before + 1).to_string()),
        by: Some(person.to_owned()),
        at: Some(baton_proto::now_ms()),
        ..JournalEntry::default()
    };
    let bytes = rmp_serde::to_vec_named(&entry)
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode the sign-in", err))?;
    // Counted once though two people sign in at once: the second write,
    // made on the revision the first replaced, is refused and not counted.
    let written = match held {
        Some(held) => journal
            .update(&key, bytes.into(), held.revision)
            .await
            .map(drop)
            .map_err(|err| err.to_string()),
        None => journal
            .create(&key, bytes.into())
            .await
            .map(drop)
            .map_err(|err| err.to_string()),
    };
    if let Err(err) = written {
        tracing::info!(%err, "another sign-in for this call was counted first");
    }
    let started = JournalEntry::call_key(gate.journal, gate.step, gate.call, "started");
    journal.delete(started).await.map_err(|err| failed(&err))
}

/// The journal entry (its key's suffix, and the value) that records
/// `person`'s `decision` on `gate`'s call; `None` for a call that did not
/// happen, whose start is deleted instead.
pub(super) fn decision_entry(
    gate: &Gate,
    decision: &Decision,
    person: &str,
) -> Option<(&'static str, JournalEntry)> {
    let by = |entry: JournalEntry| JournalEntry {
        by: Some(person.to_owned()),
        at: Some(baton_proto::now_ms()),
        ..entry
    };
    let (suffix, entry) = match decision {
        Decision::NotHappened | Decision::Authorized => return None,
        Decision::Happened(result) => (
            "result",
            by(JournalEntry {
                text: Some(result.clone().unwrap_or_else(|| {
                    format!(
                        "{} was made (a person confirmed it; its result was not recorded)",
                        gate.tool
                    )
                })),
                ..JournalEntry::default()
            }),
        ),
        Decision::Deny(note) => (
            "result",
            by(JournalEntry {
                text: Some(match note {
                    Some(note) => format!(
                        "denied: {person} did not approve this call of {}: {note}",
                        gate.tool
                    ),
                    None => format!(
                        "denied: {person} did not approve this call of {}",
                        gate.tool
                    ),
                }),
                is_error: true,
                ..JournalEntry::default()
            }),
        ),
        Decision::Answer(answer) => (
            "result",
            by(JournalEntry {
                text: Some(answer.clone()),
                ..JournalEntry::default()
            }),
        ),
        Decision::Fail(note) => (
            "failed",
            by(JournalEntry {
                text: note.clone(),
                ..JournalEntry::default()
            }),
        ),
        Decision::Approve => (
            "approved",
            by(JournalEntry {
                digest: Some(gate.digest.clone()),
                ..JournalEntry::default()
            }),
        ),
    };
    Some((suffix, entry))
}
