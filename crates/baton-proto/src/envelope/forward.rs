//! Forwarding an envelope without decoding its body.
//!
//! A process that only routes an envelope (the router, on its way from the
//! ingress to an agent type) needs a dozen small fields, not the
//! conversation, the variables, the trace or the path. [`Head::read`]
//! decodes those fields only, with the same checks as a full decode (size,
//! nesting, version, the required fields); [`Rewrite`] then writes the
//! envelope on with the fields the router changes replaced, and every other
//! field copied through as the bytes it arrived as. The wire is unchanged:
//! the result decodes to what a full decode, the same changes and an encode
//! would give.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Envelope, Kind, Parent, Reason};
use crate::codec::{check_version, precheck};
use crate::wire::error::{Error, ErrorKind};
use crate::{Budget, PROTOCOL_VERSION, TurnOf, now_ms, uuid_text};

/// The fields of an envelope that routing reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Head {
    v: u64,
    /// As [`Envelope::id`].
    #[serde(with = "uuid_text")]
    pub id: Uuid,
    /// As [`Envelope::session`].
    #[serde(with = "uuid_text")]
    pub session: Uuid,
    /// As [`Envelope::kind`].
    pub kind: Kind,
    /// As [`Envelope::to`].
    #[serde(default)]
    pub to: Option<crate::AgentName>,
    /// As [`Envelope::requires`].
    #[serde(default)]
    pub requires: Vec<String>,
    /// As [`Envelope::domains`].
    #[serde(default)]
    pub domains: Vec<String>,
    /// As [`Envelope::reason`].
    #[serde(default)]
    pub reason: Option<Reason>,
    /// As [`Envelope::deadline`].
    #[serde(default)]
    pub deadline: Option<u64>,
    /// As [`Envelope::parent`].
    #[serde(default)]
    pub parent: Option<Parent>,
    /// As [`Envelope::budget`].
    #[serde(default)]
    pub budget: Option<Budget>,
    /// As [`Envelope::conversation`].
    #[serde(default)]
    pub conversation: Option<TurnOf>,
    /// As [`Envelope::versions`].
    #[serde(default)]
    pub versions: std::collections::BTreeMap<crate::AgentName, crate::Version>,
    /// Whether the envelope carries a resumed journal.
    #[serde(default, deserialize_with = "present")]
    pub resumed: bool,
    /// The context's `initial_query` (the registry matches on it); the rest
    /// of the context is only checked to be there.
    context: ContextHead,
    // Required in an envelope: checked, not read.
    #[allow(dead_code)]
    path: serde::de::IgnoredAny,
    #[allow(dead_code)]
    created_at: serde::de::IgnoredAny,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct ContextHead {
    #[serde(default)]
    initial_query: String,
}

/// Whether an optional field is there and not nil, read without keeping it.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Option::<serde::de::IgnoredAny>::deserialize(deserializer).map(|value| value.is_some())
}

impl Head {
    /// The routing fields of the envelope in `bytes`, no larger than
    /// `limit`.
    ///
    /// # Errors
    ///
    /// As [`crate::Wire::from_msgpack_limited`] for an envelope, for what
    /// it reads: a body that is not what an envelope holds is left for the
    /// process that decodes it.
    pub fn read(bytes: &[u8], limit: usize) -> Result<Self, Error> {
        precheck(bytes, limit)?;
        match rmp_serde::from_slice::<Self>(bytes) {
            Ok(head) => {
                check_version(Some(rmpv::Value::from(head.v)), crate::PROTOCOL_VERSION)?;
                Ok(head)
            }
            Err(err) => {
                check_version(crate::codec::probe_version(bytes), crate::PROTOCOL_VERSION)?;
                Err(Error::new(ErrorKind::Malformed, err.to_string()))
            }
        }
    }

    /// As [`Envelope::opens_session`].
    #[must_use]
    pub fn opens_session(&self) -> bool {
        self.kind == Kind::Task
            && self.parent.is_none()
            && !self.resumed
            && self.conversation.is_none()
    }

    /// What the context's `initial_query` says.
    #[must_use]
    pub fn initial_query(&self) -> &str {
        &self.context.initial_query
    }

    /// An envelope with these fields and an empty body, for code that reads
    /// only them off an [`Envelope`] (events, dead letters, timers about
    /// this one). Never to be sent: its body is not the real one.
    #[must_use]
    pub fn skeleton(&self) -> Envelope {
        let mut envelope = Envelope::task(self.context.initial_query.clone());
        envelope.id = self.id;
        envelope.session = self.session;
        envelope.kind = self.kind.clone();
        envelope.to.clone_from(&self.to);
        envelope.requires.clone_from(&self.requires);
        envelope.domains.clone_from(&self.domains);
        envelope.reason.clone_from(&self.reason);
        envelope.deadline = self.deadline;
        envelope.parent.clone_from(&self.parent);
        envelope.budget = self.budget;
        envelope.conversation.clone_from(&self.conversation);
        envelope.versions.clone_from(&self.versions);
        envelope
    }
}

