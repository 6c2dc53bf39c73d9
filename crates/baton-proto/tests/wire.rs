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
        to: Some(baton_proto::AgentName::from_static("advanced_order")),
        from: Some(baton_proto::AgentName::from_static("order_management")),
        requires: vec!["orders.special".into()],
        domains: vec![],
        reason: Some(Reason::ToolFailure),
        suggested_next_action: Some("look up the special order".into()),
        path: vec![
            Hop {
                agent: baton_proto::AgentName::from_static("general_enquiry"),
                instance: "a1b2c3".into(),
                at: T + 10,
                reason: None,
                accepted_at: None,
                requires: vec![],
                domains: vec![],
                extra: Map::new(),
            },
            Hop {
                agent: baton_proto::AgentName::from_static("order_management"),
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
            agent: baton_proto::AgentName::from_static("planner"),
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
                let mut step = Step::new(
                    baton_proto::AgentName::from_static("order_management"),
                    "lookup",
                    "tool failed",
                )
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
    event.agent = Some(baton_proto::AgentName::from_static("order_management"));
    event.instance = Some("d4e5f6".into());
    event.envelope = Some(id(3));
    match kind {
        EventType::Handoff
        | EventType::Escalated
        | EventType::LoopDetected
        | EventType::Delegated => {
            event.to = Some(baton_proto::AgentName::from_static("advanced_order"));
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
    let stepped = completed_with_steps();
    out.push((
        "event_completed_steps".to_owned(),
        stepped.to_msgpack().unwrap(),
        serde_json::to_string_pretty(&stepped).unwrap(),
    ));
    out
}

/// A short hop's `completed` event carrying the `tool_called` events of two
/// steps its program ran.
fn completed_with_steps() -> Event {
    let mut event = event(EventType::Completed, 90);
    event.path.clear();
    event.steps = ["lookup", "charge"]
        .iter()
        .zip(1u8..)
        .map(|(name, n)| baton_proto::FoldedStep {
            id: id(200 + n),
            at: T + u64::from(n),
            tool: format!("step:{name}"),
            call: format!("{}/{}/0", id(3), 1000 + u32::from(n)),
            outcome: "ok".into(),
            duration_ms: u64::from(n) * 2,
            extra: baton_proto::Map::new(),
        })
        .collect();
    event
}

#[test]
fn folded_steps_are_restored_in_order_before_their_carrier() {
    let dir = root().join("vectors");
    let stored = std::fs::read(dir.join("event_completed_steps.msgpack")).unwrap();
    let events = Event::from_msgpack(&stored).unwrap().unfold();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["tool_called", "tool_called", "completed"]);
    assert_eq!(events[0].id, id(201));
    assert_eq!(events[0].detail.as_deref(), Some("step:lookup ok in 2 ms"));
    assert_eq!(events[1].detail.as_deref(), Some("step:charge ok in 4 ms"));
    assert_eq!(
        (events[1].envelope, events[1].session),
        (Some(id(3)), id(2))
    );
    assert_eq!(events[1].agent.as_deref(), Some("order_management"));
    assert!(events[2].steps.is_empty());
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

/// A persistent program's calls and the worker's answers
/// (proto-schemas/exec-calls.md), as JSON lines: the shapes the Python
/// package's own tests read too.
fn exec_call_vectors() -> Vec<(&'static str, serde_json::Value)> {
    use baton_proto::{ExecCall, ExecCallError, ExecCallResult, ExecChild, ExecOp};
    use serde_json::json;
    let call = |id: &str, op: ExecOp| {
        serde_json::to_value(ExecCall {
            call: id.to_owned(),
            task: "3".to_owned(),
            wait: true,
            op,
        })
        .unwrap()
    };
    let answer = |id: &str, result: Option<serde_json::Value>| ExecCallResult {
        call: id.to_owned(),
        result,
        error: None,
        end: None,
        message: None,
    };
    let mut params = serde_json::Map::new();
    params.insert("temperature".to_owned(), json!(0));
    vec![
        ("exec_call_tools", call("c1", ExecOp::Tools)),
        (
            "exec_call_model",
            call(
                "c2",
                ExecOp::Model {
                    messages: vec![json!({"role": "user", "content": "Where is ABC-123?"})],
                    tools: Some(vec![json!({"type": "function", "function": {"name": "orders_lookup", "description": "Looks an order up.", "parameters": {"type": "object"}}})]),
                    params,
                },
            ),
        ),
        (
            "exec_call_tool",
            call(
                "c3",
                ExecOp::Tool {
                    name: "orders_lookup".to_owned(),
                    arguments: json!({"order": "ABC-123"}),
                },
            ),
        ),
        (
            "exec_call_step",
            call(
                "c4",
                ExecOp::Step {
                    name: "charge".to_owned(),
                    idempotent: false,
                },
            ),
        ),
        (
            "exec_call_step_done",
            call(
                "c5",
                ExecOp::StepDone {
                    name: "charge".to_owned(),
                    key: Some("10000000-0000-4000-8000-000000000001/1001/0".to_owned()),
                    value: Some(json!({"receipt": "r-1"})),
                    error: None,
                },
            ),
        ),
        (
            "exec_call_step_done_unawaited",
            serde_json::to_value(ExecCall {
                call: "c9".to_owned(),
                task: "3".to_owned(),
                wait: false,
                op: ExecOp::StepDone {
                    name: "charge".to_owned(),
                    key: Some("10000000-0000-4000-8000-000000000001/1001/0".to_owned()),
                    value: Some(json!({"receipt": "r-1"})),
                    error: None,
                },
            })
            .unwrap(),
        ),
        (
            "exec_call_ask",
            call(
                "c6",
                ExecOp::Ask {
                    question: "Which order?".to_owned(),
                    schema: None,
                },
            ),
        ),
        (
            "exec_call_delegate",
            call(
                "c7",
                ExecOp::Delegate {
                    children: vec![ExecChild {
                        to: Some(baton_proto::AgentName::from_static("researcher")),
                        input: "Find the order".to_owned(),
                        ..ExecChild::default()
                    }],
                    mode: Some("parallel".to_owned()),
                },
            ),
        ),
        (
            "exec_call_say",
            call(
                "c8",
                ExecOp::Say {
                    text: "Looking.".to_owned(),
                },
            ),
        ),
        (
            "exec_call_result_run",
            serde_json::to_value(answer(
                "c4",
                Some(json!({"run": true, "key": "10000000-0000-4000-8000-000000000001/1001/0"})),
            ))
            .unwrap(),
        ),
        (
            "exec_call_result_recorded",
            serde_json::to_value(answer(
                "c4",
                Some(json!({"recorded": true, "value": {"receipt": "r-1"}})),
            ))
            .unwrap(),
        ),
        (
            "exec_call_result_tool",
            serde_json::to_value(answer("c3", Some(json!({"text": "shipped", "is_error": false}))))
                .unwrap(),
        ),
        (
            "exec_call_result_error",
            serde_json::to_value(ExecCallResult {
                error: Some(ExecCallError {
                    kind: "refused".to_owned(),
                    message: "ctx.model needs an [llm] table in the agent's spec, with base_url and model".to_owned(),
                }),
                ..answer("c2", None)
            })
            .unwrap(),
        ),
        (
            "exec_call_result_end",
            serde_json::to_value(ExecCallResult {
                end: Some("waiting".to_owned()),
                ..answer("c6", None)
            })
            .unwrap(),
        ),
    ]
}

#[test]
fn exec_call_vectors_are_stable_and_read_back() {
    for (name, value) in exec_call_vectors() {
        let mut text = serde_json::to_string_pretty(&value).unwrap();
        text.push('\n');
        check(
            &root().join("vectors").join(format!("{name}.json")),
            text.as_bytes(),
        );
        if name.starts_with("exec_call_result") {
            let read: baton_proto::ExecCallResult = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(read).unwrap(), value, "{name}");
        } else {
            let read: baton_proto::ExecCall = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(read).unwrap(), value, "{name}");
        }
    }
}

#[test]
fn names_that_break_the_rule_are_read_as_written_and_written_back_the_same() {
    // A foreign sender's task: `to`, a hop's and a step's agent, a pin and
    // an event's version that break the naming rule. The wire types read
    // them as written (a reader that addresses a subject checks them, as
    // the router does a task's `to`), and write the same bytes back.
    let task = serde_json::json!({
        "v": 1,
        "id": id(1).to_string(),
        "session": id(2).to_string(),
        "kind": "task",
        "to": "No Such Agent!",
        "created_at": 1,
        "path": [{"agent": "Order Mgmt", "instance": "w1", "at": 1}],
        "versions": {"Order Mgmt": "v1.2"},
        "context": {
            "initial_query": "hi",
            "trace": [{"agent": "Order Mgmt", "action": "look"}, {"agent": ""}]
        }
    });
    let bytes = rmp_serde::to_vec_named(&task).expect("a msgpack task");
    let read = Envelope::from_msgpack(&bytes).expect("read as written");
    assert_eq!(read.to.as_deref(), Some("No Such Agent!"));
    assert!(baton_proto::AgentName::new(read.to.as_deref().unwrap_or_default()).is_err());
    assert_eq!(read.path[0].agent, "Order Mgmt");
    assert_eq!(read.context.trace[0].agent.as_deref(), Some("Order Mgmt"));
    assert_eq!(
        read.context.trace[1].agent, None,
        "an empty step agent is none"
    );
    let pinned = read
        .versions
        .iter()
        .next()
        .map(|(a, v)| (a.as_str(), v.as_str()));
    assert_eq!(pinned, Some(("Order Mgmt", "v1.2")));
    let again = Envelope::from_msgpack(&read.to_msgpack().expect("encodes")).expect("decodes");
    assert_eq!(again, read);
    let written: serde_json::Value =
        rmp_serde::from_slice(&read.to_msgpack().expect("encodes")).expect("msgpack");
    assert_eq!(written["to"], "No Such Agent!");
    assert_eq!(written["context"]["trace"][1]["agent"], "");
}
