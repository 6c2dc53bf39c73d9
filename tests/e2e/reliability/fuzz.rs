//! Thousands of mutated envelopes: each one ends in the dead-letter queue
//! with a reason or in a terminal event, no worker exits, and valid sessions
//! sent afterwards complete. Bad registry requests each get an error reply.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use baton_proto::{Envelope, Message, Parent, Role, Wire};
use rmpv::Value;
use uuid::Uuid;

use crate::util::{System, kinds};

/// A valid envelope with a bit of everything in it.
fn base(rng: &mut fastrand::Rng) -> Envelope {
    let mut task = Envelope::task(format!("fuzz {}", rng.u64(..)))
        .with_variable("order_id", "ABC-123")
        .with_variable("attempts", 2);
    task.context
        .messages
        .push(Message::new(Role::Agent, "checking").with_name("fuzz"));
    if rng.usize(..4) == 0 {
        task.kind = baton_proto::Kind::Delegate;
        task.parent = Some(Parent {
            id: Uuid::new_v4(),
            agent: baton_proto::AgentName::unchecked(
                ["fuzz", "nobody_here", "Not Valid"][rng.usize(..3)],
            ),
            depth: 1,
            index: Some(0),
            assignment: None,
            extra: baton_proto::Map::new(),
        });
    }
    task
}

/// Marks where [`DEEP`] goes: a value 10,000 arrays deep is built as bytes,
/// since building it as a `Value` would itself recurse that deep.
const DEEP_MARKER: &[u8] = b"deep nesting goes here";

/// `[[[…nil…]]]`, 10,000 levels.
fn deep() -> Vec<u8> {
    let mut bytes = vec![0x91; 10_000];
    bytes.push(0xc0);
    bytes
}

/// Replaces one top-level or context field of `envelope` with a value of
/// the wrong type, or a pathological one.
fn wrong_field(envelope: &Envelope, rng: &mut fastrand::Rng) -> Vec<u8> {
    let bytes = envelope.to_msgpack().unwrap();
    let mut value = rmpv::decode::read_value(&mut &bytes[..]).unwrap();
    let replacement = match rng.usize(..8) {
        0 => Value::from(42),
        1 => Value::from("not what you think"),
        2 => Value::Nil,
        3 => Value::Array(vec![Value::from(1), Value::from("two")]),
        4 => Value::Map(vec![(Value::from(1), Value::from(2))]),
        5 => Value::Binary(DEEP_MARKER.to_vec()),
        6 => Value::Array(vec![Value::from(0); 100_000]),
        _ => Value::Binary(vec![0xc1; 64]),
    };
    let Value::Map(fields) = &mut value else {
        unreachable!()
    };
    let count = fields.len();
    let target = rng.usize(..count + 4);
    if target < count {
        fields[target].1 = replacement;
    } else if let Some((_, Value::Map(context))) = fields
        .iter_mut()
        .find(|(key, _)| key.as_str() == Some("context"))
    {
        let index = target - count;
        if let Some(entry) = context.get_mut(index) {
            entry.1 = replacement;
        }
    }
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &value).unwrap();
    let mut marker = vec![0xc4, u8::try_from(DEEP_MARKER.len()).unwrap()];
    marker.extend_from_slice(DEEP_MARKER);
    if let Some(at) = out.windows(marker.len()).position(|w| w == marker) {
        out.splice(at..at + marker.len(), deep());
    }
    out
}

