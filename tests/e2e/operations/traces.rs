//! Traces over OTLP/HTTP: four worker processes (two relays, an exec agent,
//! and an LLM agent on the scripted model server) export to a receiver inside the test, which
//! decodes them with the OpenTelemetry project's protobuf definitions. One
//! session is one trace: `invoke_agent` spans chained across processes, a
//! `chat {model}` span with the GenAI attributes and token counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_proto::{Envelope, EventType};
use baton_testkit::{ChildProcess, FakeLlm, Scripted, eventually};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use crate::util::System;

/// Spans received, with their resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// Sum data points received: metric name, attributes, value (the latest).
type Points = Arc<Mutex<Vec<(String, HashMap<String, String>, i64)>>>;

/// An OTLP/HTTP receiver on a free port: its URL, and the spans and
/// metric points it received.
async fn receiver() -> anyhow::Result<(String, Received, Points)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let received: Received = Arc::default();
    let points: Points = Arc::default();
    let kept_points = points.clone();
    let metrics = move |body: bytes::Bytes| {
        let kept = kept_points.clone();
        async move {
            let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
                return axum::http::StatusCode::BAD_REQUEST;
            };
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            let metrics = request
                .resource_metrics
                .into_iter()
                .flat_map(|r| r.scope_metrics)
                .flat_map(|s| s.metrics);
            for metric in metrics {
                let Some(Data::Sum(sum)) = metric.data else {
                    continue;
                };
                for point in sum.data_points {
                    let attributes = as_text(&point.attributes);
                    let value = match point.value {
                        Some(number_data_point::Value::AsInt(n)) => n,
                        Some(number_data_point::Value::AsDouble(x)) => x as i64,
                        None => 0,
                    };
                    kept.push((metric.name.clone(), attributes, value));
                }
            }
            axum::http::StatusCode::OK
        }
    };
    let kept = received.clone();
    let collect = move |body: bytes::Bytes| {
        let kept = kept.clone();
        async move {
            let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                return axum::http::StatusCode::BAD_REQUEST;
            };
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|a| a.key == "service.name")
                    .and_then(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    kept.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
                }
            }
            axum::http::StatusCode::OK
        }
    };
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(collect))
        .route("/v1/metrics", axum::routing::post(metrics));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, received, points))
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::StringValue(text) => Some(text.clone()),
        Value::IntValue(n) => Some(n.to_string()),
        Value::BoolValue(b) => Some(b.to_string()),
        Value::DoubleValue(x) => Some(x.to_string()),
        _ => None,
    }
}

/// A span's attributes, as text.
fn attributes(span: &Span) -> HashMap<String, String> {
    as_text(&span.attributes)
}

/// OTLP attributes as text, by key.
fn as_text(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|a| {
            let value = text(a.value.as_ref().and_then(|v| v.value.as_ref()))?;
            Some((a.key.clone(), value))
        })
        .collect()
}

/// Starts `baton ARGS` as `label`, exporting its traces to `otlp`.
async fn exporting(
    system: &mut System,
    label: &str,
    args: &[&str],
    otlp: &str,
) -> anyhow::Result<()> {
    let mut command = system.baton(args);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_TRACES_EXPORTER");
    system.adopt(label, ChildProcess::spawn(command, label)?);
    system
        .wait_log(label, "worker started", Duration::from_secs(30))
        .await
}

/// Every span received so far, once spans named each of `wanted` are among them.
async fn spans_named(received: &Received, wanted: &[&str]) -> anyhow::Result<Vec<(String, Span)>> {
    let spans = eventually(Duration::from_secs(20), || async {
        let spans = received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
        anyhow::ensure!(
            wanted.iter().all(|w| names.contains(w)),
            "spans so far: {names:?}"
        );
        Ok(spans)
    })
    .await?;
    Ok(spans)
}