/// The fields an envelope is written on with, each set to its new encoded
/// value or removed; every other field is copied through.
#[derive(Debug, Clone, Default)]
pub struct Rewrite {
    changes: Vec<(&'static str, Option<Vec<u8>>)>,
}

/// A uuid as the envelope encodes it.
#[derive(Serialize)]
struct IdText<'a>(#[serde(with = "uuid_text")] &'a Uuid);

impl Rewrite {
    /// What [`Envelope::resent`] changes: the version, a new `id`, the
    /// `kind`, the target `to` and the creation time; the hop's gate and
    /// resumed journal go.
    ///
    /// # Errors
    ///
    /// Only if a value cannot be encoded.
    pub fn resent(id: Uuid, kind: &Kind, to: &str) -> Result<Self, Error> {
        Ok(Self::default()
            .set("v", &PROTOCOL_VERSION)?
            .set("id", &IdText(&id))?
            .set("kind", kind)?
            .set("to", to)?
            .set("created_at", &now_ms())?
            .remove("gate")
            .remove("resumed"))
    }

    /// Sets field `key` to `value`, encoded as the envelope encodes it.
    ///
    /// # Errors
    ///
    /// Only if `value` cannot be encoded.
    pub fn set<T: Serialize + ?Sized>(
        mut self,
        key: &'static str,
        value: &T,
    ) -> Result<Self, Error> {
        let encoded = rmp_serde::to_vec_named(value)?;
        self.changes.retain(|(k, _)| *k != key);
        self.changes.push((key, Some(encoded)));
        Ok(self)
    }

    /// Removes field `key`, if it is there.
    #[must_use]
    pub fn remove(mut self, key: &'static str) -> Self {
        self.changes.retain(|(k, _)| *k != key);
        self.changes.push((key, None));
        self
    }

    /// The envelope in `bytes` (a map, as [`Head::read`] accepted it)
    /// with the changes made: its other fields as they were, byte for byte
    /// and in their order, then the fields set here.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Malformed`] when `bytes` is not a map with text
    /// keys.
    pub fn apply(&self, bytes: &[u8]) -> Result<Vec<u8>, Error> {
        let malformed = |what: &str| Error::new(ErrorKind::Malformed, what.to_owned());
        let mut reader = bytes;
        let fields = rmp::decode::read_map_len(&mut reader)
            .map_err(|_| malformed("an envelope is a map"))?;
        let mut at = bytes.len() - reader.len();
        // The count is the sender's word: it sizes nothing before it is read.
        let mut kept: Vec<&[u8]> = Vec::with_capacity((fields as usize).min(64));
        for _ in 0..fields {
            let key = key_at(bytes, at).ok_or_else(|| malformed("an envelope's keys are text"))?;
            let end = crate::nesting::value_end(bytes, key.value_at)
                .ok_or_else(|| malformed("an envelope field ends early"))?;
            // A changed or removed field is written below, or not at all.
            if !self.changes.iter().any(|(k, _)| *k == key.name) {
                kept.push(&bytes[at..end]);
            }
            at = end;
        }
        let added = self.changes.iter().filter(|(_, value)| value.is_some());
        let count = kept.len() + added.count();
        let mut out = Vec::with_capacity(bytes.len() + 64);
        let count = u32::try_from(count).map_err(|_| malformed("too many fields"))?;
        rmp::encode::write_map_len(&mut out, count).map_err(|_| malformed("cannot write"))?;
        for field in kept {
            out.extend_from_slice(field);
        }
        for (key, value) in &self.changes {
            if let Some(value) = value {
                rmp::encode::write_str(&mut out, key).map_err(|_| malformed("cannot write"))?;
                out.extend_from_slice(value);
            }
        }
        Ok(out)
    }
}

/// A map key read at `at`: its text, and where its value starts.
pub(super) struct Key<'b> {
    pub(super) name: &'b str,
    pub(super) value_at: usize,
}