fn mutate(rng: &mut fastrand::Rng) -> Vec<u8> {
    let envelope = base(rng);
    let mut bytes = envelope.to_msgpack().unwrap();
    match rng.usize(..4) {
        0 => {
            for _ in 0..=rng.usize(..8) {
                let at = rng.usize(..bytes.len());
                bytes[at] ^= 1 << rng.u32(..8);
            }
            bytes
        }
        1 => {
            bytes.truncate(rng.usize(..bytes.len()));
            bytes
        }
        2 => wrong_field(&envelope, rng),
        _ => {
            // Random bytes, some of them starting like a map.
            let len = rng.usize(..300);
            let mut junk: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if let Some(first) = junk.first_mut() {
                *first = 0x80 | (*first & 0x0f);
            }
            junk
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mutated_envelopes_all_end_and_the_system_keeps_working() -> anyhow::Result<()> {
    const MESSAGES: usize = 2_000;
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system
        .relay("f1", "fuzz", &["--no-fallback", "--concurrency", "32"])
        .await?;
    system
        .relay("f2", "fuzz", &["--no-fallback", "--concurrency", "32"])
        .await?;
    // A fixed seed, so a failure replays.
    let mut rng = fastrand::Rng::with_seed(0x5eed_1234_abcd_ef01);
    let mut sent = Vec::with_capacity(MESSAGES);
    for _ in 0..MESSAGES {
        let bytes = mutate(&mut rng);
        system
            .publish_raw("baton.agent.fuzz", bytes.clone())
            .await?;
        sent.push(bytes);
    }
    system.settled().await?;

    // Every message is a dead letter (matched by its bytes), or it was read
    // and its session has a terminal event.
    let dead = system.client.dead_letters().await?;
    let dead_bytes: HashSet<&[u8]> = dead.iter().map(|d| &d.payload[..]).collect();
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for letter in &dead {
        *reasons.entry(letter.reason.to_string()).or_default() += 1;
        assert!(!letter.detail.is_empty(), "a dead letter without detail");
    }
    let events = system.all_events().await?;
    // A session ends with its terminal event (a delegated child's, for
    // instance, after its result came back to a join that does not exist).
    let ended: HashSet<Uuid> = events
        .iter()
        .filter(|e| e.kind.is_terminal())
        .map(|e| e.session)
        .collect();
    let mut silent = Vec::new();
    let mut completed = 0;
    for bytes in &sent {
        if dead_bytes.contains(&bytes[..]) {
            continue;
        }
        match Envelope::from_msgpack(bytes) {
            Ok(envelope) if ended.contains(&envelope.session) => completed += 1,
            Ok(envelope) => {
                let seen: Vec<_> = events
                    .iter()
                    .filter(|e| e.envelope == Some(envelope.id) || e.session == envelope.session)
                    .map(|e| (e.kind.as_str().to_owned(), e.detail.clone()))
                    .collect();
                silent.push(format!(
                    "{} kind {} parent {:?} events {seen:?}",
                    envelope.id, envelope.kind, envelope.parent
                ));
            }
            Err(err) => silent.push(format!("undecodable, not dead-lettered: {err}")),
        }
    }
    assert!(
        silent.is_empty(),
        "{} ended in silence: {silent:?}",
        silent.len()
    );
    assert!(
        dead.len() > MESSAGES / 2 && completed > 50,
        "both ends are exercised: {} dead letters ({reasons:?}), {completed} read",
        dead.len()
    );

    // No worker exited, and valid sessions still complete.
    assert!(system.process("f1").is_running() && system.process("f2").is_running());
    for n in 0..5 {
        let task = Envelope::task(format!("after the storm {n}"));
        let events = system.run("fuzz", &task).await?;
        assert_eq!(kinds(&events), ["accepted", "completed"]);
    }

    // Bad registry requests each get an error reply; the mutations that are
    // still valid requests (any map is one: unknown fields are ignored) get
    // an answer.
    let mut errors = 0;
    let mut bad = 0;
    for _ in 0..500 {
        let junk = mutate(&mut rng);
        let valid = baton_proto::LookupRequest::from_msgpack(&junk).is_ok();
        bad += usize::from(!valid);
        let reply = tokio::time::timeout(
            Duration::from_secs(2),
            system
                .nats
                .request("baton.registry.lookup", junk.clone().into()),
        )
        .await??;
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|c| c.as_str().to_owned());
        if valid {
            assert_eq!(code, None);
            baton_proto::LookupResponse::from_msgpack(&reply.payload)?;
        } else {
            assert_eq!(code.as_deref(), Some("400"));
            errors += 1;
        }
    }
    assert_eq!(errors, bad);
    assert!(bad > 200, "only {bad} of 500 requests were bad");
    assert!(system.process("registry").is_running());
    Ok(())
}
