//! A NATS connection as Baton uses it: the client, plus what the server says
//! this user may publish.
//!
//! - **Before publishing**, a worker checks each subject against the
//!   publish rights the server reports for the connected user
//!   (`$SYS.REQ.USER.INFO`, nats-server 2.10 and later). An outcome that
//!   leads to a forbidden subject ends as a `forbidden` dead letter before
//!   anything is written, so no event claims a handoff that never happened.
//! - **As a backstop** (rights changed by a config reload, or not
//!   readable), a [`Connection`] made by [`Connection::connect`] records the
//!   server's asynchronous `-ERR 'Permissions Violation for Publish to
//!   "<subject>"'`, so a refused publish fails at once as
//!   [`ErrorKind::Forbidden`](crate::error::ErrorKind::Forbidden) instead of
//!   timing out and retrying. It also logs the connection's life
//!   (disconnected, reconnected) at `info`.
//! - **At connect**, a user that may not subscribe to the connection's
//!   inbox prefix (where every reply arrives) is an error that says so,
//!   instead of every later request timing out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::{ClientError, ConnectOptions, Event, ServerError, ToServerAddrs};
use baton_proto::footprint::matches;
use tokio::sync::{Notify, OnceCell};

/// A NATS client, and the permissions its server sent.
///
/// Made from a plain [`async_nats::Client`] (`.into()`), it works the same,
/// except that a forbidden publish is only noticed when its PubAck times out.
#[derive(Debug, Clone)]
pub struct Connection {
    client: async_nats::Client,
    permissions: Permissions,
}

impl Connection {
    /// Connects to `servers` with `options`, watching the connection's
    /// events (the options' event callback, if any, is replaced), and asks
    /// the server what this user may publish.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connect`](crate::error::ErrorKind::Connect) when no server can
    /// be reached or the server refuses the credentials;
    /// [`ErrorKind::Forbidden`](crate::error::ErrorKind::Forbidden) when the user
    /// may not subscribe to the connection's inbox prefix, where every reply
    /// arrives (each request would otherwise time out).
    pub async fn connect(
        servers: impl ToServerAddrs,
        options: ConnectOptions,
    ) -> Result<Self, crate::error::Error> {
        let permissions = Permissions::default();
        let seen = permissions.clone();
        let client = options
            .event_callback(move |event| {
                seen.on_event(&event);
                std::future::ready(())
            })
            .connect(servers)
            .await
            .map_err(|err| {
                crate::error::Error::new(crate::error::ErrorKind::Connect, err.to_string())
            })?;
        // The first request subscribes to the inbox: ask for the rights.
        permissions.allows(&client, "").await;
        let inbox = inbox_prefix(&client);
        if let Some(refused) = permissions.inbox_refused(&inbox) {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Forbidden,
                format!(
                    "this NATS user may not subscribe to {refused}, where replies arrive: set --inbox-prefix \
                     (BATON_INBOX_PREFIX) to the prefix its permissions allow, or grant {inbox}.> \
                     (`baton permissions <role>` prints the block each role needs)"
                ),
            ));
        }
        Ok(Self {
            client,
            permissions,
        })
    }

    /// The NATS client.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Whether the server lets this user publish to `subject`, as far as it
    /// said (`true` when it did not say).
    pub async fn may_publish(&self, subject: &str) -> bool {
        self.permissions.allows(&self.client, subject).await
    }

    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    pub fn from_parts(client: async_nats::Client, permissions: Permissions) -> Self {
        Self {
            client,
            permissions,
        }
    }
}

impl From<async_nats::Client> for Connection {
    fn from(client: async_nats::Client) -> Self {
        Self {
            client,
            permissions: Permissions::default(),
        }
    }
}

/// What this user may publish, and the subjects the server refused.
#[derive(Debug, Clone, Default)]
pub struct Permissions(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    refused: Mutex<HashMap<String, Instant>>,
    changed: Notify,
    /// The user's publish rights; `None` when the server did not say.
    rights: OnceCell<Option<PublishRights>>,
}

