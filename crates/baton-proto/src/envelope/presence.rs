//! Encoding [`Message`] and [`Step`] as they came: a defaulted field the
//! sender left out is not written back. Without this, a trace of 100,000
//! `{agent}` entries grew five times on its way through the router, past
//! the server's `max_payload`.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{Map, Message, Role, Step, Value};

/// The defaulted fields a decoded value lacked, one bit each. Values built
/// in code lack none, so they write every field, as before.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Absent(u8);

impl Absent {
    pub(super) const NONE: Self = Self(0);
    const CONTENT: u8 = 1;
    const AT: u8 = 2;
    const ACTION: u8 = 4;
    const OUTCOME: u8 = 8;
    const REASONING: u8 = 16;
    const DETAILS: u8 = 32;

    fn mark(&mut self, bit: u8, missing: bool) {
        if missing {
            self.0 |= bit;
        }
    }

    /// Whether a field is written: unless it was absent and still holds
    /// its default.
    fn writes(self, bit: u8, is_default: bool) -> bool {
        !(is_default && self.0 & bit != 0)
    }
}

/// Presence is not part of a value's meaning.
impl PartialEq for Absent {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let content = self.absent.writes(Absent::CONTENT, self.content.is_empty());
        let at = self.absent.writes(Absent::AT, self.at == 0);
        let count = 1
            + usize::from(content)
            + usize::from(self.name.is_some())
            + usize::from(at)
            + usize::from(self.tool_calls.is_some())
            + usize::from(self.tool_call_id.is_some())
            + usize::from(self.coordination.is_some())
            + usize::from(self.compaction.is_some())
            + self.extra.len();
        let mut map = serializer.serialize_map(Some(count))?;
        map.serialize_entry("role", &self.role)?;
        if content {
            map.serialize_entry("content", &self.content)?;
        }
        if let Some(name) = &self.name {
            map.serialize_entry("name", name)?;
        }
        if at {
            map.serialize_entry("at", &self.at)?;
        }
        if let Some(calls) = &self.tool_calls {
            map.serialize_entry("tool_calls", calls)?;
        }
        if let Some(id) = &self.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        if let Some(kind) = &self.coordination {
            map.serialize_entry("coordination", kind)?;
        }
        if let Some(compaction) = &self.compaction {
            map.serialize_entry("compaction", compaction)?;
        }
        for (key, value) in &self.extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A message as it is on the wire, presence and all.
#[derive(serde::Deserialize)]
struct MessageWire {
    role: Role,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    at: Option<u64>,
    #[serde(default)]
    tool_calls: Option<Value>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    coordination: Option<String>,
    #[serde(default)]
    compaction: Option<crate::conversation_ref::Compaction>,
    #[serde(flatten)]
    extra: Map,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = MessageWire::deserialize(deserializer)?;
        let mut absent = Absent::NONE;
        absent.mark(Absent::CONTENT, wire.content.is_none());
        absent.mark(Absent::AT, wire.at.is_none());
        Ok(Self {
            role: wire.role,
            content: wire.content.unwrap_or_default(),
            name: wire.name,
            at: wire.at.unwrap_or_default(),
            tool_calls: wire.tool_calls,
            tool_call_id: wire.tool_call_id,
            coordination: wire.coordination,
            compaction: wire.compaction,
            extra: wire.extra,
            absent,
        })
    }
}

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let absent = self.absent;
        let action = absent.writes(Absent::ACTION, self.action.is_empty());
        let outcome = absent.writes(Absent::OUTCOME, self.outcome.is_empty());
        let reasoning = absent.writes(Absent::REASONING, self.reasoning.is_empty());
        let details = absent.writes(Absent::DETAILS, self.details.is_nil());
        let at = absent.writes(Absent::AT, self.at == 0);
        let count = 1
            + [action, outcome, reasoning, details, at]
                .into_iter()
                .filter(|&written| written)
                .count()
            + self.extra.len();
        let mut map = serializer.serialize_map(Some(count))?;
        map.serialize_entry("agent", self.agent.as_deref().unwrap_or_default())?;
        if action {
            map.serialize_entry("action", &self.action)?;
        }
        if outcome {
            map.serialize_entry("outcome", &self.outcome)?;
        }
        if reasoning {
            map.serialize_entry("reasoning", &self.reasoning)?;
        }
        if details {
            map.serialize_entry("details", &self.details)?;
        }
        if at {
            map.serialize_entry("at", &self.at)?;
        }
        for (key, value) in &self.extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A trace step as it is on the wire, presence and all. A `details` of nil
