//! Writing an envelope on without re-encoding what it arrived with.
//!
//! A hop hands its envelope on with one more path entry, a few messages and
//! trace steps, and a few variables and state entries set: the bulk (the
//! conversation so far, the path, the variables it did not touch) is what
//! it received. [`splice`] copies that bulk from the received bytes and
//! encodes only the rest: the new parts, and the small fields around them.
//! The result decodes to the envelope a full encode gives (not always byte
//! for byte: map entries a hop set come after those it kept).
//!
//! The worker does not use it yet: to find the parts it keeps, a splice
//! walks the received bytes, which costs about what encoding those parts
//! does (MessagePack encodes text and maps with little more than a copy),
//! and a splice measured 0.8 to 2.7 µs slower than a full encode for
//! envelopes of 1 KB to 96 KB (docs/benchmarks.md). It pays once the
//! decode that reads the envelope records where those parts lie, so that
//! the bytes are walked once.

use std::collections::BTreeSet;

use serde::Serialize;

use super::Envelope;
use crate::Map;
use crate::codec::{DecodeError, DecodeErrorKind};
use crate::nesting::value_end;

/// What a hop appended to the envelope it received: how many hops,
/// messages and trace steps the envelope arrived with, and which context
/// variables and state entries the hop set (every other entry is as it
/// arrived).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Hops on the path as received.
    pub path: usize,
    /// Messages of the context as received.
    pub messages: usize,
    /// Trace steps of the context as received.
    pub trace: usize,
    /// Context variables the hop set.
    pub variables: BTreeSet<String>,
    /// Context state entries the hop set.
    pub state: BTreeSet<String>,
}

/// `next`, the envelope a hop sends on, encoded onto `received`, the bytes
/// of the envelope it came as: `next`'s path, messages and trace are those
/// of `received` followed by what the hop appended, and its variables and
/// state those of `received` with the entries named in `appended` set.
/// Every other field is encoded from `next`. `next` is as it was when this
/// returns.
///
/// # Errors
///
/// [`DecodeErrorKind::Malformed`] when `received` is not laid out as
/// `appended` says (a field missing, another count); the caller encodes
/// `next` whole instead.
pub fn splice(
    received: &[u8],
    next: &mut Envelope,
    appended: &Appended,
) -> Result<Vec<u8>, DecodeError> {
    let parts = Received::read(received, appended)?;
    let fits = next.path.len() >= appended.path
        && next.context.messages.len() >= appended.messages
        && next.context.trace.len() >= appended.trace;
    if !fits {
        return Err(malformed("the envelope lost parts it arrived with"));
    }
    // The bulk out, the small fields encoded, the bulk back in.
    let path = std::mem::take(&mut next.path);
    let messages = std::mem::take(&mut next.context.messages);
    let trace = std::mem::take(&mut next.context.trace);
    let variables = std::mem::take(&mut next.context.variables);
    let state = std::mem::take(&mut next.context.state);
    let rest = rmp_serde::to_vec_named(&*next);
    let bulk = Bulk {
        path: &path[appended.path..],
        messages: &messages[appended.messages..],
        trace: &trace[appended.trace..],
        variables: &variables,
        state: &state,
    };
    let out = match rest {
        Ok(rest) => write(&rest, received, &parts, &bulk, appended),
        Err(err) => Err(malformed(&err.to_string())),
    };
    next.path = path;
    next.context.messages = messages;
    next.context.trace = trace;
    next.context.variables = variables;
    next.context.state = state;
    out
}

fn malformed(what: &str) -> DecodeError {
    DecodeError::new(DecodeErrorKind::Malformed, format!("cannot splice: {what}"))
}

/// Where the parts a hop keeps are in the received bytes.
struct Received<'b> {
    /// The path's hops, encoded one after another.
    path: &'b [u8],
    messages: &'b [u8],
    trace: &'b [u8],
    /// The entries (key and value) of the variables and state, by key.
    variables: Vec<(&'b str, &'b [u8])>,
    state: Vec<(&'b str, &'b [u8])>,
}

