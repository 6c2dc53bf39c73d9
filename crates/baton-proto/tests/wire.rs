//! The checked-in contract in `proto-schemas/`: JSON Schemas that must match
//! the code, and golden msgpack vectors that must decode (and re-encode to the
//! same bytes). Run with `BATON_BLESS=1` to rewrite them after a deliberate change.

use std::path::{Path, PathBuf};

use baton_proto::{
    Context, Envelope, Event, EventType, Hop, Kind, Map, Message, Parent, Reason, ResultStatus,
    Role, Step, Value, Wire, schemas,
};
use uuid::Uuid;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto-schemas")
}

fn bless() -> bool {
    std::env::var_os("BATON_BLESS").is_some()
}

/// Compares `actual` with the checked-in file, or writes it when blessing.
fn check(path: &Path, actual: &[u8]) {
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; run `BATON_BLESS=1 cargo test -p baton-proto` to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} drifted from the code; if the change is deliberate and backward compatible, \
         run `BATON_BLESS=1 cargo test -p baton-proto` and commit the result",
        path.display()
    );
}

#[test]
fn json_schemas_match_the_code() {
    for (name, schema) in schemas() {
        let mut text = serde_json::to_string_pretty(&schema).unwrap();
        text.push('\n');
        check(
            &root().join("schema").join(format!("{name}.schema.json")),
            text.as_bytes(),
        );
    }
}

const T: u64 = 1_767_225_600_000;

fn id(n: u8) -> Uuid {
    Uuid::from_bytes([0x10, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, n])
}

fn minimal_task() -> Envelope {
    let mut task = Envelope::task("Where is my order ABC-123?");
    task.id = id(1);
    task.session = id(2);
    task.created_at = T;
    task.context.messages[0].at = T;
    task
}

fn full_handoff() -> Envelope {
    let mut variables = Map::new();
    variables.insert("order_id".into(), Value::from("ABC-123"));
    variables.insert("n_attempts".into(), Value::from(1));
    let mut state = Map::new();
    state.insert("tool_error".into(), Value::from("timeout"));
    let mut metadata = Map::new();
    metadata.insert("locale".into(), Value::from("en-GB"));
    Envelope {
        v: 1,
        id: id(3),
        session: id(2),
        kind: Kind::Handoff,
        to: Some("advanced_order".into()),
        from: Some("order_management".into()),
        requires: vec!["orders.special".into()],
        domains: vec![],
        reason: Some(Reason::ToolFailure),
        suggested_next_action: Some("look up the special order".into()),
        path: vec![
            Hop {
                agent: "general_enquiry".into(),
                instance: "a1b2c3".into(),
                at: T + 10,
                reason: None,
                accepted_at: None,
                requires: vec![],
                domains: vec![],
                extra: Map::new(),
            },
            Hop {
                agent: "order_management".into(),
                instance: "d4e5f6".into(),
                at: T + 20,
                reason: Some(Reason::OutOfScope),
                accepted_at: None,
                requires: vec![],
                domains: vec![],
                extra: Map::new(),
            },
        ],
        max_hops: Some(16),
        created_at: T + 21,
        deadline: Some(T + 60_000),
        reply_to: Some("baton.agent.planner".into()),
        parent: Some(Parent {
            id: id(9),
            agent: "planner".into(),
            depth: 1,
            index: None,
            assignment: None,
            extra: Map::new(),
        }),
        status: Some(ResultStatus::Completed),
        output: Some(Value::from("partial answer")),
        context: Context {
            initial_query: "Where is my special order SPC-777?".into(),
            problem: "special order lookup failed".into(),
            messages: vec![
                at(
                    T,
                    Message::new(Role::User, "Where is my special order SPC-777?"),
                ),
                at(
                    T + 15,
                    Message::new(Role::Agent, "Let me check.").with_name("order_management"),
                ),
                {
                    let mut tool = at(
                        T + 16,
                        Message::new(Role::Tool, "error: not found").with_name("order_lookup"),
                    );
                    tool.tool_call_id = Some("call_1".into());
                    tool
                },
            ],
            variables,
            trace: vec![{
                let mut step = Step::new("order_management", "lookup", "tool failed")
                    .with_reasoning("special orders need another system");
                step.at = T + 18;
                step.details = Value::Map(vec![(Value::from("attempts"), Value::from(1))]);
                step
            }],
            state,
            metadata,
            history: None,
            expanded: None,
            extra: Map::new(),
        },
        claims: Vec::new(),
        budget: None,
        usage: None,
        stream: false,
        replayable: false,
        replay: None,
        gate: None,
        resumed: None,
        conversation: None,
        versions: std::collections::BTreeMap::new(),
        extra: Map::new(),
    }
}

/// The minimal task with a 5,000-byte question, claim-checked with a
/// threshold of 1,000 bytes: the payload and its one object.
fn claimed_task() -> (Vec<u8>, (String, Vec<u8>)) {
    let mut task = minimal_task();
    task.context.messages[0].content = "How long is a piece of string? ".repeat(160);
    let checked = baton_proto::check_out(task.to_msgpack().unwrap(), 1000, 1024).unwrap();
    assert_eq!(checked.objects.len(), 1);
    (checked.payload, checked.objects[0].clone())
}

