//! A Rust agent with a durable step and the worker's model, against a real
//! nats-server and the scripted model: a retried hop runs its step once
//! and asks the model once, its answers taken from the hop journal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use baton_agents::code::{Machinery, Stop};
use baton_client::Client;
use baton_proto::{AgentName, Envelope, EventType, Subjects};
use baton_testkit::{FakeLlm, NatsServer, Scripted};
use baton_worker::{Agent, AgentError, Outcome, RetryPolicy, Task, Worker, WorkerConfig};
use serde_json::json;

/// Reserves (a step), asks the model, fails once after both, then answers.
struct Reserver {
    machinery: Machinery,
    reserved: Arc<AtomicUsize>,
    fail_once: Arc<AtomicBool>,
}

impl Agent for Reserver {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        let (reserved, fail_once) = (self.reserved.clone(), self.fail_once.clone());
        let query = task.query().to_owned();
        self.machinery
            .run(&task, |ctx| async move {
                let seat: u32 = ctx
                    .step("reserve", |_key| async move {
                        reserved.fetch_add(1, Ordering::SeqCst);
                        7
                    })
                    .await?;
                let messages = vec![json!({"role": "user", "content": query})];
                let reply = ctx.model(messages, None, serde_json::Map::new()).await?;
                if fail_once.swap(false, Ordering::SeqCst) {
                    return Err(Stop::Failed(AgentError::retryable("a transient failure")));
                }
                ctx.say("Reserved.").await?;
                let text = reply["message"]["content"].as_str().unwrap_or_default();
                Ok(Outcome::complete(format!("{text} (seat {seat})")).into())
            })
            .await
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            min_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(50),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_rust_hop_runs_its_step_once_and_asks_the_model_once() {
    let server = tokio::task::spawn_blocking(NatsServer::start)
        .await
        .unwrap()
        .unwrap();
    let nats = async_nats::connect(server.url()).await.unwrap();
    let subjects = Subjects::default();
    let llm = FakeLlm::start(vec![Scripted::text("Your seat is booked.")]).unwrap();
    let llm_spec: baton_agents::spec::LlmSpec = toml::from_str(&format!(
        "base_url = \"{}\"\nmodel = \"stand-in\"",
        llm.url()
    ))
    .unwrap();
    let machinery = Machinery::open(&nats, (&subjects, 1), "reserver", Some(&llm_spec), &[])
        .await
        .unwrap();
    let reserved = Arc::new(AtomicUsize::new(0));
    let fail_once = Arc::new(AtomicBool::new(true));
    let agent = Reserver {
        machinery,
        reserved: reserved.clone(),
        fail_once: fail_once.clone(),
    };
    let name = AgentName::new("reserver").unwrap();
    let config = WorkerConfig::new(name.clone())
        .with_subjects(subjects.clone())
        .with_registry(false);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(Worker::new(nats.clone(), config, agent).run(async {
        let _ = stopped.await;
    }));

    let client = Client::new(nats.clone(), subjects);
    let task = Envelope::task("Book me a seat.");
    // Once the worker's consumer exists.
    baton_testkit::eventually(Duration::from_secs(20), || client.submit_to(&name, &task))
        .await
        .unwrap();
    let end = client
        .wait(task.session, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(end.kind, EventType::Completed, "{:?}", end.detail);
    assert_eq!(
        end.output.as_ref().and_then(|o| o.as_str()),
        Some("Your seat is booked. (seat 7)")
    );
    assert!(
        !fail_once.load(Ordering::SeqCst),
        "the first run failed, so the hop ran twice"
    );
    assert_eq!(reserved.load(Ordering::SeqCst), 1, "the step ran once");
    assert_eq!(llm.requests().len(), 1, "the model was asked once");
    let said: Vec<&str> = (end.context.iter())
        .flat_map(|context| context.messages.iter())
        .map(|message| message.content.as_str())
        .collect();
    assert!(said.contains(&"Reserved."), "{said:?}");
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
}
