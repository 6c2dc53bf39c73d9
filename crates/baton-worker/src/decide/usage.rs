//! What a session spent travels on with it: every envelope this hop sends
//! on in the same session (a handoff, an escalation, a fallback) carries
//! what was spent before it plus what this hop spent, and so does every
//! event the hop reports about the session (its end among them), for
//! `watch` and the console. A delegated child starts from its parent's
//! spending, so its budget checks count the parent's.

use baton_proto::{Envelope, Usage};

use super::Output;

/// Adds `hop`, what the hop that ran `envelope` spent, to the outputs of
/// its plan.
pub(crate) fn stamp(outputs: &mut [Output], envelope: &Envelope, hop: Usage) {
    let Some(spent) = after(envelope, hop) else {
        return; // Nothing spent, nothing to say.
    };
    for output in outputs {
        match output {
            Output::Envelope { envelope: next, .. } if next.session == envelope.session => {
                next.usage = Some(spent);
            }
            Output::Event(event) if event.session == envelope.session => {
                event.usage = Some(spent);
            }
            _ => {}
        }
    }
}

/// What the session had spent once `hop`, what the hop that ran
/// `envelope` spent, is added: `None` while nothing was spent.
pub(crate) fn after(envelope: &Envelope, hop: Usage) -> Option<Usage> {
    let spent = envelope.usage.unwrap_or_default().plus(hop);
    (envelope.usage.is_some() || spent != Usage::default()).then_some(spent)
}

#[cfg(test)]
mod tests {
    use baton_proto::{AgentName, Event, EventType};
    use uuid::Uuid;

    use super::*;

    fn used(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            estimated: false,
            cost_micros: 0,
        }
    }

    #[test]
    fn what_a_hop_spent_is_added_to_the_next_envelope_and_the_events() {
        let mut incoming = Envelope::task("q");
        incoming.usage = Some(used(100, 20));
        let next = incoming.clone().resent(
            Uuid::new_v4(),
            baton_proto::Kind::Handoff,
            baton_proto::AgentName::from_static("b"),
        );
        let mut other = Envelope::task("another session");
        other.usage = None;
        let end = Event::new(Uuid::new_v4(), incoming.session, EventType::Completed);
        let handoff = Event::new(Uuid::new_v4(), incoming.session, EventType::Handoff);
        let to = AgentName::new("b").unwrap();
        let mut outputs = vec![
            Output::Envelope {
                to: to.clone(),
                envelope: Box::new(next),
            },
            Output::Envelope {
                to,
                envelope: Box::new(other),
            },
            Output::Event(Box::new(end)),
            Output::Event(Box::new(handoff)),
        ];
        stamp(&mut outputs, &incoming, used(50, 10));
        let usages: Vec<Option<u64>> = outputs
            .iter()
            .map(|output| match output {
                Output::Envelope { envelope, .. } => envelope.usage.map(|u| u.total()),
                Output::Event(event) => event.usage.map(|u| u.total()),
                Output::DeadLetter(_) => None,
            })
            .collect();
        assert_eq!(usages, [Some(180), None, Some(180), Some(180)]);
    }

    #[test]
    fn a_session_that_spent_nothing_gets_no_usage() {
        let incoming = Envelope::task("q");
        let end = Event::new(Uuid::new_v4(), incoming.session, EventType::Completed);
        let mut outputs = vec![Output::Event(Box::new(end))];
        stamp(&mut outputs, &incoming, Usage::default());
        assert!(matches!(&outputs[0], Output::Event(e) if e.usage.is_none()));
    }
}