pub(super) fn key_at(bytes: &[u8], at: usize) -> Option<Key<'_>> {
    let mut reader = bytes.get(at..)?;
    let len = rmp::decode::read_str_len(&mut reader).ok()? as usize;
    let start = bytes.len() - reader.len();
    let name = std::str::from_utf8(bytes.get(start..start.checked_add(len)?)?).ok()?;
    Some(Key {
        name,
        value_at: start + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Value, Wire};

    fn rich() -> Envelope {
        let mut envelope = Envelope::task("refund order 42")
            .with_variable("order", 42)
            .with_variable("note", "<b>as is</b>");
        envelope.requires = vec!["refunds".to_owned()];
        envelope.deadline = Some(now_ms() + 60_000);
        envelope.budget = Some(Budget {
            tokens: Some(1000),
            cost_micros: None,
        });
        envelope
            .extra
            .insert("x_future".to_owned(), Value::from("kept"));
        envelope
    }

    #[test]
    fn the_head_reads_what_routing_needs() {
        let envelope = rich();
        let bytes = envelope.to_msgpack().unwrap();
        let head = Head::read(&bytes, bytes.len()).unwrap();
        assert_eq!((head.id, head.session), (envelope.id, envelope.session));
        assert_eq!(head.requires, envelope.requires);
        assert_eq!(
            (head.deadline, head.budget),
            (envelope.deadline, envelope.budget)
        );
        assert_eq!(head.initial_query(), "refund order 42");
        assert!(!head.resumed);
        let skeleton = head.skeleton();
        assert_eq!(
            (skeleton.id, skeleton.deadline),
            (envelope.id, envelope.deadline)
        );
    }

    #[test]
    fn the_head_and_the_envelope_agree_on_what_opens_a_session() {
        let mut child = Envelope::task("child");
        child.parent = Some(Parent {
            id: Uuid::new_v4(),
            agent: crate::AgentName::from_static("lead"),
            depth: 1,
            index: None,
            assignment: None,
            extra: crate::Map::new(),
        });
        let mut turn = Envelope::task("turn");
        turn.conversation = Some(TurnOf {
            id: "c".to_owned(),
            turn: 2,
            hand_back: false,
            extra: crate::Map::new(),
        });
        for (envelope, opens) in [
            (Envelope::task("first"), true),
            (child, false),
            (turn, false),
        ] {
            assert_eq!(envelope.opens_session(), opens, "{envelope:?}");
            let bytes = envelope.to_msgpack().unwrap();
            assert_eq!(
                Head::read(&bytes, bytes.len()).unwrap().opens_session(),
                opens
            );
        }
    }

    #[test]
    fn the_head_refuses_what_a_full_decode_refuses() {
        let bytes = Envelope::task("x").to_msgpack().unwrap();
        let too_large = Head::read(&bytes, 10).unwrap_err();
        assert_eq!(too_large.kind(), ErrorKind::TooLarge);
        let mut v2 = Envelope::task("x");
        v2.v = 2;
        let newer = Head::read(&v2.to_msgpack().unwrap(), usize::MAX).unwrap_err();
        assert_eq!(newer.kind(), ErrorKind::UnsupportedVersion);
        let no_context = rmp_serde::to_vec_named(&std::collections::BTreeMap::from([
            ("v", rmpv::Value::from(1)),
            ("id", rmpv::Value::from(Uuid::new_v4().to_string())),
        ]))
        .unwrap();
        let missing = Head::read(&no_context, usize::MAX).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::Malformed);
        assert!(Head::read(b"\xc1", usize::MAX).is_err());
    }

    #[test]
    fn a_rewrite_decodes_to_what_the_full_path_gives() {
        let envelope = rich();
        let bytes = envelope.to_msgpack().unwrap();
        let id = Uuid::new_v4();
        let rewrite = Rewrite::resent(id, &envelope.kind, "refunds")
            .unwrap()
            .set("reason", &Reason::NoMatch)
            .unwrap();
        let forwarded = Envelope::from_msgpack(&rewrite.apply(&bytes).unwrap()).unwrap();
        let mut expected = envelope.clone().resent(
            id,
            envelope.kind.clone(),
            crate::AgentName::from_static("refunds"),
        );
        expected.reason = Some(Reason::NoMatch);
        expected.created_at = forwarded.created_at;
        assert_eq!(forwarded, expected);
    }

    #[test]
    fn untouched_fields_are_copied_byte_for_byte() {
        // An integer a re-encode would shorten (7 as a uint64) and a field
        // this version does not know, in a map of the writer's order.
        let envelope = Envelope::task("as sent");
        let mut bytes = Vec::new();
        let value = rmpv::ext::to_value(&envelope).unwrap();
        let mut fields: Vec<(rmpv::Value, rmpv::Value)> = value.as_map().unwrap().clone();
        fields.reverse();
        fields.push(("x_wide".into(), rmpv::Value::Nil));
        rmp::encode::write_map_len(&mut bytes, fields.len() as u32).unwrap();
        let mut wide = Vec::new();
        for (key, value) in &fields {
            rmpv::encode::write_value(&mut bytes, key).unwrap();
            if key.as_str() == Some("x_wide") {
                let at = bytes.len();
                rmp::encode::write_u64(&mut bytes, 7).unwrap();
                wide = bytes[at..].to_vec();
            } else {
                rmpv::encode::write_value(&mut bytes, value).unwrap();
            }
        }
        let out = Rewrite::resent(Uuid::new_v4(), &Kind::Task, "a")
            .unwrap()
            .apply(&bytes)
            .unwrap();
        let mut key = Vec::new();
        rmp::encode::write_str(&mut key, "x_wide").unwrap();
        key.extend(&wide);
        assert!(
            out.windows(key.len()).any(|w| w == key.as_slice()),
            "the wide integer kept its nine bytes"
        );
        assert!(Envelope::from_msgpack(&out).is_ok());
    }
}