/// The server's subject for a user's own account and permissions.
const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// A user's publish permissions, as the server reports them.
#[derive(Debug, Default, serde::Deserialize)]
struct PublishRights {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

impl PublishRights {
    fn allows(&self, subject: &str) -> bool {
        let allowed = self.allow.is_empty() || self.allow.iter().any(|p| matches(p, subject));
        allowed && !self.deny.iter().any(|p| matches(p, subject))
    }
}

/// The prefix of `client`'s reply subjects (`_INBOX` unless set).
fn inbox_prefix(client: &async_nats::Client) -> String {
    let inbox = client.new_inbox();
    inbox
        .rsplit_once('.')
        .map_or(inbox.clone(), |(prefix, _)| prefix.to_owned())
}

/// Key under which a refused subscription is remembered.
const SUBSCRIPTION: &str = "subscribe ";

/// How many refused subjects are remembered before old ones are dropped.
const REMEMBERED: usize = 1024;

impl Permissions {
    fn on_event(&self, event: &Event) {
        match event {
            Event::ServerError(ServerError::Other(text)) => match refused_subject(text) {
                Some(subject) => {
                    tracing::warn!(%subject, "the NATS server refused a publish: this user's permissions do not allow it (`baton permissions` prints the block a role needs)");
                    self.record(subject);
                }
                None => match refused_subscription(text) {
                    Some(subject) => {
                        tracing::warn!(%subject, "the NATS server refused a subscription: this user's permissions do not allow it (`baton permissions` prints the block a role needs)");
                        self.record(&format!("{SUBSCRIPTION}{subject}"));
                    }
                    None => tracing::warn!(error = %text, "NATS server error"),
                },
            },
            Event::ServerError(err) => tracing::warn!(error = %err, "NATS server error"),
            Event::ClientError(ClientError::MaxReconnects) => {
                tracing::warn!("NATS connection lost for good: reconnects exhausted");
            }
            // A lost connection shows as an I/O error before it reconnects.
            Event::ClientError(err) => tracing::info!(error = %err, "NATS connection"),
            Event::SlowConsumer(sid) => {
                tracing::warn!(subscription = sid, "slow consumer: messages were dropped");
            }
            other => tracing::info!(event = %other, "NATS connection"),
        }
    }

    fn record(&self, subject: &str) {
        let now = Instant::now();
        let mut refused = self
            .0
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if refused.len() >= REMEMBERED {
            refused.retain(|_, at| now.duration_since(*at) < Duration::from_secs(60));
        }
        refused.insert(subject.to_owned(), now);
        drop(refused);
        self.0.changed.notify_waiters();
    }

    fn refused_after(&self, subject: &str, since: Instant) -> bool {
        self.0
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(subject)
            .is_some_and(|at| *at >= since)
    }

    /// A refused subscription under the inbox prefix `inbox`, if any.
    fn inbox_refused(&self, inbox: &str) -> Option<String> {
        let refused = self
            .0
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        refused
            .keys()
            .filter_map(|key| key.strip_prefix(SUBSCRIPTION))
            .find(|subject| {
                subject
                    .strip_prefix(inbox)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
            .map(str::to_owned)
    }

    /// Whether this user may publish to `subject`, as far as the server
    /// said (asked once per connection; `true` when it cannot tell).
    pub async fn allows(&self, client: &async_nats::Client, subject: &str) -> bool {
        let rights = self.0.rights.get_or_init(|| self.fetch(client)).await;
        rights.as_ref().is_none_or(|rights| rights.allows(subject))
    }

    async fn fetch(&self, client: &async_nats::Client) -> Option<PublishRights> {
        #[derive(serde::Deserialize)]
        struct Reply {
            data: Data,
        }
        #[derive(serde::Deserialize)]
        struct Data {
            #[serde(default)]
            permissions: Option<Rights>,
        }
        #[derive(serde::Deserialize)]
        struct Rights {
            #[serde(default)]
            publish: Option<PublishRights>,
        }
        let since = Instant::now();
        let inbox = inbox_prefix(client);
        let asked =
            tokio::time::timeout(Duration::from_secs(2), client.request(USER_INFO, "".into()));
        tokio::pin!(asked);
        // The server may refuse the request, or the inbox it answers to.
        let reply = loop {
            let changed = self.0.changed.notified();
            if self.refused_after(USER_INFO, since) || self.inbox_refused(&inbox).is_some() {
                return None;
            }
            tokio::select! {
                reply = &mut asked => break reply,
                () = changed => {}
            }
        };
        let reply = match reply {
            Ok(Ok(reply)) => reply,
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "the server did not say what this user may publish");
                return None;
            }
            Err(_) => return None,
        };
        match serde_json::from_slice::<Reply>(&reply.payload) {
            Ok(reply) => Some(
                reply
                    .data
                    .permissions
                    .and_then(|rights| rights.publish)
                    .unwrap_or_default(),
            ),
            Err(err) => {
                tracing::debug!(error = %err, "unreadable user info");
                None
            }
        }
    }

