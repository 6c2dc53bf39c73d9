//! The registry's endpoints besides heartbeats: lookup, feedback and
//! notebook. Each reads msgpack, or JSON when the request's `Content-Type`
//! says so, and answers the same way; a bad request gets an error that
//! says what is wrong.

use async_nats::service::error::Error as ServiceError;
use baton_proto::{
    AgentName, FeedbackRequest, LookupRequest, LookupResponse, Notebook, NotebookRequest, Outcome,
    OutcomeKind, Wire,
};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use async_nats::jetstream;

use crate::choose::rank_learned;
use crate::learn::Learner;
use crate::table::Table;

/// The longest feedback note kept, in characters.
pub(crate) const MAX_NOTE: usize = 2000;

/// A bad request (400) that says what is wrong.
pub(crate) fn bad(what: &str, why: impl std::fmt::Display) -> ServiceError {
    ServiceError {
        status: format!("bad {what}: {why}"),
        code: 400,
    }
}

/// Reads a request payload.
pub(crate) fn decode<T: Wire + DeserializeOwned>(
    what: &str,
    payload: &[u8],
    json: bool,
) -> Result<T, ServiceError> {
    if json {
        serde_json::from_slice(payload)
            .map_err(|err| bad(what, format_args!("not a JSON {what}: {err}")))
    } else {
        T::from_msgpack(payload).map_err(|err| bad(what, err))
    }
}

/// Writes an answer.
pub(crate) fn encode<T: Wire + Serialize>(reply: &T, json: bool) -> Result<Bytes, ServiceError> {
    let encoded = if json {
        serde_json::to_vec(reply).map_err(|err| err.to_string())
    } else {
        reply.to_msgpack().map_err(|err| err.to_string())
    };
    encoded.map(Bytes::from).map_err(|err| ServiceError {
        status: format!("cannot encode the answer: {err}"),
        code: 500,
    })
}

/// The answer to a lookup.
pub(crate) fn lookup(
    table: &mut Table,
    learner: &Learner,
    payload: &[u8],
    json: bool,
) -> Result<Bytes, ServiceError> {
    let request: LookupRequest = decode("lookup request", payload, json)?;
    let agents = table.current(tokio::time::Instant::now());
    let response = LookupResponse {
        candidates: rank_learned(agents, &request, learner, &mut rand::rng()),
        extra: baton_proto::Map::new(),
    };
    encode(&response, json)
}

/// The feedback record to store for a feedback request, after checking
/// it. Whether its session has ended is checked by the caller.
pub(crate) fn feedback(payload: &[u8], json: bool) -> Result<Outcome, ServiceError> {
    let what = "feedback";
    let request: FeedbackRequest = decode(what, payload, json)?;
    let session = Uuid::parse_str(request.session.trim()).map_err(|err| {
        bad(
            what,
            format_args!("{:?} is not a session id: {err}", request.session),
        )
    })?;
    if !(0.0..=1.0).contains(&request.score) {
        return Err(bad(
            what,
            format_args!(
                "the score must be from 0 (not resolved) to 1 (fully resolved), not {}",
                request.score
            ),
        ));
    }
    let mut outcome = Outcome::new(Uuid::new_v4(), session, OutcomeKind::Feedback);
    outcome.score = Some(request.score);
    outcome.note = request
        .note
        .map(|note| note.chars().take(MAX_NOTE).collect())
        .filter(|note: &String| !note.trim().is_empty());
    Ok(outcome)
}

