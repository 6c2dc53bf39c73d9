//! The runtime against a real nats-server: Rust agents whose routing rules
//! the runtime applies, exactly as it does for spec agents.

use std::time::Duration;

use baton_client::Client;
use baton_proto::{Envelope, EventType, Subjects};
use baton_testkit::NatsServer;
use baton_worker::{
    Agent, AgentError, AgentName, Condition, Outcome, Route, Routing, Task, Worker, WorkerConfig,
};
use tokio_util::sync::CancellationToken;

#[path = "runtime/following.rs"]
mod following;
#[path = "runtime/opening.rs"]
mod opening;

/// Triage answers every task and marks urgent ones; its rules send urgent
/// answers to the expert, and leave the rest to complete.
struct Triage {
    rules: Routing,
}

impl Triage {
    fn new() -> anyhow::Result<Self> {
        let expert = AgentName::new("expert")?;
        let urgent = Condition::new("priority == 'high'", Route::to(expert))?;
        Ok(Self {
            rules: Routing {
                conditions: vec![urgent],
                ..Routing::default()
            },
        })
    }
}

impl Agent for Triage {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        let priority = if task.query().starts_with("urgent") {
            "high"
        } else {
            "low"
        };
        Ok(Outcome::answer(format!("triaged as {priority}"))
            .set_var("priority", priority)
            .into())
    }

    fn routing(&self) -> Option<&Routing> {
        Some(&self.rules)
    }
}

struct Expert;

impl Agent for Expert {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        let priority = task
            .variable("priority")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        Ok(Outcome::complete(format!("expert answer ({priority})")).into())
    }
}

