//! What a component does on NATS, as subject patterns: the subjects it
//! publishes to (a JetStream API call is a publish to `$JS.API.…`), those it
//! subscribes to, and whether it answers requests.
//!
//! Each component declares its footprint next to the code that makes the
//! calls; a role's footprint is the union of its components' footprints, and
//! `baton permissions` prints it as a NATS permissions block. The building
//! blocks here name the JetStream API subjects behind each kind of use.

use std::collections::BTreeSet;

/// Subject patterns one component or role uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Subjects it publishes to, JetStream API calls included.
    pub publish: BTreeSet<String>,
    /// Subjects it subscribes to.
    pub subscribe: BTreeSet<String>,
    /// Whether it answers requests on their reply subjects.
    pub responds: bool,
    /// Whether it answers some requests with many replies (the router's
    /// live relay), within [`RELAY_REPLIES`] replies and [`RELAY_EXPIRES`].
    pub relays: bool,
    /// What stays open, and why.
    pub notes: Vec<String>,
}

/// The most replies a relaying role may send to one request.
pub const RELAY_REPLIES: u32 = 100_000;
/// How long after a request a relaying role may still reply to it.
pub const RELAY_EXPIRES: &str = "1m";

/// A JetStream API subject, `$JS.API.<what>`.
#[must_use]
pub fn api(what: impl std::fmt::Display) -> String {
    format!("$JS.API.{what}")
}

impl Footprint {
    /// Nothing yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Also publishes to `subjects`.
    #[must_use]
    pub fn publishes<I: IntoIterator<Item = S>, S: Into<String>>(mut self, subjects: I) -> Self {
        self.publish.extend(subjects.into_iter().map(Into::into));
        self
    }

    /// Also subscribes to `subjects`.
    #[must_use]
    pub fn subscribes<I: IntoIterator<Item = S>, S: Into<String>>(mut self, subjects: I) -> Self {
        self.subscribe.extend(subjects.into_iter().map(Into::into));
        self
    }

    /// Answers requests on their reply subjects.
    #[must_use]
    pub fn responding(mut self) -> Self {
        self.responds = true;
        self
    }

    /// Answers some requests with many replies, for a while.
    #[must_use]
    pub fn relaying(mut self) -> Self {
        self.responds = true;
        self.relays = true;
        self
    }

