//! Tasks on a versioned agent type's own subject, `baton.agent.<A>`: a
//! sender that knows no versions put them there (a process of an earlier
//! release, or one that sent before the type was versioned), and no worker
//! of a version runs them there. Every versioned worker also pulls that
//! subject's consumer, `agent-<A>`, and moves each task to the version its
//! session is pinned to, or else to the one the rollout chooses for it, as
//! the router would have: the bytes go on as they came, with `versions`
//! set. A task that cannot be read is dead-lettered with its reason, and
//! so is one the server stops delivering (its max deliveries), as for the
//! worker's own consumer.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{Head, Rewrite, Subjects};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::runtime::Runtime;
use baton_nats::Error;
use baton_nats::nats::publish::{Class, Outgoing};
use baton_nats::pipeline::address::{Sending, addressed};
use baton_nats::pipeline::delivery::Delivery;
use baton_nats::pipeline::intake::{self, IntakeSettings, Source};
use baton_nats::pipeline::plan::Settle;
use baton_nats::pipeline::settle::{finish, leave};

/// How many tasks of the type's own subject one worker moves at once.
const AT_ONCE: usize = 4;

/// Starts moving the tasks of the type's own consumer (on `source`'s
/// stream) to their versions, with the net that dead-letters one the
/// server stops delivering; both run until aborted (a move cut short is
/// redelivered and written again under the same message id).
///
/// # Errors
///
/// When the net cannot subscribe to the server's advisories.
pub(crate) async fn spawn(
    rt: &Arc<Runtime>,
    client: &async_nats::Client,
    source: &Source,
) -> Result<[JoinHandle<()>; 2], Error> {
    let own = Source {
        client: source.client.clone(),
        jetstream: source.jetstream.clone(),
        stream: source.stream.clone(),
        consumer: Subjects::agent_consumer(&rt.config.agent),
    };
    let net = rt.net(client, &own).spawn().await?;
    let settings = IntakeSettings {
        concurrency: AT_ONCE,
        pull_expires: rt.config.pull_expires,
        shutdown_grace: Duration::from_secs(1),
    };
    let rt = rt.clone();
    let mover = tokio::spawn(async move {
        intake::serve(own, settings, std::future::pending(), |message| {
            let rt = rt.clone();
            async move { move_one(&rt, message).await }
        })
        .await;
    });
    Ok([net, mover])
}

/// Moves one task to its version.
async fn move_one(rt: &Runtime, message: jetstream::Message) {
    let config = &rt.config;
    let span = tracing::info_span!("baton.move", session = tracing::field::Empty);
    let delivery = Delivery::new(message, span.clone(), &config.subjects, &config.agent);
    let publisher = &rt.outbox.publisher;
    async {
        let head = match Head::read(&delivery.message.payload, config.max_payload) {
            Ok(head) => head,
            Err(err) => {
                tracing::warn!(reason = %err.reason(), detail = err.detail(), "undecodable task on the type's own subject; dead-lettering");
                let outgoing = delivery.unreadable(&err.reason(), err.detail());
                finish(publisher, &delivery, &outgoing, Settle::Term).await;
                return;
            }
        };
        span.record("session", tracing::field::display(head.session));
        let mut envelope = head.skeleton();
        let sent = addressed(
            (&rt.outbox.rollouts, &config.subjects),
            Sending::Moved,
            &config.agent,
            &mut envelope,
        );
        let Some(version) = envelope.versions.get(config.agent.as_str()).cloned() else {
            // The rollout is not known here yet: try again in a moment.
            tracing::warn!("no rollout known for a task on the type's own subject; leaving it for later");
            return leave(&delivery).await;
        };
        let payload = Rewrite::default()
            .set("versions", &envelope.versions)
            .map_err(|err| err.to_string())
            .and_then(|rewrite| {
                (rewrite.apply(&delivery.message.payload)).map_err(|err| err.to_string())
            });
        let outgoing = match payload {
            Ok(payload) => vec![Outgoing {
                class: Class::Plain,
                subject: sent.subject,
                // Its own message id: the original's is in the stream's
                // duplicate window already.
                id: sent.id,
                payload: payload.into(),
                headers: delivery.shared_headers(),
            }],
            Err(err) => {
                let detail = format!("cannot write the task on to its version: {err}");
                let reason = baton_proto::DeadLetterReason::Malformed;
                finish(publisher, &delivery, &delivery.unreadable(&reason, &detail), Settle::Term).await;
                return;
            }
        };
        tracing::info!(%version, "a task on the type's own subject moved to its version");
        finish(publisher, &delivery, &outgoing, Settle::Ack).await;
    }
    .instrument(span.clone())
    .await;
}
