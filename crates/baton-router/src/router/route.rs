//! The router's per-message path: a task from the ingress goes to its
//! agent type (named, the default, or found by the registry), or ends
//! with a clear reason.

use std::sync::Arc;

use async_nats::jetstream;
use baton_proto::{
    AgentName, DeadLetterReason, Envelope, Event, EventType, Head, LookupRequest, Reason, Rewrite,
    derive_id,
};
use tracing::Instrument;
use uuid::Uuid;

use super::{ROUTER_NAME, RouterConfig};
use baton_client::RegistryClient;
use baton_nats::nats::publish::{Class, Outgoing, Publisher};
use baton_nats::nats::served::Served;
use baton_nats::pipeline::address::{Addressed, Sending, addressed};
use baton_nats::pipeline::delivery::Delivery;
use baton_nats::pipeline::plan::{DeadLetter, Output, Plan, Settle};
use baton_nats::pipeline::settle::finish;
use baton_nats::state::rollouts::Rollouts;
use baton_nats::{Error, ErrorKind};

/// What the router's per-message path needs.
pub(super) struct Ingress {
    pub(super) config: Arc<RouterConfig>,
    pub(super) registry: Option<RegistryClient>,
    pub(super) publisher: Publisher,
    pub(super) me: AgentName,
    pub(super) served: Served,
    /// The agent types' rollouts: a task for a versioned type is pinned to
    /// the version its rollout chooses.
    pub(super) rollouts: Rollouts,
}

pub(super) async fn route(router: &Ingress, message: jetstream::Message) {
    let Ingress {
        config,
        registry,
        publisher,
        me,
        served,
        rollouts,
    } = router;
    let span = tracing::info_span!(
        "baton.route",
        session = tracing::field::Empty,
        envelope = tracing::field::Empty
    );
    let delivery = Delivery::new(message, span.clone(), &config.subjects, me);
    async {
        // The routing fields only: the body goes on as the bytes it came as.
        let head = match Head::read(&delivery.message.payload, config.max_payload) {
            Ok(head) => head,
            Err(err) => {
                tracing::warn!(reason = %err.reason(), detail = err.detail(), "undecodable task; dead-lettering");
                let outgoing = delivery.unreadable(&err.reason(), err.detail());
                finish(publisher, &delivery, &outgoing, Settle::Term).await;
                return;
            }
        };
        // What the router reads and says about the task, as an envelope.
        let envelope = head.skeleton();
        span.record("session", tracing::field::display(envelope.session));
        span.record("envelope", tracing::field::display(envelope.id));
        let jetstream = &delivery.message.context;
        let attempt = delivery.attempt;
        let opening = (head.session, head.opens_session());
        if let Some(end) = baton_nats::pipeline::opening::ended_before(jetstream, &config.subjects, opening, attempt).await {
            tracing::info!("a task for an ended session; dead-lettered");
            let plan = Plan::session_ended(envelope.id, envelope.session, &end);
            let outgoing = match delivery.encode(&plan.outputs) {
                Ok(outgoing) => outgoing,
                Err(err) => delivery.unreadable(&DeadLetterReason::Malformed, &err.to_string()),
            };
            finish(publisher, &delivery, &outgoing, plan.settle).await;
            return;
        }
        let target = match envelope.deadline_out_of_range(baton_proto::now_ms()) {
            Some(detail) => Err((DeadLetterReason::Malformed, detail)),
            None => match target(config, registry.as_ref(), &envelope).await {
                Ok(route) => served.check(&route.agent).await.map(|()| route),
                Err(why) => Err(why),
            }
            .map_err(|why| (DeadLetterReason::NoRoute, why.to_string())),
        };
        let (outgoing, settle) = match target {
            Ok(route) => {
                let mut envelope = envelope;
                let defaults = config.defaults();
                let sending = Sending::Routed(&defaults);
                let sent = addressed(
                    (rollouts, &config.subjects),
                    sending,
                    &route.agent,
                    &mut envelope,
                );
                let route = (route, sent);
                (sent_on(&delivery, &head, &envelope, route), Settle::Ack)
            }
            Err((reason, detail)) => {
                tracing::info!(%reason, %detail, "task refused");
                let outputs = refused(&envelope, reason, &detail);
                let outgoing = delivery.encode(&outputs).unwrap_or_else(|err| {
                    let detail = format!("cannot encode the refusal: {err}");
                    delivery.unreadable(&DeadLetterReason::Malformed, &detail)
                });
                (outgoing, Settle::Term)
            }
        };
        finish(publisher, &delivery, &outgoing, settle).await;
    }
    .instrument(span.clone())
    .await;
}

/// What forwarding a task to `route`, as it was addressed (with the
/// router's default deadline and budget where it sets none), writes: the
/// task, after any event about it, and its deadline timer; or its dead
/// letter when it cannot be written.
fn sent_on(
    delivery: &Delivery<'_>,
    head: &Head,
    envelope: &Envelope,
    (route, sent): (Route, Addressed),
) -> Vec<Outgoing> {
    let Addressed { id, subject, timer } = sent;
    let forwarded = forward(delivery, (head, envelope), (route, id, subject));
    let mut outgoing = forwarded.unwrap_or_else(|detail| {
        delivery.unreadable(&DeadLetterReason::Malformed, &detail.to_string())
    });
    // The session's deadline is watched from now on, wherever its task goes.
    outgoing.extend(timer);
    outgoing
}