    /// Notes what stays open, and why.
    #[must_use]
    pub fn noting(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The union of `self` and `other`.
    #[must_use]
    pub fn with(mut self, other: Self) -> Self {
        self.publish.extend(other.publish);
        self.subscribe.extend(other.subscribe);
        self.responds |= other.responds;
        self.relays |= other.relays;
        for note in other.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        self
    }

    /// What every JetStream user needs: account info, the stream list (to
    /// tell a missing stream from one electing its leader), its own
    /// permissions, and its replies on `inbox`.
    #[must_use]
    pub fn jetstream_user(inbox: &str) -> Self {
        Self::new()
            .publishes([api("INFO"), api("STREAM.NAMES"), USER_INFO.to_owned()])
            .subscribes([format!("{inbox}.>")])
    }

    /// Reading a stream's info.
    #[must_use]
    pub fn stream_info(stream: &str) -> Self {
        Self::new().publishes([api(format_args!("STREAM.INFO.{stream}"))])
    }

    /// Creating a stream and raising its settings.
    #[must_use]
    pub fn stream_admin(stream: &str) -> Self {
        Self::stream_info(stream).publishes([
            api(format_args!("STREAM.CREATE.{stream}")),
            api(format_args!("STREAM.UPDATE.{stream}")),
        ])
    }

    /// Reading a stream from the start through ordered consumers.
    #[must_use]
    pub fn stream_reader(stream: &str) -> Self {
        Self::new().publishes([
            api(format_args!("CONSUMER.CREATE.{stream}")),
            api(format_args!("CONSUMER.CREATE.{stream}.>")),
            api(format_args!("CONSUMER.DELETE.{stream}.>")),
            api(format_args!("CONSUMER.MSG.NEXT.{stream}.>")),
            api(format_args!("STREAM.MSG.GET.{stream}")),
        ])
    }

    /// Pulling from durable consumer `consumer` of `stream` and acking.
    #[must_use]
    pub fn puller(stream: &str, consumer: &str) -> Self {
        Self::new().publishes([
            api(format_args!("CONSUMER.INFO.{stream}.{consumer}")),
            api(format_args!("CONSUMER.CREATE.{stream}.{consumer}")),
            api(format_args!("CONSUMER.CREATE.{stream}.{consumer}.>")),
            api(format_args!("CONSUMER.DURABLE.CREATE.{stream}.{consumer}")),
            api(format_args!("CONSUMER.MSG.NEXT.{stream}.{consumer}")),
            format!("$JS.ACK.{stream}.{consumer}.>"),
            format!("$JS.ACK.*.*.{stream}.{consumer}.>"),
        ])
    }

    /// Reading and writing key-value bucket `bucket`, creating it if missing.
    #[must_use]
    pub fn kv(bucket: &str) -> Self {
        let stream = format!("KV_{bucket}");
        Self::new().publishes([
            api(format_args!("STREAM.INFO.{stream}")),
            api(format_args!("STREAM.CREATE.{stream}")),
            api(format_args!("STREAM.MSG.GET.{stream}")),
            api(format_args!("DIRECT.GET.{stream}.>")),
            format!("$KV.{bucket}.>"),
        ])
    }

    /// Listing or watching the keys of bucket `bucket` (ordered consumers).
    #[must_use]
    pub fn kv_watcher(bucket: &str) -> Self {
        let stream = format!("KV_{bucket}");
        Self::new().publishes([
            api(format_args!("STREAM.INFO.{stream}")),
            api(format_args!("STREAM.CREATE.{stream}")),
            api(format_args!("CONSUMER.CREATE.{stream}")),
            api(format_args!("CONSUMER.CREATE.{stream}.>")),
            api(format_args!("CONSUMER.DELETE.{stream}.>")),
            api(format_args!("STREAM.MSG.GET.{stream}")),
            api(format_args!("DIRECT.GET.{stream}.>")),
        ])
    }

    /// Reading and writing object store `bucket`, creating it if missing.
    #[must_use]
    pub fn object_store(bucket: &str) -> Self {
        let stream = format!("OBJ_{bucket}");
        Self::new().publishes([
            api(format_args!("STREAM.INFO.{stream}")),
            api(format_args!("STREAM.CREATE.{stream}")),
            api(format_args!("STREAM.MSG.GET.{stream}")),
            api(format_args!("STREAM.PURGE.{stream}")),
            api(format_args!("DIRECT.GET.{stream}.>")),
            api(format_args!("CONSUMER.CREATE.{stream}")),
            api(format_args!("CONSUMER.CREATE.{stream}.>")),
            api(format_args!("CONSUMER.DELETE.{stream}.>")),
            format!("$O.{bucket}.>"),
        ])
    }

    /// Whether `subject` is one this footprint publishes to.
    #[must_use]
    pub fn allows_publish(&self, subject: &str) -> bool {
        self.publish.iter().any(|pattern| matches(pattern, subject))
    }

    /// Whether `subject` is one this footprint subscribes to.
    #[must_use]
    pub fn allows_subscribe(&self, subject: &str) -> bool {
        self.subscribe
            .iter()
            .any(|pattern| matches(pattern, subject))
    }
}

/// The request that reads a user's own permissions.
pub const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// Whether NATS subject `pattern` (`*` one token, `>` the rest) covers
/// `subject`; a wildcard in `subject` must be matched by the same or wider.
#[must_use]
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut wanted = subject.split('.');
    for token in pattern.split('.') {
        match (token, wanted.next()) {
            (">", Some(_)) => return true,
            ("*", Some(got)) if got != ">" => {}
            (token, Some(got)) if token == got => {}
            _ => return false,
        }
    }
    wanted.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_nats_does() {
        assert!(matches("baton.agent.*", "baton.agent.triage"));
        assert!(!matches("baton.agent.*", "baton.agent.a.b"));
        assert!(matches("baton.events.>", "baton.events.a.b"));
        assert!(!matches("baton.events.>", "baton.events"));
        assert!(matches("baton.agent.*", "baton.agent.*"));
        assert!(!matches("baton.agent.triage", "baton.agent.*"));
        assert!(!matches("baton.agent.*", "baton.agent.>"));
    }

    #[test]
    fn a_union_keeps_both_sides_and_one_copy_of_a_note() {
        let a = Footprint::new().publishes(["a"]).noting("open");
        let b = Footprint::new()
            .subscribes(["b"])
            .responding()
            .noting("open");
        let both = a.with(b);
        assert!(both.allows_publish("a") && both.allows_subscribe("b") && both.responds);
        assert_eq!(both.notes, ["open"]);
    }
}
