//! The A2A operations as both bindings call them: JSON-RPC (`rpc`) and
//! HTTP+JSON (`rest`) decode a request, call one of these, and encode the
//! answer or the error their own way.

use a2a::{JsonRpcError, SendMessageRequest, SendMessageResponse, StreamResponse};
use baton_gateway::callers::Caller;
use baton_proto::AgentName;
use futures::Stream;

use crate::Gateway;

/// The stream of a streaming call.
pub(crate) type Updates =
    std::pin::Pin<Box<dyn Stream<Item = Result<StreamResponse, JsonRpcError>> + Send + 'static>>;

impl Gateway {
    /// `SendMessage`: starts (or answers) the task and waits for it to end
    /// or wait for input, unless the request says to return at once.
    pub(crate) async fn send(
        &self,
        target: Option<&AgentName>,
        send: &SendMessageRequest,
        caller: &Caller,
    ) -> Result<SendMessageResponse, JsonRpcError> {
        let crate::ops::Begun {
            session,
            context,
            seen,
            turn,
        } = self.start(target, send, false, caller).await?;
        let immediately = send
            .configuration
            .as_ref()
            .and_then(|c| c.return_immediately)
            .unwrap_or(false);
        // Followed, a conversation's turn closes itself at its end; else the
        // router's keeper does.
        let last = if immediately {
            None
        } else {
            let events = self.events(session, seen, turn).await?;
            self.wait(session, events, self.timeout).await?
        };
        let history = send.configuration.as_ref().and_then(|c| c.history_length);
        let mut task = self.task(session, &context, last.as_ref(), true).await;
        crate::task::trim_history(&mut task, history);
        Ok(
            match crate::task::direct(session, &context, last.as_ref()) {
                Some(message) => SendMessageResponse::Message(message),
                None => SendMessageResponse::Task(task),
            },
        )
    }

    /// `SendStreamingMessage`: starts (or answers) the task, and its updates.
    pub(crate) async fn send_streaming(
        &self,
        target: Option<&AgentName>,
        send: &SendMessageRequest,
        caller: &Caller,
    ) -> Result<Updates, JsonRpcError> {
        let begun = self.start(target, send, true, caller).await?;
        Ok(Box::pin(self.stream(
            begun.session,
            begun.context,
            begun.seen,
            begun.turn,
        )))
    }

    /// `SubscribeToTask`, boxed like `send_streaming`.
    pub(crate) async fn resubscribe(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Updates, JsonRpcError> {
        Ok(Box::pin(self.subscribe(id, caller).await?))
    }
}