/// reads as absent: the two mean the same.
#[derive(serde::Deserialize)]
struct StepWire {
    agent: String,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    details: Option<Value>,
    #[serde(default)]
    at: Option<u64>,
    #[serde(flatten)]
    extra: Map,
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = StepWire::deserialize(deserializer)?;
        let mut absent = Absent::NONE;
        absent.mark(Absent::ACTION, wire.action.is_none());
        absent.mark(Absent::OUTCOME, wire.outcome.is_none());
        absent.mark(Absent::REASONING, wire.reasoning.is_none());
        absent.mark(Absent::DETAILS, wire.details.is_none());
        absent.mark(Absent::AT, wire.at.is_none());
        let agent = match wire.agent.as_str() {
            "" => None,
            // Taken as written, as every name read from the wire is.
            name => Some(crate::AgentName::unchecked(name)),
        };
        Ok(Self {
            agent,
            action: wire.action.unwrap_or_default(),
            outcome: wire.outcome.unwrap_or_default(),
            reasoning: wire.reasoning.unwrap_or_default(),
            details: wire.details.unwrap_or(Value::Nil),
            at: wire.at.unwrap_or_default(),
            extra: wire.extra,
            absent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Envelope, Wire};

    fn encoded(value: &impl Serialize) -> Vec<u8> {
        rmp_serde::to_vec_named(value).expect("encodes")
    }

    #[test]
    fn a_decoded_step_or_message_encodes_no_field_it_lacked() {
        let sparse = rmpv::Value::Map(vec![("agent".into(), "a".into())]);
        let bytes = rmp_serde::to_vec(&sparse).expect("encodes");
        let step: Step = rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(step.reasoning, "");
        assert_eq!(encoded(&step), bytes, "written back as it came");
        let sparse = rmpv::Value::Map(vec![("role".into(), "user".into())]);
        let bytes = rmp_serde::to_vec(&sparse).expect("encodes");
        let message: Message = rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(encoded(&message), bytes);
    }

    #[test]
    fn a_step_built_in_code_writes_every_field_as_before() {
        let step = Step::new(crate::AgentName::from_static("triage"), "lookup", "found");
        let back: rmpv::Value = rmp_serde::from_slice(&encoded(&step)).expect("decodes");
        let keys: Vec<&str> = back
            .as_map()
            .expect("a map")
            .iter()
            .filter_map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            ["agent", "action", "outcome", "reasoning", "details", "at"]
        );
        let message = Message::new(Role::Agent, "");
        let back: rmpv::Value = rmp_serde::from_slice(&encoded(&message)).expect("decodes");
        assert_eq!(
            back.as_map().expect("a map").len(),
            3,
            "role, content and at"
        );
    }

    #[test]
    fn a_value_set_after_decoding_is_written() {
        let bytes = rmp_serde::to_vec(&rmpv::Value::Map(vec![("agent".into(), "a".into())]))
            .expect("encodes");
        let mut step: Step = rmp_serde::from_slice(&bytes).expect("decodes");
        step.reasoning = "because".to_owned();
        let back: Step = rmp_serde::from_slice(&encoded(&step)).expect("decodes");
        assert_eq!(back.reasoning, "because");
    }

    #[test]
    fn a_trace_of_many_sparse_steps_does_not_grow_when_re_encoded() {
        let mut envelope = Envelope::task("grow?");
        let sparse: Step = rmp_serde::from_slice(
            &rmp_serde::to_vec(&rmpv::Value::Map(vec![("agent".into(), "a".into())]))
                .expect("encodes"),
        )
        .expect("decodes");
        envelope.context.trace = vec![sparse; 10_000];
        let first = envelope.to_msgpack().expect("encodes");
        let again = Envelope::from_msgpack(&first)
            .expect("decodes")
            .to_msgpack()
            .expect("encodes");
        assert_eq!(again.len(), first.len());
    }
}