#[tokio::test(flavor = "multi_thread")]
async fn one_session_is_one_trace_across_processes_with_genai_spans() -> anyhow::Result<()> {
    let (otlp, received, points) = receiver().await?;
    let answer = Scripted::text("Your refund is on its way.").with_usage("fake-model-1", 12, 5);
    let llm = FakeLlm::start(vec![answer])?;
    let dir = tempfile::tempdir()?;
    let writer_spec = dir.path().join("writer.toml");
    let llm_spec = format!(
        "name = \"writer\"\nkind = \"llm\"\n\n[llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"Answer.\"\n",
        llm.url()
    );
    std::fs::write(&writer_spec, llm_spec)?;
    // An exec agent in shell that hands off to the LLM agent.
    let checker_spec = dir.path().join("checker.toml");
    let exec_spec =
        "name = \"checker\"\nkind = \"exec\"\n\n[exec]\ncommand = [\"sh\", \"check.sh\"]\n";
    std::fs::write(&checker_spec, exec_spec)?;
    let script = "cat >/dev/null\necho '{\"action\": \"handoff\", \"to\": \"writer\", \"reason\": \"knowledge_gap\"}'\n";
    std::fs::write(dir.path().join("check.sh"), script)?;
    let (writer_spec, checker_spec) = (
        writer_spec.to_string_lossy().into_owned(),
        checker_spec.to_string_lossy().into_owned(),
    );
    let mut system = System::start().await?;
    let alone = "--no-registry";
    let workers: [(&str, Vec<&str>); 4] = [
        (
            "front",
            vec!["worker", "front", "--relay", "--next", "middle", alone],
        ),
        (
            "middle",
            vec!["worker", "middle", "--relay", "--next", "checker", alone],
        ),
        ("checker", vec!["worker", "--spec", &checker_spec, alone]),
        (
            "writer",
            vec![
                "worker",
                "--spec",
                &writer_spec,
                alone,
                "--metrics-addr",
                "127.0.0.1:0",
            ],
        ),
    ];
    for (label, args) in &workers {
        exporting(&mut system, label, args, &otlp).await?;
    }
    let task = Envelope::task("Where is my refund?");
    let events = system.run("front", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let wanted = [
        "invoke_agent front",
        "invoke_agent middle",
        "invoke_agent checker",
        "exec sh",
        "invoke_agent writer",
        "chat fake-model",
    ];
    let spans = spans_named(&received, &wanted).await?;
    let one = |name: &str| -> anyhow::Result<Span> {
        let found: Vec<&Span> = spans
            .iter()
            .filter(|(_, s)| s.name == name)
            .map(|(_, s)| s)
            .collect();
        match found[..] {
            [span] => Ok(span.clone()),
            _ => anyhow::bail!("{} spans named {name}", found.len()),
        }
    };
    let [front, middle, checker, exec, writer, chat] = wanted.map(one);
    let (front, middle, checker, exec, writer, chat) =
        (front?, middle?, checker?, exec?, writer?, chat?);
    // One trace, each hop the child of the one before, across processes.
    for span in [&middle, &checker, &exec, &writer, &chat] {
        assert_eq!(span.trace_id, front.trace_id, "{}", span.name);
    }
    assert_eq!(middle.parent_span_id, front.span_id);
    assert_eq!(checker.parent_span_id, middle.span_id);
    assert_eq!(exec.parent_span_id, checker.span_id);
    assert_eq!(writer.parent_span_id, checker.span_id);
    assert_eq!(chat.parent_span_id, writer.span_id);
    assert_eq!(
        attributes(&exec)
            .get("process.exit.code")
            .map(String::as_str),
        Some("0")
    );
    assert!(spans.iter().all(|(service, _)| service == "baton-worker"));
    // The GenAI attributes, and Baton's.
    let session = task.session.to_string();
    let hops = [
        (&front, "front"),
        (&middle, "middle"),
        (&checker, "checker"),
        (&writer, "writer"),
    ];
    for (index, (span, agent)) in hops.into_iter().enumerate() {
        let seen = attributes(span);
        assert_eq!(
            seen.get("gen_ai.operation.name").map(String::as_str),
            Some("invoke_agent")
        );
        assert_eq!(
            seen.get("gen_ai.agent.name").map(String::as_str),
            Some(agent)
        );
        assert_eq!(seen.get("gen_ai.conversation.id"), Some(&session));
        assert_eq!(
            seen.get("baton.hop"),
            Some(&(index + 1).to_string()),
            "{agent}"
        );
        assert_eq!(
            seen.get("baton.path.length"),
            Some(&index.to_string()),
            "{agent}"
        );
        assert_eq!(seen.get("attempt").map(String::as_str), Some("1"));
    }
    // A spec names its version by its file's hash; a relay names none.
    let hashed = baton_proto::Version::of_bytes(exec_spec.as_bytes()).to_string();
    assert_eq!(
        attributes(&checker).get("gen_ai.agent.version"),
        Some(&hashed)
    );
    assert_eq!(attributes(&front).get("gen_ai.agent.version"), None);
    let outcome = |span: &Span| attributes(span).get("baton.outcome").cloned();
    let reason = |span: &Span| attributes(span).get("baton.reason").cloned();
    assert_eq!(outcome(&front).as_deref(), Some("handoff"));
    assert_eq!(outcome(&writer).as_deref(), Some("completed"));
    assert_eq!(reason(&front), None);
    assert_eq!(reason(&middle).as_deref(), Some("out_of_scope"));
    assert_eq!(reason(&writer).as_deref(), Some("knowledge_gap"));
    // The model call and the program run name the session as the
    // conversation, as their hops do.
    let exec = attributes(&exec);
    assert_eq!(exec.get("gen_ai.conversation.id"), Some(&session));
    let chat = attributes(&chat);
    let get = |key: &str| chat.get(key).map(String::as_str);
    assert_eq!(get("gen_ai.conversation.id"), Some(session.as_str()));
    assert_eq!(get("gen_ai.operation.name"), Some("chat"));
    assert_eq!(get("gen_ai.request.model"), Some("fake-model"));
    assert_eq!(get("gen_ai.response.model"), Some("fake-model-1"));
    assert_eq!(get("gen_ai.usage.input_tokens"), Some("12"));
    assert_eq!(get("gen_ai.usage.output_tokens"), Some("5"));
    assert!(get("gen_ai.response.finish_reasons").is_some_and(|r| r.contains("stop")));
    // The same usage, counted for Prometheus.
    let metrics = crate::operations::metrics::metrics_url(system.process("writer").stderr())?;
    let samples = crate::operations::metrics::scrape(&metrics)?;
    let tokens = |kind| {
        let labels = [("model", "fake-model-1"), ("type", kind)];
        crate::operations::metrics::value(&samples, "baton_llm_tokens_total", &labels)
    };
    assert_eq!((tokens("input"), tokens("output")), (12.0, 5.0));
    // The metrics are pushed over OTLP too.
    eventually(Duration::from_secs(20), || async {
        let points = points
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let handoffs = points
            .iter()
            .filter(|(name, labels, _)| {
                name == "baton.messages"
                    && labels.get("agent").map(String::as_str) == Some("front")
                    && labels.get("outcome").map(String::as_str) == Some("handoff")
            })
            .map(|(_, _, value)| *value)
            .max();
        anyhow::ensure!(handoffs == Some(1), "baton.messages of front: {handoffs:?}");
        Ok(())
    })
    .await?;
    // A failure marks its span: status error, and the reason as error.type.
    let broken = [
        "worker",
        "broken",
        "--relay",
        "--fatal",
        "--no-fallback",
        alone,
    ];
    exporting(&mut system, "broken", &broken, &otlp).await?;
    let events = system.run("broken", &Envelope::task("break")).await?;
    let failed = events.last().cloned().unwrap();
    assert_eq!(failed.kind, EventType::Failed);
    let reason = failed
        .reason
        .map(|r| r.as_str().to_owned())
        .unwrap_or_default();
    let span = eventually(Duration::from_secs(20), || async {
        let spans = received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let found = spans
            .into_iter()
            .find(|(_, s)| s.name == "invoke_agent broken");
        found
            .map(|(_, span)| span)
            .ok_or_else(|| anyhow::anyhow!("no span of broken yet"))
    })
    .await?;
    let status = span.status.clone().unwrap_or_default();
    assert_eq!(status.code, 2, "STATUS_CODE_ERROR: {status:?}");
    assert_eq!(attributes(&span).get("error.type"), Some(&reason));
    assert_eq!(
        attributes(&span).get("baton.outcome").map(String::as_str),
        Some("failed")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delegated_childs_span_is_a_child_of_the_delegating_hop() -> anyhow::Result<()> {
    let (otlp, received, _) = receiver().await?;
    let mut system = System::start().await?;
    let alone = "--no-registry";
    let lead = ["worker", "lead", "--relay", "--delegate", "kid", alone];
    exporting(&mut system, "lead", &lead, &otlp).await?;
    exporting(
        &mut system,
        "kid",
        &["worker", "kid", "--relay", alone],
        &otlp,
    )
    .await?;
    let events = system.run("lead", &Envelope::task("split")).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let spans = eventually(Duration::from_secs(20), || async {
        let spans = received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let leads = spans
            .iter()
            .filter(|(_, s)| s.name == "invoke_agent lead")
            .count();
        let kids = spans
            .iter()
            .filter(|(_, s)| s.name == "invoke_agent kid")
            .count();
        // The lead runs twice: the task, then the child's result.
        anyhow::ensure!(
            (leads, kids) == (2, 1),
            "{leads} lead and {kids} kid spans so far"
        );
        Ok(spans)
    })
    .await?;
    let find = |name: &str, outcome: &str| {
        spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| {
                s.name == name
                    && attributes(s).get("baton.outcome").map(String::as_str) == Some(outcome)
            })
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no {name} span with outcome {outcome}"))
    };
    let delegating = find("invoke_agent lead", "delegated")?;
    let kid = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "invoke_agent kid")
        .cloned()
        .unwrap_or_default();
    let joined = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "invoke_agent lead" && s.span_id != delegating.span_id)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        attributes(&joined).get("baton.outcome").map(String::as_str),
        Some("completed")
    );
    assert_eq!(kid.trace_id, delegating.trace_id);
    assert_eq!(kid.parent_span_id, delegating.span_id);
    // The result goes back under the child's span.
    assert_eq!(joined.trace_id, delegating.trace_id);
    assert_eq!(joined.parent_span_id, kid.span_id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_is_an_execute_tool_span_of_its_hop_and_is_counted() -> anyhow::Result<()> {
    let (otlp, received, _points) = receiver().await?;
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::text("It is on its way."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mcp = format!(
        "\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\n",
        crate::reliability::tools::orders_server()
    );
    let spec = crate::reliability::tools::refund_spec(dir.path(), &llm, &mcp)?;
    let mut system = System::start().await?;
    let args = [
        "worker",
        "--spec",
        &spec,
        "--no-registry",
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    exporting(&mut system, "refund_llm", &args, &otlp).await?;
    // A conversation's turn: every span of it names the conversation.
    let mut task = Envelope::task("Where is order ABC-123?");
    task.conversation = Some(baton_proto::TurnOf {
        id: "order-talk".to_owned(),
        turn: 1,
        hand_back: false,
        extra: baton_proto::Map::new(),
    });
    let events = system.run("refund_llm", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let spans = spans_named(
        &received,
        &[
            "execute_tool get_order",
            "invoke_agent refund_llm",
            "chat test-model",
        ],
    )
    .await?;
    let chats: Vec<&Span> = (spans.iter())
        .filter(|(_, s)| s.name.starts_with("chat "))
        .map(|(_, s)| s)
        .collect();
    assert_eq!(
        chats.len(),
        2,
        "one model call for the tool, one for the answer"
    );
    for span in spans.iter().map(|(_, s)| s) {
        let conversation = attributes(span).get("gen_ai.conversation.id").cloned();
        assert_eq!(conversation.as_deref(), Some("order-talk"), "{}", span.name);
    }
    let named = |name: &str| {
        spans
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    };
    let (hop, tool) = (
        named("invoke_agent refund_llm"),
        named("execute_tool get_order"),
    );
    assert_eq!(tool.parent_span_id, hop.span_id);
    let seen = attributes(&tool);
    assert_eq!(
        seen.get("gen_ai.operation.name").map(String::as_str),
        Some("execute_tool")
    );
    assert_eq!(
        seen.get("gen_ai.tool.name").map(String::as_str),
        Some("get_order")
    );
    let call = seen.get("gen_ai.tool.call.id").cloned().unwrap_or_default();
    assert_eq!(call, format!("{}/1/0", task.id));
    // Counted by tool and outcome, and timed.
    let url = crate::operations::metrics::metrics_url(system.process("refund_llm").stderr())?;
    let samples = crate::operations::metrics::scrape(&url)?;
    let labels = [("tool", "get_order"), ("outcome", "ok")];
    assert_eq!(
        crate::operations::metrics::value(&samples, "baton_tool_calls_total", &labels),
        1.0
    );
    assert_eq!(
        crate::operations::metrics::value(&samples, "baton_tool_duration_seconds_count", &labels),
        1.0
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversations_turn_spans_carry_its_conversation_id() -> anyhow::Result<()> {
    let (otlp, received, _points) = receiver().await?;
    let mut system = System::start().await?;
    let args = ["worker", "front", "--relay", "--no-registry"];
    exporting(&mut system, "front", &args, &otlp).await?;
    let mut turn = Envelope::task("Where is my refund?");
    turn.conversation = Some(baton_proto::TurnOf {
        id: "order-4711".to_owned(),
        turn: 1,
        hand_back: false,
        extra: baton_proto::Map::new(),
    });
    let one_shot = Envelope::task("And my invoice?");
    for task in [&turn, &one_shot] {
        let events = system.run("front", task).await?;
        assert_eq!(
            events.last().map(|e| e.kind.clone()),
            Some(EventType::Completed)
        );
    }
    let conversations = eventually(Duration::from_secs(20), || async {
        let spans = spans_named(&received, &["invoke_agent front"]).await?;
        let seen: Vec<(String, String)> = spans
            .iter()
            .filter(|(_, span)| span.name == "invoke_agent front")
            .map(|(_, span)| {
                let seen = attributes(span);
                let get = |key: &str| seen.get(key).cloned().unwrap_or_default();
                (get("session"), get("gen_ai.conversation.id"))
            })
            .collect();
        anyhow::ensure!(seen.len() == 2, "spans so far: {seen:?}");
        Ok(seen)
    })
    .await?;
    let of = |session: uuid::Uuid| {
        conversations
            .iter()
            .find(|(s, _)| *s == session.to_string())
            .map(|(_, c)| c.clone())
    };
    assert_eq!(
        of(turn.session).as_deref(),
        Some("order-4711"),
        "{conversations:?}"
    );
    let own = one_shot.session.to_string();
    assert_eq!(of(one_shot.session), Some(own), "{conversations:?}");
    Ok(())
}