/// Whether `session` has ended (so that feedback on it may be stored),
/// from its last event, and the agents on its path: no event at all is an
/// unknown session (404), a session still running is refused too (409).
pub(crate) async fn ended(
    jetstream: &jetstream::Context,
    subjects: &baton_proto::Subjects,
    session: Uuid,
) -> Result<Vec<baton_proto::AgentName>, ServiceError> {
    use baton_proto::{Event, EventType};
    let unknown = || ServiceError {
        status: format!(
            "no session {session}: nothing about it is stored (check the id with `baton watch {session}`)"
        ),
        code: 404,
    };
    let stream = jetstream
        .get_stream_no_info(subjects.events_stream())
        .await
        .map_err(|_| unknown())?;
    let last = stream
        .get_last_raw_message_by_subject(&subjects.events(session))
        .await
        .map_err(|_| unknown())?;
    let event = Event::from_msgpack(&last.payload);
    match event.map(|event| (event.kind, event.path)) {
        Ok((kind, path)) if kind.is_terminal() || kind == EventType::Waiting => {
            let mut agents: Vec<baton_proto::AgentName> =
                path.into_iter().map(|hop| hop.agent).collect();
            agents.sort();
            agents.dedup();
            Ok(agents)
        }
        Ok((kind, _)) => Err(ServiceError {
            status: format!(
                "session {session} has not ended yet (its last event is `{kind}`): give feedback once it has"
            ),
            code: 409,
        }),
        Err(_) => Err(unknown()),
    }
}

/// An agent type's notebook.
pub(crate) fn notebook(
    table: &Table,
    learner: &Learner,
    payload: &[u8],
    json: bool,
) -> Result<Bytes, ServiceError> {
    let what = "notebook request";
    let request: NotebookRequest = decode(what, payload, json)?;
    let agent = AgentName::new(request.agent.as_str()).map_err(|err| bad(what, err))?;
    let live = table.agent_types().any(|known| known == agent.as_str());
    if !live && !learner.knows_agent(agent.as_str()) {
        return Err(ServiceError {
            status: format!(
                "no agent type {agent}: no worker of it is live and no session has passed through it \
                 (`baton agents` lists the live ones)"
            ),
            code: 404,
        });
    }
    let book: Notebook = learner.notebook(&agent);
    encode(&book, json)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_proto::{Heartbeat, LookupResponse};
    use tokio::time::Instant;

    use super::*;

    fn respond(table: &mut Table, payload: &[u8], json: bool) -> Result<Bytes, ServiceError> {
        lookup(table, &Learner::default(), payload, json)
    }

    fn table() -> Table {
        let mut table = Table::new(Duration::from_secs(60));
        let beat = Heartbeat {
            agent: baton_proto::AgentName::from_static("refund"),
            instance: "r1".into(),
            capabilities: vec!["refunds".into()],
            domains: vec!["billing".into()],
            tier: 2,
            in_flight: 1,
            max_concurrency: 4,
            processed: 0,
            failed: 0,
            at: 0,
            interval_ms: None,
            description: None,
            tool_schema: None,
            version: None,
            extra: baton_proto::Map::new(),
        };
        table.record(beat, Instant::now());
        table
    }

    #[test]
    fn msgpack_in_msgpack_out() {
        let request = LookupRequest {
            requires: vec!["refunds".into()],
            ..LookupRequest::default()
        };
        let bytes = respond(&mut table(), &request.to_msgpack().unwrap(), false).unwrap();
        let response = LookupResponse::from_msgpack(&bytes).unwrap();
        assert_eq!(response.candidates.len(), 1);
        assert_eq!(response.candidates[0].agent, "refund");
        assert_eq!(response.candidates[0].in_flight, Some(1));
    }

    #[test]
    fn json_in_json_out() {
        let bytes = respond(
            &mut table(),
            br#"{"requires":["refunds"],"min_tier":2}"#,
            true,
        )
        .unwrap();
        let response: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(response["candidates"][0]["agent"], "refund");
        assert_eq!(response["candidates"][0]["load"], 0.25);
    }

    #[test]
    fn malformed_requests_get_an_error_that_says_what_is_wrong() {
        let err = respond(&mut table(), b"\xc1 not msgpack", false).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.status.starts_with("bad lookup request: "),
            "{}",
            err.status
        );
        let err = respond(&mut table(), br#"{"requires": "refunds"}"#, true).unwrap_err();
        assert!(
            err.status.contains("not a JSON lookup request"),
            "{}",
            err.status
        );
        assert!(err.status.contains("expected a sequence"), "{}", err.status);
    }
}
