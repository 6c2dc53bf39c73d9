//! A hop's envelope is written on the bytes it arrived as: what the hop
//! appended is spliced in, the rest is copied as it came.

use std::time::Duration;

use baton_proto::{Envelope, EventType, Subjects, Value, Wire};
use baton_testkit::NatsServer;
use baton_worker::{
    Agent, AgentError, AgentName, Client, Outcome, Reason, Task, Worker, WorkerConfig,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Hands every task on to `reader`, saying something and setting a
/// variable and a state entry.
struct Writer;

impl Agent for Writer {
    async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
        let reader = AgentName::new("reader")?;
        Ok(Outcome::handoff(reader, Reason::OutOfScope)
            .say("noted")
            .set_var("seen", true)
            .set_state("step", 2)
            .into())
    }
}

struct Reader;

impl Agent for Reader {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        Ok(Outcome::complete(task.last_user_message().to_owned()).into())
    }
}

/// `task` encoded as another client might: its first message's `at` as a
/// uint64 (a re-encode would shorten it). Returns the bytes and that
/// message's encoding.
fn written_elsewhere(task: &Envelope) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    fn map_len(out: &mut Vec<u8>, len: usize) -> anyhow::Result<()> {
        out.push(0xde);
        out.extend_from_slice(&u16::try_from(len)?.to_be_bytes());
        Ok(())
    }
    fn text(out: &mut Vec<u8>, text: &str) -> anyhow::Result<()> {
        out.push(0xd9);
        out.push(u8::try_from(text.len())?);
        out.extend_from_slice(text.as_bytes());
        Ok(())
    }
    let value = rmpv::ext::to_value(task)?;
    let fields = value.as_map().cloned().unwrap_or_default();
    let mut bytes = Vec::new();
    let mut wide = Vec::new();
    map_len(&mut bytes, fields.len())?;
    for (key, value) in &fields {
        rmpv::encode::write_value(&mut bytes, key)?;
        if key.as_str() != Some("context") {
            rmpv::encode::write_value(&mut bytes, value)?;
            continue;
        }
        let context = value.as_map().cloned().unwrap_or_default();
        map_len(&mut bytes, context.len())?;
        for (key, value) in &context {
            rmpv::encode::write_value(&mut bytes, key)?;
            if key.as_str() != Some("messages") {
                rmpv::encode::write_value(&mut bytes, value)?;
                continue;
            }
            bytes.push(0x91);
            let at = bytes.len();
            map_len(&mut bytes, 3)?;
            for (k, v) in [("role", "user"), ("content", "where is my order?")] {
                text(&mut bytes, k)?;
                text(&mut bytes, v)?;
            }
            text(&mut bytes, "at")?;
            bytes.push(0xcf);
            bytes.extend_from_slice(&7u64.to_be_bytes());
            wide = bytes[at..].to_vec();
        }
    }
    Ok((bytes, wide))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_is_spliced_onto_the_bytes_it_arrived_as() -> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let client = Client::new(nats.clone(), subjects.clone());
    client.ensure_streams().await?;
    let stop = CancellationToken::new();
    let config = |agent: &str| -> anyhow::Result<WorkerConfig> {
        Ok(WorkerConfig::new(AgentName::new(agent)?)
            .with_subjects(subjects.clone())
            .with_registry(false))
    };
    let workers = [
        tokio::spawn(
            Worker::new(nats.clone(), config("writer")?, Writer)
                .run(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            Worker::new(nats.clone(), config("reader")?, Reader)
                .run(stop.clone().cancelled_owned()),
        ),
    ];
    for agent in ["writer", "reader"] {
        let agent = AgentName::new(agent)?;
        baton_testkit::eventually(Duration::from_secs(10), || client.check_served(&agent)).await?;
    }
    // What the writer hands on, as published.
    let mut handed = nats
        .subscribe(subjects.agent(&AgentName::new("reader")?))
        .await?;
    nats.flush().await?;

    let mut task = Envelope::task("where is my order?").with_variable("order", 42);
    task.extra
        .insert("x_future".to_owned(), Value::from("kept"));
    let (bytes, wide) = written_elsewhere(&task)?;
    let received = Envelope::from_msgpack(&bytes)?;
    let js = async_nats::jetstream::new(nats.clone());
    let publish = async_nats::jetstream::message::PublishMessage::build()
        .payload(bytes.into())
        .message_id(task.id.to_string());
    js.send_publish(subjects.agent(&AgentName::new("writer")?), publish)
        .await?
        .await?;
    let end = client.wait(task.session, Duration::from_secs(20)).await?;
    assert_eq!(end.kind, EventType::Completed, "{end:?}");

    let message = tokio::time::timeout(Duration::from_secs(5), handed.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("nothing handed on"))?;
    let on = Envelope::from_msgpack(&message.payload)?;
    // What the hop appended and set, on what the task arrived with.
    assert_eq!(on.path.len(), 1);
    assert_eq!(on.path[0].agent, "writer");
    assert_eq!(on.context.messages.len(), 2);
    assert_eq!(on.context.messages[0], received.context.messages[0]);
    assert_eq!(on.context.messages[1].content, "noted");
    assert_eq!(on.context.variables.get("order"), Some(&Value::from(42)));
    assert_eq!(on.context.variables.get("seen"), Some(&Value::from(true)));
    assert_eq!(on.context.state.get("step"), Some(&Value::from(2)));
    assert_eq!(on.extra.get("x_future"), Some(&Value::from("kept")));
    assert_eq!(on.from.as_deref(), Some("writer"));
    assert_eq!(on.to.as_deref(), Some("reader"));
    // Spliced, not rebuilt: the received message kept its bytes.
    assert!(
        message
            .payload
            .windows(wide.len())
            .any(|w| w == wide.as_slice()),
        "the first message was re-encoded"
    );
    stop.cancel();
    for worker in workers {
        worker.await??;
    }
    Ok(())
}
