//! The hop's record of a program's calls: where each call is placed, what
//! a hop that runs again reads back, and the drift between the two.

use baton_proto::Value;
use baton_worker::{AgentError, Task};
use uuid::Uuid;

use super::{FIRST_STEP, Hop, JOURNAL, Placed};

impl Hop {
    /// Where the next call of `label` is in the record: a recorded one,
    /// or a new place at its end, marked in the journal (`started`: by a
    /// step's start). Drift when the record holds another call this run
    /// has not made yet.
    pub(super) async fn place(&self, label: String, started: bool) -> Result<Placed, AgentError> {
        let mut record = self.record.lock().await;
        if !record.loaded {
            record.labels = self.recorded().await?;
            record.claimed = vec![false; record.labels.len()];
            record.loaded = true;
        }
        let seen = record.seen.entry(label.clone()).or_default();
        let nth = *seen;
        *seen += 1;
        let found = (record.labels.iter().enumerate())
            .filter(|(_, recorded)| **recorded == label)
            .nth(nth)
            .map(|(at, _)| at);
        if let Some(at) = found {
            record.claimed[at] = true;
            return Ok(Placed {
                step: step_at(at),
                recorded: true,
                nth,
            });
        }
        // A recorded call not made again yet is drift, unless other calls
        // of this run are being made: parallel branches may come in
        // another order, and claim their places after this new one.
        let alone = self.in_flight.load(std::sync::atomic::Ordering::Acquire) <= 1;
        let unclaimed = record.claimed.iter().position(|claimed| !claimed);
        if let Some(first) = unclaimed.filter(|_| alone) {
            return Err(AgentError::fatal(drift(
                first,
                &record.labels[first],
                &label,
            )));
        }
        // Marked while the record is held: places are marked in order.
        let step = step_at(record.labels.len());
        (self.journal())
            .place(self.journal_id, step, &label, started)
            .await?;
        record.labels.push(label);
        record.claimed.push(true);
        Ok(Placed {
            step,
            recorded: false,
            nth,
        })
    }

    /// The labels of the calls the hop recorded, in order: none for a hop
    /// that runs for the first time (its first delivery, not resumed, not
    /// a continuation, not a replay), which has no record to read.
    pub(super) async fn recorded(&self) -> Result<Vec<String>, AgentError> {
        let envelope = &self.task.envelope;
        let fresh = self.task.attempt == 1
            && envelope.resumed.is_none()
            && envelope.replay.is_none()
            && self.results.is_none()
            && self.journal_id == envelope.id;
        let mut labels = Vec::new();
        if fresh {
            return Ok(labels);
        }
        while let Some(label) = (self.journal())
            .label(self.journal_id, step_at(labels.len()))
            .await?
        {
            labels.push(label);
        }
        Ok(labels)
    }
}

/// The hop journal `task`'s calls go in: its own (the id it first ran
/// under), or, for the continuation of a delegation (and that continuation
/// resumed after a question), the journal of the hop that delegated.
pub(super) fn journal_of(task: &Task) -> Uuid {
    let own = crate::llm::journal_of(task);
    let left = task
        .envelope
        .context
        .state
        .get(JOURNAL)
        .and_then(Value::as_map);
    let field = |name: &str| {
        let (_, value) = left?.iter().find(|(k, _)| k.as_str() == Some(name))?;
        value.as_str()?.parse::<Uuid>().ok()
    };
    match (field("continuation"), field("journal")) {
        (Some(continuation), Some(journal)) if continuation == own => journal,
        _ => own,
    }
}

/// The journal step of the call at index `at` of the record.
pub(super) fn step_at(at: usize) -> u32 {
    FIRST_STEP + u32::try_from(at + 1).unwrap_or(u32::MAX - FIRST_STEP)
}

/// How a label reads in an error.
pub(super) fn described(label: &str) -> String {
    let mut parts = label.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some("step"), Some(name)) => format!("'{name}'"),
        (Some("tool"), Some(name)) => format!("tool '{name}'"),
        (Some("model"), _) => "a model call".to_owned(),
        (Some("ask"), _) => "a question (ctx.ask)".to_owned(),
        (Some("delegate"), _) => "a delegation (ctx.delegate)".to_owned(),
        (Some("say"), _) => "a message (ctx.say)".to_owned(),
        _ => format!("'{label}'"),
    }
}

/// Why a call that is not in the record fails the hop: the record's call
/// at `first` (from 0) was not made again, and `now` was made instead.
pub(super) fn drift(first: usize, recorded: &str, now: &str) -> String {
    let (was, is) = (described(recorded), described(now));
    let differs = if was == is {
        " with other arguments"
    } else {
        ""
    };
    format!(
        "the handler does not do what it did: step {} is {was} in the record, {is}{differs} now (a handler must make the same calls in the same order when it runs again: keep what changes between runs, such as the time or a random number, inside ctx.step)",
        first + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_names_both_calls() {
        assert!(
            drift(0, "step:step-0", "step:step-1")
                .contains("step 1 is 'step-0' in the record, 'step-1' now")
        );
        assert!(drift(2, "tool:refund:abc", "tool:refund:def").contains(
            "step 3 is tool 'refund' in the record, tool 'refund' with other arguments now"
        ));
        assert!(
            drift(1, "model:x", "step:charge")
                .contains("step 2 is a model call in the record, 'charge' now")
        );
    }

    #[test]
    fn places_map_to_steps_clear_of_the_questions() {
        assert_eq!(step_at(0), 1001);
        assert_eq!(step_at(7), 1008);
    }
}