impl<'b> Received<'b> {
    fn read(bytes: &'b [u8], appended: &Appended) -> Result<Self, DecodeError> {
        let top = entries(bytes, 0)?;
        let field = |entries: &[Entry<'b>], name: &str| {
            (entries.iter().find(|e| e.key == name))
                .map(|e| (e.value, e.end))
                .ok_or_else(|| malformed(&format!("no `{name}`")))
        };
        let (path_at, path_end) = field(&top, "path")?;
        let (context_at, _) = field(&top, "context")?;
        let context = entries(bytes, context_at)?;
        let array = |(at, end): (usize, usize), count: usize, name: &str| {
            let mut reader = bytes.get(at..end).unwrap_or_default();
            let len = rmp::decode::read_array_len(&mut reader)
                .map_err(|_| malformed(&format!("`{name}` is not an array")))?;
            if len as usize != count {
                return Err(malformed(&format!("`{name}` has {len}, not {count}")));
            }
            Ok(reader)
        };
        let map = |(at, _): (usize, usize)| -> Result<Vec<(&'b str, &'b [u8])>, DecodeError> {
            let kept = entries(bytes, at)?;
            Ok(kept
                .iter()
                .map(|e| (e.key, &bytes[e.start..e.end]))
                .collect())
        };
        Ok(Self {
            path: array((path_at, path_end), appended.path, "path")?,
            messages: array(field(&context, "messages")?, appended.messages, "messages")?,
            trace: array(field(&context, "trace")?, appended.trace, "trace")?,
            variables: map(field(&context, "variables")?)?,
            state: map(field(&context, "state")?)?,
        })
    }
}

/// What the hop appended and set, from the envelope it sends on.
struct Bulk<'n, H, M, S> {
    path: &'n [H],
    messages: &'n [M],
    trace: &'n [S],
    variables: &'n Map,
    state: &'n Map,
}

/// One entry of a map: its key, where it starts, where its value starts,
/// where it ends.
struct Entry<'b> {
    key: &'b str,
    start: usize,
    value: usize,
    end: usize,
}

/// The entries of the map at `at` in `bytes`.
fn entries(bytes: &[u8], at: usize) -> Result<Vec<Entry<'_>>, DecodeError> {
    let mut reader = bytes.get(at..).unwrap_or_default();
    let count = rmp::decode::read_map_len(&mut reader).map_err(|_| malformed("not a map"))?;
    let mut at = bytes.len() - reader.len();
    let mut entries = Vec::with_capacity((count as usize).min(64));
    for _ in 0..count {
        let key =
            super::forward::key_at(bytes, at).ok_or_else(|| malformed("a key is not text"))?;
        let end = value_end(bytes, key.value_at).ok_or_else(|| malformed("a value ends early"))?;
        entries.push(Entry {
            key: key.name,
            start: at,
            value: key.value_at,
            end,
        });
        at = end;
    }
    Ok(entries)
}

/// The spliced envelope: `rest` (every field but the bulk, encoded from
/// the envelope sent on) with the bulk put back, received and appended.
fn write<H: Serialize, M: Serialize, S: Serialize>(
    rest: &[u8],
    received: &[u8],
    parts: &Received<'_>,
    bulk: &Bulk<'_, H, M, S>,
    appended: &Appended,
) -> Result<Vec<u8>, DecodeError> {
    let cannot = |_| malformed("cannot write");
    let mut out = Vec::with_capacity(received.len() + rest.len());
    let top = entries(rest, 0)?;
    rmp::encode::write_map_len(&mut out, len(top.len())?).map_err(cannot)?;
    for entry in &top {
        out.extend_from_slice(&rest[entry.start..entry.value]);
        match entry.key {
            "path" => append(&mut out, parts.path, appended.path, bulk.path)?,
            "context" => {
                let context = entries(rest, entry.value)?;
                rmp::encode::write_map_len(&mut out, len(context.len())?).map_err(cannot)?;
                for field in &context {
                    out.extend_from_slice(&rest[field.start..field.value]);
                    match field.key {
                        "messages" => {
                            append(&mut out, parts.messages, appended.messages, bulk.messages)?;
                        }
                        "trace" => append(&mut out, parts.trace, appended.trace, bulk.trace)?,
                        "variables" => {
                            merge(
                                &mut out,
                                &parts.variables,
                                bulk.variables,
                                &appended.variables,
                            )?;
                        }
                        "state" => merge(&mut out, &parts.state, bulk.state, &appended.state)?,
                        _ => out.extend_from_slice(&rest[field.value..field.end]),
                    }
                }
            }
            _ => out.extend_from_slice(&rest[entry.value..entry.end]),
        }
    }
    Ok(out)
}

fn len(count: usize) -> Result<u32, DecodeError> {
    u32::try_from(count).map_err(|_| malformed("too many entries"))
}

/// An array: the `kept` elements as received, then `added`, encoded.
fn append<T: Serialize>(
    out: &mut Vec<u8>,
    kept: &[u8],
    count: usize,
    added: &[T],
) -> Result<(), DecodeError> {
    let total = len(count + added.len())?;
    rmp::encode::write_array_len(out, total).map_err(|_| malformed("cannot write"))?;
    out.extend_from_slice(kept);
    for item in added {
        rmp_serde::encode::write_named(out, item).map_err(|err| malformed(&err.to_string()))?;
    }
    Ok(())
}

