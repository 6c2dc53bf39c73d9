//! Calls on a server whose questions go to a person (`elicitation =
//! "ask"`). MCP does not say which call a question (`elicitation/create`)
//! belongs to, so each call has a connection to itself while it is made:
//! over HTTP, one lent from the server's idle ones (made when none is
//! idle, kept for the next call after); over stdio, the one connection,
//! one call at a time. The call carries the answers on record, and is
//! cancelled when the server asks what no answer answers.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::ServiceError;
use tokio::sync::Mutex;

use super::{Connection, Server};
use crate::Error;
use crate::spec::McpElicitation;
use baton_mcp_client::answering::{Answering, Desk, OneCall, Question};

/// What became of a call.
pub(super) enum Made {
    /// No connection could be made.
    Unreachable(Error),
    /// The server answered, or the call failed on the way.
    Done(Result<CallToolResult, ServiceError>),
    /// The server did not answer in time.
    TimedOut,
    /// The server asked a question that waits for a person; the call was
    /// cancelled.
    Asked(Question),
}

/// The connections a server that asks a person lends its calls.
#[derive(Default)]
pub(super) struct Lent {
    /// Idle HTTP connections, each with its desk.
    idle: std::sync::Mutex<Vec<(Arc<Connection>, Arc<Desk>)>>,
    /// Held for each call over stdio's one connection.
    one_at_a_time: Mutex<()>,
}

impl Server {
    /// Makes the call `params` within `timeout`. On a server whose
    /// questions go to a person, the call has its connection to itself,
    /// and `answers` answer its questions.
    pub(super) async fn made(
        &self,
        params: CallToolRequestParams,
        timeout: Duration,
        answers: &[String],
    ) -> Made {
        if self.spec.elicitation != McpElicitation::Ask {
            let peer = match self.peer().await {
                Ok(peer) => peer,
                Err(err) => return Made::Unreachable(err),
            };
            let made = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
                Ok(done) => Made::Done(done),
                Err(_) => Made::TimedOut,
            };
            if matches!(made, Made::Done(Err(_))) {
                // The connection may be gone: make a new one next time.
                self.forget(&peer).await;
            }
            return made;
        }
        let call = Arc::new(OneCall::new(answers.to_vec()));
        if self.spec.url.is_none() {
            let _alone = self.lent.one_at_a_time.lock().await;
            let peer = match self.peer().await {
                Ok(peer) => peer,
                Err(err) => return Made::Unreachable(err),
            };
            let made = asked_on(&peer, &self.desk, &call, (params, timeout)).await;
            // Its questions come on the one connection: after a call that
            // did not end with its result, the server starts anew, so a late
            // question never meets the next call.
            if !matches!(made, Made::Done(Ok(_))) {
                self.forget(&peer).await;
            }
            return made;
        }
        let (peer, desk) = match self.borrow().await {
            Ok(lent) => lent,
            Err(err) => return Made::Unreachable(err),
        };
        let made = asked_on(&peer, &desk, &call, (params, timeout)).await;
        // Over HTTP a call's questions come on its own response stream,
        // which its cancel closes: the connection serves the next call (and
        // stays open while the cancel goes out).
        if matches!(made, Made::Done(Ok(_)) | Made::Asked(_)) && !peer.is_transport_closed() {
            let mut idle = self
                .lent
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            idle.push((peer, desk));
        }
        made
    }

    /// Over HTTP, asking a person: the connection made at start is the
    /// first one lent to a call.
    pub(super) async fn lend_first(&self) {
        if self.spec.elicitation != McpElicitation::Ask || self.spec.url.is_none() {
            return;
        }
        if let Some(first) = self.peer.lock().await.take() {
            let mut idle = self
                .lent
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            idle.push((first, self.desk.clone()));
        }
    }

    /// Drops the idle connections: the next calls connect anew, reading the
    /// kept sign-in afresh.
    pub(super) fn flush(&self) {
        let mut idle = (self.lent.idle.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        idle.clear();
    }

    /// An idle connection, or a new one.
    async fn borrow(&self) -> Result<(Arc<Connection>, Arc<Desk>), Error> {
        loop {
            let idle = {
                let mut idle = self
                    .lent
                    .idle
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                idle.pop()
            };
            match idle {
                Some((peer, _)) if peer.is_transport_closed() => {}
                Some(lent) => return Ok(lent),
                None => break,
            }
        }
        let desk = Arc::new(Desk::default());
        if !self.desk.has_person() {
            desk.without_person();
        }
        let answering = Answering::new(self.spec.elicitation, desk.clone());
        Ok((Arc::new(self.connect(answering).await?), desk))
    }
}

/// `call` made on `peer`, whose questions come to `desk`.
async fn asked_on(
    peer: &Connection,
    desk: &Desk,
    call: &Arc<OneCall>,
    (params, timeout): (CallToolRequestParams, Duration),
) -> Made {
    desk.serve(Some(call.clone()));
    // Dropping the call's future cancels it (`notifications/cancelled`).
    let made = tokio::select! {
        biased;
        () = call.asked.notified() => None,
        made = tokio::time::timeout(timeout, peer.call_tool(params)) => Some(made),
    };
    desk.serve(None);
    // Every question handler still waiting lets go (and one about to wait).
    call.cancelled.notify_waiters();
    call.cancelled.notify_one();
    if let Some(Ok(Ok(result))) = made {
        // The call ended with its result: a question asked meanwhile is moot.
        return Made::Done(Ok(result));
    }
    if let Some(question) = call.waiting() {
        tracing::info!(question = %question.message, "an MCP server asks a person: the call is cancelled until the answer is in");
        return Made::Asked(question);
    }
    match made {
        Some(Ok(done)) => Made::Done(done),
        Some(Err(_)) | None => Made::TimedOut,
    }
}
