//! What an outbox does to a hop's outputs before it sends them: contexts
//! refer to their conversation's transcript again, and (unless the worker
//! writes whole events) events keep once what they hold twice, a handoff
//! names only its new hop, and a replayable session's `started` event
//! rides in its hop's next stored event.

use baton_proto::EventType;

use super::Outbox;
use crate::decide::Output;

impl Outbox {
    /// Outputs whose contexts hold a turn's transcript refer to it again
    /// instead; a turn's end teaches the transcripts what it adds. With
    /// `compact`, an event keeps once what it holds twice, and on a first
    /// attempt a replayable session's `started` event folds into its hop's
    /// next stored event (a later attempt may follow one that stored it on
    /// its own, which the server's deduplication then drops again).
    pub(super) fn refer_to_transcripts(&self, outputs: &mut Vec<Output>, first_attempt: bool) {
        for output in outputs.iter_mut() {
            match output {
                Output::Envelope { envelope, .. } => envelope.context.collapse(),
                Output::Event(event) => {
                    if let Some(context) = event.context.as_mut() {
                        context.collapse();
                        self.transcripts.learn(event);
                    }
                }
                Output::DeadLetter(_) => {}
            }
        }
        if !self.compact {
            return;
        }
        if first_attempt {
            self.fold_started(outputs);
        }
        for output in outputs.iter_mut() {
            if let Output::Event(event) = output {
                event.keep_new_hops();
                event.refer();
            }
        }
    }

    /// Folds the hop's `started` event, if any, into the next event of the
    /// hop that the level stores, when that event's context is the start's
    /// with messages added ([`baton_proto::Event::fold_start`]).
    fn fold_started(&self, outputs: &mut Vec<Output>) {
        let Some(at) = outputs.iter().position(
            |output| matches!(output, Output::Event(event) if event.kind == EventType::Started),
        ) else {
            return;
        };
        let Some(next) = (at + 1..outputs.len()).find(|&n| {
            matches!(&outputs[n], Output::Event(event) if event.context.is_some()
                && self.level.stores(&event.kind))
        }) else {
            return;
        };
        let Output::Event(started) = outputs.remove(at) else {
            return;
        };
        let Output::Event(event) = &mut outputs[next - 1] else {
            return;
        };
        if let Err(started) = event.fold_start(*started) {
            outputs.insert(at, Output::Event(started));
        }
    }
}