    /// Resolves once the server refuses a publish to `subject` sent at or
    /// after `since`; never, if it does not.
    pub(crate) async fn refused(&self, subject: &str, since: Instant) {
        loop {
            let changed = self.0.changed.notified();
            if self.refused_after(subject, since) {
                return;
            }
            changed.await;
        }
    }
}

/// The subject of a `Permissions Violation for Subscription to "<subject>"` error.
fn refused_subscription(text: &str) -> Option<&str> {
    violation(text, "Subscription")
}

/// The subject of a `Permissions Violation for Publish to "<subject>"` error.
fn refused_subject(text: &str) -> Option<&str> {
    violation(text, "Publish")
}

/// The subject of a `Permissions Violation for <what> to "<subject>"` error.
fn violation<'t>(text: &'t str, what: &str) -> Option<&'t str> {
    let rest = text
        .strip_prefix("Permissions Violation for ")?
        .strip_prefix(what)?
        .strip_prefix(" to ")?;
    let subject = rest.trim().trim_matches('"');
    (!subject.is_empty()).then_some(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_refused_subject() {
        assert_eq!(
            refused_subject(r#"Permissions Violation for Publish to "baton.agent.refund""#),
            Some("baton.agent.refund")
        );
        assert_eq!(
            refused_subject(r#"Permissions Violation for Subscription to "_INBOX.>""#),
            None
        );
        assert_eq!(refused_subject("Authorization Violation"), None);
    }

    #[test]
    fn matches_subjects_as_nats_does() {
        assert!(matches("baton.agent.refund", "baton.agent.refund"));
        assert!(matches("baton.agent.*", "baton.agent.refund"));
        assert!(!matches("baton.agent.*", "baton.agent.refund.x"));
        assert!(matches("baton.>", "baton.agent.refund"));
        assert!(!matches("baton.>", "baton"));
        assert!(!matches("baton.agent", "baton.agent.refund"));
        assert!(!matches("baton.agent.refund", "baton.agent"));
        let rights = PublishRights {
            allow: vec!["baton.agent.*".into(), "baton.events.>".into()],
            deny: vec!["baton.agent.payments".into()],
        };
        assert!(rights.allows("baton.agent.refund"));
        assert!(!rights.allows("baton.agent.payments"));
        assert!(!rights.allows("baton.ingress"));
        assert!(PublishRights::default().allows("anything.at.all"));
    }

    #[tokio::test]
    async fn a_refusal_wakes_the_waiter_of_its_subject_only() {
        let permissions = Permissions::default();
        let since = Instant::now();
        let waiting = tokio::spawn({
            let permissions = permissions.clone();
            async move { permissions.refused("baton.agent.b", since).await }
        });
        permissions.record("baton.agent.a");
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        permissions.record("baton.agent.b");
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter wakes")
            .expect("the waiter does not panic");
        let later = Instant::now();
        assert!(!permissions.refused_after("baton.agent.b", later + Duration::from_secs(1)));
    }
}