fn config(agent: &str, subjects: &Subjects) -> anyhow::Result<WorkerConfig> {
    Ok(WorkerConfig::new(AgentName::new(agent)?)
        .with_subjects(subjects.clone())
        .with_registry(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_agents_context_condition_routes_and_otherwise_it_completes() -> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let stop = CancellationToken::new();
    let triage = Worker::new(nats.clone(), config("triage", &subjects)?, Triage::new()?);
    let expert = Worker::new(nats.clone(), config("expert", &subjects)?, Expert);
    let workers = [
        tokio::spawn(triage.run(stop.clone().cancelled_owned())),
        tokio::spawn(expert.run(stop.clone().cancelled_owned())),
    ];
    let client = Client::new(nats, subjects);
    let triage = AgentName::new("triage")?;
    // Both pools are up once their consumers exist.
    for agent in ["triage", "expert"] {
        let agent = AgentName::new(agent)?;
        baton_testkit::eventually(Duration::from_secs(10), || client.check_served(&agent)).await?;
    }

    let urgent = Envelope::task("urgent: the site is down");
    client.submit_to(&triage, &urgent).await?;
    let end = client.wait(urgent.session, Duration::from_secs(20)).await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(
        end.output.as_ref().and_then(|v| v.as_str()),
        Some("expert answer (high)")
    );
    let path: Vec<_> = end.path.iter().map(|hop| hop.agent.as_str()).collect();
    assert_eq!(path, ["triage", "expert"]);
    // The hop into the expert says which rule moved control.
    assert_eq!(
        end.path[1].reason.as_ref().map(|r| r.as_str()),
        Some("context_condition")
    );

    let calm = Envelope::task("what are your opening hours?");
    client.submit_to(&triage, &calm).await?;
    let end = client.wait(calm.session, Duration::from_secs(20)).await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(
        end.output.as_ref().and_then(|v| v.as_str()),
        Some("triaged as low")
    );
    assert_eq!(end.path.len(), 1);

    stop.cancel();
    for worker in workers {
        worker.await??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_no_stream_takes_fails_as_no_stream_at_once() -> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let client = Client::new(nats.clone(), subjects.clone());
    client
        .submit(&Envelope::task("provisions the streams"))
        .await?;
    async_nats::jetstream::new(nats)
        .delete_stream(subjects.tasks_stream())
        .await?;
    let err = client
        .submit(&Envelope::task("nowhere to go"))
        .await
        .expect_err("no stream takes the ingress now");
    assert_eq!(err.kind(), baton_nats::ErrorKind::NoStream);
    let text = err.to_string();
    assert!(
        text.contains("no JetStream stream takes subject baton.ingress"),
        "{text}"
    );
    Ok(())
}

/// Spends `tokens` (read) in the hop of `task`, as a model call would.
fn spend(task: &Task, tokens: u64) {
    task.progress.spent(baton_worker::Usage {
        input_tokens: tokens,
        ..baton_worker::Usage::default()
    });
}

/// Asks two helpers at once, asynchronously; spends 10 tokens to ask and
/// 7 in each report, and ends once both have answered.
struct Boss;

impl Agent for Boss {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        spend(&task, 10);
        let helper = AgentName::new("helper")?;
        let children = vec![
            baton_worker::ChildTask::new(helper.clone(), "one"),
            baton_worker::ChildTask::new(helper, "two"),
        ];
        Ok(Outcome::delegate(children, baton_worker::DelegateMode::Async).into())
    }

    async fn resume(
        &self,
        task: Task,
        results: baton_worker::Results,
    ) -> Result<Outcome, AgentError> {
        spend(&task, 7);
        if results.all_in() {
            Ok(Outcome::complete("both answered").into())
        } else {
            Ok(Outcome::wait().into())
        }
    }
}

struct Helper;

impl Agent for Helper {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        // The second answers once the first one's report is done.
        if task.last_user_message() == "two" {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(Outcome::complete(format!("did {}", task.last_user_message())).into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_async_report_that_keeps_waiting_spends_counts_toward_the_session()
-> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let stop = CancellationToken::new();
    let boss = Worker::new(nats.clone(), config("boss", &subjects)?, Boss);
    let helper = Worker::new(nats.clone(), config("helper", &subjects)?, Helper);
    let workers = [
        tokio::spawn(boss.run(stop.clone().cancelled_owned())),
        tokio::spawn(helper.run(stop.clone().cancelled_owned())),
    ];
    let client = Client::new(nats, subjects);
    for agent in ["boss", "helper"] {
        let agent = AgentName::new(agent)?;
        baton_testkit::eventually(Duration::from_secs(10), || client.check_served(&agent)).await?;
    }
    let task = Envelope::task("ask both");
    client.submit_to(&AgentName::new("boss")?, &task).await?;
    let end = client.wait(task.session, Duration::from_secs(20)).await?;
    assert_eq!(end.kind, EventType::Completed, "{end:?}");
    // 10 to ask, 7 for the report that kept waiting, 7 for the one that ended.
    assert_eq!(end.usage.map(|usage| usage.input_tokens), Some(24));
    stop.cancel();
    for worker in workers {
        worker.await??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_parked_by_an_earlier_release_is_found_by_its_session_once_noted()
-> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let inbox = baton_client::Inbox::open(nats.clone(), subjects.clone(), 1).await?;
    let mut asking = Envelope::task("Which order?");
    asking.to = Some(baton_proto::AgentName::from_static("helper"));
    let mut gate: baton_proto::Gate = serde_json::from_value(serde_json::json!({
        "reason": "input_required", "tool": "ask_user", "arguments": "{}", "at": 0,
        "journal": asking.id.to_string(), "step": 1, "call": 0, "digest": ""
    }))?;
    gate.digest = baton_proto::Gate::digest_of("ask_user", "{}");
    asking.gate = Some(gate);
    inbox.put(&asking).await?;
    let found = inbox.question(asking.session).await?;
    assert_eq!(found.map(|entry| entry.envelope.id), Some(asking.id));
    // An earlier release stored the entry alone.
    let store = async_nats::jetstream::new(nats)
        .get_key_value(subjects.inbox_bucket())
        .await?;
    store.purge(format!("q.{}", asking.session)).await?;
    assert!(inbox.question(asking.session).await?.is_none());
    assert_eq!(inbox.note_older_entries().await?, 1);
    let found = inbox.question(asking.session).await?;
    assert_eq!(found.map(|entry| entry.envelope.id), Some(asking.id));
    assert_eq!(inbox.note_older_entries().await?, 0, "noted once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_session_waits_on_is_found_by_its_session_and_forgotten_with_its_answer()
-> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    Client::new(nats.clone(), subjects.clone())
        .ensure_streams()
        .await?;
    let inbox = baton_client::Inbox::open(nats.clone(), subjects.clone(), 1).await?;
    // Two sessions waiting at a human agent.
    let mut tasks = Vec::new();
    for text in ["first", "second"] {
        let mut task = Envelope::task(text);
        task.to = Some(baton_proto::AgentName::from_static("desk"));
        inbox.put(&task).await?;
        tasks.push(task);
    }
    for task in &tasks {
        let found = inbox.waiting(task.session).await?;
        assert_eq!(found.map(|entry| entry.envelope.id), Some(task.id));
        assert!(inbox.question(task.session).await?.is_none(), "no question");
    }
    assert!(inbox.waiting(uuid::Uuid::new_v4()).await?.is_none());
    assert_eq!(
        inbox.list().await?.len(),
        2,
        "the session keys are not entries"
    );
    // Answered: the entry and its session's key go.
    let id = tasks[0].id.to_string();
    let reply = baton_client::Reply::Complete;
    inbox.reply(&id, "done", reply, "ada").await?;
    assert!(inbox.waiting(tasks[0].session).await?.is_none());
    let store = async_nats::jetstream::new(nats)
        .get_key_value(subjects.inbox_bucket())
        .await?;
    let key = format!("w.{}", tasks[0].session);
    assert!(store.get(&key).await?.is_none(), "{key} is removed");
    // An entry an earlier release stored alone is named once noted.
    store.purge(format!("w.{}", tasks[1].session)).await?;
    assert!(inbox.waiting(tasks[1].session).await?.is_none());
    assert_eq!(inbox.note_older_entries().await?, 1);
    let found = inbox.waiting(tasks[1].session).await?;
    assert_eq!(found.map(|entry| entry.envelope.id), Some(tasks[1].id));
    Ok(())
}