fn event(kind: EventType, n: u8) -> Event {
    let mut event = Event::new(id(100 + n), id(2), kind.clone());
    event.at = T + u64::from(n);
    event.agent = Some("order_management".into());
    event.instance = Some("d4e5f6".into());
    event.envelope = Some(id(3));
    match kind {
        EventType::Handoff
        | EventType::Escalated
        | EventType::LoopDetected
        | EventType::Delegated => {
            event.to = Some("advanced_order".into());
            event.reason = Some(Reason::ToolFailure);
        }
        EventType::Retrying => {
            event.attempt = Some(1);
            event.detail = Some("order database timed out".into());
        }
        EventType::Accepted => event.attempt = Some(1),
        EventType::Completed => {
            event.output = Some(Value::from("Order ABC-123 shipped."));
            event.path = full_handoff().path;
        }
        EventType::Failed | EventType::DeadLettered => {
            event.reason = Some(Reason::MaxAttempts);
            event.detail = Some("gave up after 3 attempts".into());
        }
        _ => event.detail = Some("overloaded".into()),
    }
    event
}

fn vectors() -> Vec<(String, Vec<u8>, String)> {
    let mut out = vec![
        (
            "minimal_task".to_owned(),
            minimal_task().to_msgpack().unwrap(),
            serde_json::to_string_pretty(&minimal_task()).unwrap(),
        ),
        (
            "handoff_envelope".to_owned(),
            full_handoff().to_msgpack().unwrap(),
            serde_json::to_string_pretty(&full_handoff()).unwrap(),
        ),
    ];
    let (claimed, (_, object)) = claimed_task();
    let envelope = Envelope::from_msgpack(&claimed).unwrap();
    out.push((
        "claimed_task".to_owned(),
        claimed,
        serde_json::to_string_pretty(&envelope).unwrap(),
    ));
    out.push((
        "claimed_task_object".to_owned(),
        object.clone(),
        serde_json::to_string_pretty(&rmpv::decode::read_value(&mut &object[..]).unwrap()).unwrap(),
    ));
    for (n, kind) in EventType::KNOWN.iter().enumerate() {
        let e = event(EventType::parse(kind), u8::try_from(n).unwrap());
        out.push((
            format!("event_{kind}"),
            e.to_msgpack().unwrap(),
            serde_json::to_string_pretty(&e).unwrap(),
        ));
    }
    out
}

#[test]
fn golden_vectors_are_stable() {
    for (name, bytes, json) in vectors() {
        check(
            &root().join("vectors").join(format!("{name}.msgpack")),
            &bytes,
        );
        check(
            &root().join("vectors").join(format!("{name}.json")),
            format!("{json}\n").as_bytes(),
        );
    }
}

#[test]
fn golden_vectors_decode() {
    let dir = root().join("vectors");
    let read = |name: &str| std::fs::read(dir.join(format!("{name}.msgpack"))).unwrap();

    let task = Envelope::from_msgpack(&read("minimal_task")).unwrap();
    assert_eq!(task.kind, Kind::Task);
    assert_eq!(task.id.to_string(), "10000000-0000-4000-8000-000000000001");
    assert!(task.path.is_empty() && task.to.is_none());
    assert_eq!(
        task.context.messages[0].content,
        "Where is my order ABC-123?"
    );
    // The minimal task has exactly the keys PROTOCOL.md shows.
    let value = rmpv::decode::read_value(&mut &read("minimal_task")[..]).unwrap();
    let keys: Vec<_> = value
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            "v",
            "id",
            "session",
            "kind",
            "path",
            "created_at",
            "context"
        ]
    );

    let handoff = Envelope::from_msgpack(&read("handoff_envelope")).unwrap();
    assert_eq!(handoff, full_handoff());
    assert_eq!(handoff.path[1].reason, Some(Reason::OutOfScope));
    assert_eq!(
        handoff.context.trace[0].reasoning,
        "special orders need another system"
    );

    for kind in EventType::KNOWN {
        let event = Event::from_msgpack(&read(&format!("event_{kind}"))).unwrap();
        assert_eq!(event.kind.as_str(), *kind);
        assert_eq!(event.session, id(2));
        // `type` is the wire name of the kind field.
        let value = rmpv::decode::read_value(&mut &read(&format!("event_{kind}"))[..]).unwrap();
        assert!(
            value
                .as_map()
                .unwrap()
                .iter()
                .any(|(k, v)| k.as_str() == Some("type") && v.as_str() == Some(kind))
        );
    }
}

#[test]
fn the_claimed_vector_restores_to_the_whole_task() {
    let dir = root().join("vectors");
    let read = |name: &str| std::fs::read(dir.join(format!("{name}.msgpack"))).unwrap();
    let claimed = read("claimed_task");
    let object = read("claimed_task_object");
    let listed = baton_proto::claims(&claimed).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].path, "/context/messages/0/content");
    assert_eq!(listed[0].object, baton_proto::object_name(&object));
    assert_eq!(listed[0].size, object.len() as u64);
    let objects = [(listed[0].object.clone(), object)].into_iter().collect();
    let whole = baton_proto::restore(&claimed, &objects).unwrap();
    let task = Envelope::from_msgpack(&whole).unwrap();
    assert!(task.claims.is_empty());
    assert_eq!(
        task.context.messages[0].content,
        "How long is a piece of string? ".repeat(160)
    );
}

/// `message`, sent at `ms`.
fn at(ms: u64, mut message: Message) -> Message {
    message.at = ms;
    message
}