/// Where a task goes.
struct Route {
    agent: AgentName,
    /// Set when the task goes to the fallback because nothing met its `requires`.
    no_match: Option<String>,
}

/// The agent a task goes to, or why there is none.
async fn target(
    config: &RouterConfig,
    registry: Option<&RegistryClient>,
    envelope: &Envelope,
) -> Result<Route, Error> {
    let direct = |agent| Route {
        agent,
        no_match: None,
    };
    if let Some(to) = &envelope.to {
        return AgentName::new(to.as_str()).map(direct).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("the task's `to` is not an agent type: {err}"),
            )
        });
    }
    if !envelope.requires.is_empty() {
        let why = match registry {
            Some(registry) => {
                let request = LookupRequest {
                    requires: envelope.requires.clone(),
                    domains: envelope.domains.clone(),
                    query: Some(envelope.context.initial_query.clone()),
                    ..LookupRequest::default()
                };
                match registry.best(&request).await {
                    Ok(agent) => return Ok(direct(agent)),
                    Err(why) => why.to_string(),
                }
            }
            None => "the task has `requires` but the router does not use the registry".to_owned(),
        };
        return match &config.fallback {
            Some(fallback) => Ok(Route {
                agent: fallback.clone(),
                no_match: Some(why),
            }),
            None => Err(Error::new(
                ErrorKind::NoRoute,
                format!("{why}, and the router has no fallback agent (start it with --fallback)"),
            )),
        };
    }
    config.default_agent.clone().map(direct).ok_or_else(|| {
        Error::new(
            ErrorKind::NoRoute,
            "the task has no `to` and no `requires`, and the router has no default entry agent (start it with --default-agent)",
        )
    })
}

/// A router event about `envelope`.
fn event(envelope: &Envelope, index: u32, kind: EventType, reason: Reason, detail: &str) -> Output {
    let mut event = Event::new(derive_id(envelope.id, index), envelope.session, kind);
    event.agent = Some(AgentName::from_static(ROUTER_NAME));
    event.envelope = Some(envelope.id);
    event.reason = Some(reason);
    event.detail = Some(detail.to_owned());
    Output::Event(Box::new(event))
}

/// The task on its way to `route`, after an `escalated` event when it goes
/// to the fallback for lack of a match. The task is the delivered bytes
/// with the fields routing changes rewritten (its id, target and creation
/// time as [`Envelope::resent`] sets them, and the deadline and budget
/// where `envelope` changed them from `head`, and the reason); the rest is
/// copied through undecoded. `Err` says why it cannot be written.
fn forward(
    delivery: &Delivery<'_>,
    (head, envelope): (&Head, &Envelope),
    (route, id, subject): (Route, Uuid, String),
) -> Result<Vec<Outgoing>, Error> {
    let mut outputs = Vec::new();
    let mut rewrite = Rewrite::resent(id, &envelope.kind, route.agent.as_str());
    if let Some(why) = route.no_match {
        rewrite = rewrite.and_then(|r| r.set("reason", &Reason::NoMatch));
        let mut escalated = event(envelope, 1, EventType::Escalated, Reason::NoMatch, &why);
        if let Output::Event(event) = &mut escalated {
            event.to = Some(route.agent.clone());
        }
        outputs.push(escalated);
    }
    if let (Some(deadline), true) = (envelope.deadline, envelope.deadline != head.deadline) {
        rewrite = rewrite.and_then(|r| r.set("deadline", &deadline));
    }
    if let (Some(budget), true) = (envelope.budget, envelope.budget != head.budget) {
        rewrite = rewrite.and_then(|r| r.set("budget", &budget));
    }
    if envelope.versions != head.versions {
        rewrite = rewrite.and_then(|r| r.set("versions", &envelope.versions));
    }
    let cannot = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::Encode,
            format!("cannot write the task on: {err}"),
        )
    };
    let payload = rewrite
        .map_err(|err| cannot(&err))?
        .apply(&delivery.message.payload)
        .map_err(|err| cannot(&err))?;
    let mut outgoing = delivery.encode(&outputs).map_err(|err| cannot(&err))?;
    outgoing.push(Outgoing {
        class: Class::Plain,
        subject,
        id,
        payload: payload.into(),
        headers: delivery.shared_headers(),
    });
    Ok(outgoing)
}

/// A dead letter, `dead_lettered` and `failed`: the task is not forwarded.
fn refused(envelope: &Envelope, reason: DeadLetterReason, detail: &str) -> Vec<Output> {
    let why = Reason::from(&reason);
    vec![
        Output::DeadLetter(DeadLetter {
            id: derive_id(envelope.id, 1),
            reason,
            detail: detail.to_owned(),
        }),
        event(envelope, 2, EventType::DeadLettered, why.clone(), detail),
        event(envelope, 3, EventType::Failed, why, detail),
    ]
}