/// A map: the received entries whose keys the hop did not set, then those
/// it set, from `next`.
fn merge(
    out: &mut Vec<u8>,
    received: &[(&str, &[u8])],
    next: &Map,
    set: &BTreeSet<String>,
) -> Result<(), DecodeError> {
    let kept: Vec<&[u8]> = (received.iter())
        .filter(|(key, _)| !set.contains(*key))
        .map(|(_, entry)| *entry)
        .collect();
    let changed: Vec<(&String, &crate::Value)> = set
        .iter()
        .filter_map(|key| next.get_key_value(key))
        .collect();
    let total = len(kept.len() + changed.len())?;
    rmp::encode::write_map_len(out, total).map_err(|_| malformed("cannot write"))?;
    for entry in kept {
        out.extend_from_slice(entry);
    }
    for (key, value) in changed {
        rmp::encode::write_str(out, key).map_err(|_| malformed("cannot write"))?;
        rmp_serde::encode::write_named(out, value).map_err(|err| malformed(&err.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Hop, Kind, Message, Reason, Role, Step, Value, Wire};

    fn value(rng: &mut fastrand::Rng, depth: u32) -> Value {
        match rng.u8(0..8) {
            0 => Value::Nil,
            1 => Value::from(rng.bool()),
            2 => Value::from(rng.u64(..)),
            3 => Value::from(-rng.i64(1..1_000_000)),
            4 => Value::from("x".repeat(rng.usize(0..300))),
            5 => Value::Binary(vec![7; rng.usize(0..40)]),
            6 if depth < 3 => Value::Array(
                (0..rng.usize(0..4))
                    .map(|_| value(rng, depth + 1))
                    .collect(),
            ),
            _ if depth < 3 => Value::Map(
                (0..rng.usize(0..4))
                    .map(|n| (Value::from(format!("k{n}")), value(rng, depth + 1)))
                    .collect(),
            ),
            _ => Value::from(rng.f64()),
        }
    }

    fn map(rng: &mut fastrand::Rng, most: usize) -> Map {
        let keys = rng.usize(0..most);
        (0..keys)
            .map(|n| (format!("key{n}"), value(rng, 0)))
            .collect()
    }

    fn message(rng: &mut fastrand::Rng, n: usize) -> Message {
        let role = [Role::User, Role::Agent, Role::System, Role::Tool][rng.usize(0..4)].clone();
        let mut message = Message::new(
            role,
            format!("message {n} {}", "é".repeat(rng.usize(0..50))),
        );
        if rng.bool() {
            message.name = Some(format!("agent{n}"));
        }
        message
    }

    fn step(rng: &mut fastrand::Rng, n: usize) -> Step {
        let mut step = Step::new(format!("agent{n}"), "act", "done");
        step.details = value(rng, 1);
        step
    }

    /// A received envelope with varied parts, and unknown fields in it and
    /// its context.
    fn received(rng: &mut fastrand::Rng) -> Envelope {
        let mut envelope = Envelope::task(format!("query {}", rng.u32(..)));
        envelope.kind = [Kind::Task, Kind::Handoff][rng.usize(0..2)].clone();
        envelope.path = (0..rng.usize(0..5))
            .map(|n| {
                Hop::new(
                    format!("a{n}"),
                    "i",
                    rng.bool().then_some(Reason::OutOfScope),
                )
            })
            .collect();
        envelope.context.messages = (0..rng.usize(0..6)).map(|n| message(rng, n)).collect();
        envelope.context.trace = (0..rng.usize(0..4)).map(|n| step(rng, n)).collect();
        envelope.context.variables = map(rng, 5);
        envelope.context.state = map(rng, 5);
        envelope.context.metadata = map(rng, 2);
        if rng.bool() {
            envelope.deadline = Some(crate::now_ms() + 60_000);
            envelope.requires = vec!["refunds".to_owned()];
        }
        if rng.bool() {
            envelope.extra.insert("x_future".to_owned(), value(rng, 0));
            (envelope.context.extra).insert("x_ctx".to_owned(), value(rng, 0));
        }
        envelope
    }

    /// What a hop does to `received` (as the worker's planner does), and
    /// what it appended.
    fn hop(rng: &mut fastrand::Rng, received: &Envelope) -> (Envelope, Appended) {
        let appended = Appended {
            path: received.path.len(),
            messages: received.context.messages.len(),
            trace: received.context.trace.len(),
            variables: BTreeSet::new(),
            state: BTreeSet::new(),
        };
        let mut appended = appended;
        let mut next = received
            .clone()
            .resent(uuid::Uuid::new_v4(), Kind::Handoff, "next");
        next.reason = Some(Reason::OutOfScope);
        next.from = Some("me".to_owned());
        next.suggested_next_action = rng.bool().then(|| "look it up".to_owned());
        next.path
            .push(Hop::new("me", "i1", received.reason.clone()));
        let extra = rng.usize(0..3);
        next.context
            .messages
            .extend((0..extra).map(|n| message(rng, 100 + n)));
        let extra = rng.usize(0..3);
        next.context
            .trace
            .extend((0..extra).map(|n| step(rng, 100 + n)));
        // Some keys it sets are new, some overwrite what it received.
        for _ in 0..rng.usize(0..4) {
            let key = format!("key{}", rng.usize(0..8));
            next.context.variables.insert(key.clone(), value(rng, 0));
            appended.variables.insert(key);
        }
        for _ in 0..rng.usize(0..3) {
            let key = format!("key{}", rng.usize(0..8));
            next.context.state.insert(key.clone(), value(rng, 0));
            appended.state.insert(key);
        }
        if rng.bool() {
            next.context.problem = "a new problem".to_owned();
        }
        (next, appended)
    }

    #[test]
    fn a_spliced_envelope_decodes_to_the_rebuilt_one() {
        let mut rng = fastrand::Rng::with_seed(60);
        for round in 0..500 {
            let received = received(&mut rng);
            let bytes = received.to_msgpack().unwrap();
            let (mut next, appended) = hop(&mut rng, &received);
            let before = next.clone();
            let spliced = splice(&bytes, &mut next, &appended).unwrap();
            assert_eq!(
                next, before,
                "round {round}: the envelope is given back whole"
            );
            let decoded = Envelope::from_msgpack(&spliced).unwrap();
            assert_eq!(decoded, next, "round {round}");
            let rebuilt = Envelope::from_msgpack(&next.to_msgpack().unwrap()).unwrap();
            assert_eq!(decoded, rebuilt, "round {round}");
        }
    }

    #[test]
    fn a_splice_copies_the_received_bulk_as_it_came() {
        // Written by another client: the fields in reverse order, and an
        // integer a re-encode would shorten (a message's `at` as a uint64).
        let received = Envelope::task("as sent").with_variable("kept", 1);
        let value = rmpv::ext::to_value(&received).unwrap();
        let mut fields = value.as_map().unwrap().clone();
        fields.reverse();
        let mut bytes = Vec::new();
        rmp::encode::write_map_len(&mut bytes, fields.len() as u32).unwrap();
        let mut wide = Vec::new();
        for (key, value) in &fields {
            rmpv::encode::write_value(&mut bytes, key).unwrap();
            if key.as_str() == Some("context") {
                let context = value.as_map().unwrap();
                rmp::encode::write_map_len(&mut bytes, context.len() as u32).unwrap();
                for (key, value) in context {
                    rmpv::encode::write_value(&mut bytes, key).unwrap();
                    if key.as_str() == Some("messages") {
                        let at = bytes.len();
                        rmp::encode::write_array_len(&mut bytes, 1).unwrap();
                        rmp::encode::write_map_len(&mut bytes, 3).unwrap();
                        for (k, v) in [("role", "user"), ("content", "hi")] {
                            rmp::encode::write_str(&mut bytes, k).unwrap();
                            rmp::encode::write_str(&mut bytes, v).unwrap();
                        }
                        rmp::encode::write_str(&mut bytes, "at").unwrap();
                        rmp::encode::write_u64(&mut bytes, 7).unwrap();
                        wide = bytes[at + 1..].to_vec();
                    } else {
                        rmpv::encode::write_value(&mut bytes, value).unwrap();
                    }
                }
            } else {
                rmpv::encode::write_value(&mut bytes, value).unwrap();
            }
        }
        let decoded = Envelope::from_msgpack(&bytes).unwrap();
        let mut next = decoded
            .clone()
            .resent(uuid::Uuid::new_v4(), Kind::Handoff, "b");
        next.path.push(Hop::new("a", "i", None));
        next.context
            .messages
            .push(Message::new(Role::Agent, "hello"));
        let appended = Appended {
            messages: 1,
            ..Appended::default()
        };
        let spliced = splice(&bytes, &mut next, &appended).unwrap();
        assert!(
            spliced.windows(wide.len()).any(|w| w == wide.as_slice()),
            "the received message kept its bytes"
        );
        assert_eq!(Envelope::from_msgpack(&spliced).unwrap(), next);
    }

    #[test]
    fn a_splice_refuses_bytes_that_are_not_what_the_hop_received() {
        let received = Envelope::task("x");
        let bytes = received.to_msgpack().unwrap();
        let mut next = received.clone();
        let wrong = Appended {
            messages: 5,
            ..Appended::default()
        };
        let err = splice(&bytes, &mut next, &wrong).unwrap_err();
        assert_eq!(err.kind(), &DecodeErrorKind::Malformed);
        assert_eq!(next, received, "given back whole");
        assert!(splice(b"\xc1", &mut next, &Appended::default()).is_err());
    }
}
