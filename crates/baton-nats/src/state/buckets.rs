//! Every key-value bucket Baton keeps, and how each is configured, in one
//! place: what a session, a conversation or a deployment remembers between
//! messages. A feature opens its bucket with [`Bucket::open`]; nothing else
//! builds a bucket's configuration.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::Subjects;

use crate::error::Error;

/// A week: how long state that only redelivery (longer than any hop is
/// redelivered), replay or a late reader needs is kept.
const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a follower's key lives unless it is written again.
pub(crate) const FOLLOWER_TTL: Duration = Duration::from_secs(30);

/// How long a cancelled session is remembered: longer than any session
/// should live.
const CANCEL_REMEMBERED: Duration = WEEK;

/// A bucket of the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// Conversations' records and their listed turns (no age limit: the
    /// router's keeper removes an idle conversation with what it keeps).
    Conversations,
    /// Conversations' transcripts, an entry per turn (no age limit: they go
    /// with their conversation).
    Transcripts,
    /// Tasks waiting for a person.
    Inbox,
    /// Cancelled sessions, for a week.
    Cancelled,
    /// Delegations waiting for their children, for a week.
    Joins,
    /// Who follows live events: keys that expire unless refreshed, in
    /// memory.
    Followers,
    /// LLM agents' hop journals: model answers and tool results, for a week.
    Journal,
    /// The shared model rate limits' schedules.
    Limits,
    /// The sessions started over A2A, for a week.
    A2aIndex,
    /// Each agent type's rollout of versions (no age limit).
    Rollouts,
}

impl Bucket {
    /// The bucket's name in `subjects`' deployment.
    #[must_use]
    pub fn name(self, subjects: &Subjects) -> String {
        match self {
            Self::Conversations => subjects.conversations_bucket(),
            Self::Transcripts => subjects.transcripts_bucket(),
            Self::Inbox => subjects.inbox_bucket(),
            Self::Cancelled => subjects.cancelled_bucket(),
            Self::Joins => subjects.joins_bucket(),
            Self::Followers => subjects.followers_bucket(),
            Self::Journal => subjects.journal_bucket(),
            Self::Limits => subjects.limits_bucket(),
            Self::A2aIndex => subjects.a2a_bucket(),
            Self::Rollouts => subjects.rollouts_bucket(),
        }
    }

    /// Whether the bucket holds conversation or session text (messages,
    /// model answers, contexts): such a bucket is created compressed (S2),
    /// which JetStream applies to each block of its store once the block is
    /// full, transparently to every reader.
    #[must_use]
    pub fn holds_text(self) -> bool {
        matches!(
            self,
            Self::Conversations | Self::Transcripts | Self::Inbox | Self::Journal | Self::A2aIndex
        )
    }

    /// Its configuration in `subjects`' deployment, with `replicas`.
    #[must_use]
    pub fn config(self, subjects: &Subjects, replicas: usize) -> kv::Config {
        let (description, max_age, storage) = match self {
            Self::Conversations => (
                "conversations (holder, turns, queue, transcript)",
                None,
                None,
            ),
            Self::Transcripts => ("conversations' transcripts, an entry per turn", None, None),
            Self::Inbox => ("tasks waiting for a person", None, None),
            Self::Cancelled => ("cancelled sessions", Some(CANCEL_REMEMBERED), None),
            Self::Joins => ("delegations waiting for their children", Some(WEEK), None),
            Self::Followers => (
                "who follows live events (keys expire unless refreshed)",
                Some(FOLLOWER_TTL),
                Some(jetstream::stream::StorageType::Memory),
            ),
            Self::Journal => (
                "hop journals of LLM agents and agents in code",
                Some(WEEK),
                None,
            ),
            Self::Limits => ("shared model rate limits", None, None),
            Self::A2aIndex => ("the sessions started over A2A", Some(WEEK), None),
            Self::Rollouts => ("each agent type's rollout of versions", None, None),
        };
        kv::Config {
            bucket: self.name(subjects),
            description: format!("Baton: {description}"),
            history: 1,
            max_age: max_age.unwrap_or_default(),
            storage: storage.unwrap_or(jetstream::stream::StorageType::File),
            num_replicas: replicas,
            compression: self.holds_text(),
            ..Default::default()
        }
    }

    /// Opens the bucket, creating it with [`Bucket::config`] when it is
    /// missing; a bucket that exists is used as it is.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub async fn open(
        self,
        jetstream: &jetstream::Context,
        subjects: &Subjects,
        replicas: usize,
    ) -> Result<kv::Store, Error> {
        crate::nats::provision::key_value(jetstream, self.config(subjects, replicas)).await
    }
}

/// The streams of `subjects`' deployment that hold text, each created
/// compressed (S2): the events, the dead letters, the claim-check objects
/// and the streams under every bucket that [`Bucket::holds_text`]. `baton
/// doctor` reports those that are not.
#[must_use]
pub fn text_streams(subjects: &Subjects) -> Vec<String> {
    let buckets = [
        Bucket::Conversations,
        Bucket::Transcripts,
        Bucket::Inbox,
        Bucket::Journal,
        Bucket::A2aIndex,
    ];
    [subjects.events_stream(), subjects.dlq_stream()]
        .into_iter()
        .chain(std::iter::once(format!("OBJ_{}", subjects.claims_bucket())))
        .chain(buckets.map(|bucket| format!("KV_{}", bucket.name(subjects))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bucket_has_its_own_name_and_the_short_lived_ones_an_age() {
        let subjects = Subjects::default();
        let all = [
            Bucket::Conversations,
            Bucket::Transcripts,
            Bucket::Inbox,
            Bucket::Cancelled,
            Bucket::Joins,
            Bucket::Followers,
            Bucket::Journal,
            Bucket::Limits,
            Bucket::A2aIndex,
            Bucket::Rollouts,
        ];
        let mut names: Vec<String> = all.iter().map(|bucket| bucket.name(&subjects)).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let config = Bucket::Followers.config(&subjects, 3);
        assert_eq!(
            (config.max_age, config.storage, config.num_replicas),
            (FOLLOWER_TTL, jetstream::stream::StorageType::Memory, 3)
        );
        assert_eq!(
            Bucket::Transcripts.config(&subjects, 1).max_age,
            Duration::ZERO
        );
        assert_eq!(Bucket::Journal.config(&subjects, 1).history, 1);
    }

    #[test]
    fn the_buckets_that_hold_text_are_compressed_and_listed_as_such() {
        let subjects = Subjects::default();
        assert!(Bucket::Transcripts.config(&subjects, 1).compression);
        assert!(Bucket::Journal.config(&subjects, 1).compression);
        assert!(!Bucket::Followers.config(&subjects, 1).compression);
        assert!(!Bucket::Cancelled.config(&subjects, 1).compression);
        let listed = text_streams(&subjects);
        assert!(
            listed.contains(&"KV_BATON_TRANSCRIPTS".to_owned()),
            "{listed:?}"
        );
        assert!(listed.contains(&subjects.events_stream()));
        assert!(!listed.contains(&"KV_BATON_FOLLOWERS".to_owned()));
    }
}
