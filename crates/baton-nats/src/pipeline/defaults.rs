//! What the router gives a task that arrives without a deadline or a
//! budget, and how a process that sends a task past the router (a
//! conversation's turn to the agent that holds it) learns the same.
//!
//! The router writes its defaults into the metadata of its durable consumer
//! `ingress` on the tasks stream when it starts (JetStream consumer metadata,
//! nats-server 2.10 and later). A sender reads them with the consumer's info,
//! which every role that checks whether an agent type is served may read
//! already, and trusts them for a minute. A consumer without them (no router
//! has started yet, or one from before this was written) means: send through
//! the router.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use baton_proto::{Budget, Envelope, Subjects};

/// The metadata keys; an empty value is "none".
const DEADLINE: &str = "baton.default_deadline_ms";
const TOKENS: &str = "baton.default_budget_tokens";
const COST: &str = "baton.default_budget_cost_micros";

/// How long a sender trusts the defaults it read.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// How long a sender trusts that no router published any.
const UNKNOWN_FOR: Duration = Duration::from_secs(10);

/// The router's defaults for tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defaults {
    /// Given, from the moment the task is taken, to a task without a deadline.
    pub deadline: Option<Duration>,
    /// Given part by part (tokens, cost) to a task without them.
    pub budget: Budget,
}

impl Defaults {
    /// `envelope` with the defaults where it sets none, as the router
    /// forwards it.
    pub fn apply(&self, envelope: &mut Envelope) {
        if let (None, Some(default)) = (envelope.deadline, self.deadline) {
            let default = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
            envelope.deadline = Some(baton_proto::now_ms().saturating_add(default));
        }
        let own = envelope.budget.unwrap_or_default();
        let budget = Budget {
            tokens: own.tokens.or(self.budget.tokens),
            cost_micros: own.cost_micros.or(self.budget.cost_micros),
        };
        envelope.budget = (budget != Budget::default()).then_some(budget);
    }

    /// The defaults as consumer metadata.
    pub(crate) fn metadata(&self) -> HashMap<String, String> {
        let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        let deadline = self
            .deadline
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        HashMap::from([
            (DEADLINE.to_owned(), text(deadline)),
            (TOKENS.to_owned(), text(self.budget.tokens)),
            (COST.to_owned(), text(self.budget.cost_micros)),
        ])
    }

    /// The defaults a router wrote into `metadata`; `None` when it wrote
    /// none, or when they do not read as numbers.
    pub(crate) fn from_metadata(metadata: &HashMap<String, String>) -> Option<Self> {
        let number = |key: &str| -> Option<Option<u64>> {
            let text = metadata.get(key)?;
            if text.is_empty() {
                Some(None)
            } else {
                text.parse().ok().map(Some)
            }
        };
        Some(Self {
            deadline: number(DEADLINE)?.map(Duration::from_millis),
            budget: Budget {
                tokens: number(TOKENS)?,
                cost_micros: number(COST)?,
            },
        })
    }
}

/// Writes `defaults` into the metadata of the router's consumer `ingress`
/// when it holds others; the rest of its configuration is left as it is.
/// Routers that share a deployment should share defaults: the last one
/// started is what senders past the router apply.
///
/// # Errors
///
/// When the consumer cannot be read or updated.
pub async fn publish(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    defaults: &Defaults,
) -> Result<(), crate::error::Error> {
    let failed = |what: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        crate::error::Error::with_source(
            crate::error::ErrorKind::JetStream,
            format!(
                "cannot {what} consumer {} with the router's defaults",
                Subjects::INGRESS_CONSUMER
            ),
            err,
        )
    };
    let stream = jetstream
        .get_stream_no_info(subjects.tasks_stream())
        .await
        .map_err(|err| failed("read", err.into()))?;
    let info = stream
        .consumer_info(Subjects::INGRESS_CONSUMER)
        .await
        .map_err(|err| failed("read", err.into()))?;
    if Defaults::from_metadata(&info.config.metadata).as_ref() == Some(defaults) {
        return Ok(());
    }
    let mut config = info.config.clone();
    config.metadata.extend(defaults.metadata());
    stream
        .update_consumer(config)
        .await
        .map_err(|err| failed("update", err.into()))?;
    Ok(())
}

/// The router's defaults as a sender past the router last read them.
#[derive(Debug)]
pub struct Known {
    jetstream: jetstream::Context,
    subjects: Subjects,
    read: Mutex<Option<(Instant, Option<Defaults>)>>,
}

impl Known {
    pub fn new(jetstream: jetstream::Context, subjects: Subjects) -> Self {
        Self {
            jetstream,
            subjects,
            read: Mutex::new(None),
        }
    }

    /// The router's defaults, read at most once a minute; `None` when no
    /// router wrote any, or when they cannot be read (the task then goes
    /// through the router).
    pub async fn get(&self) -> Option<Defaults> {
        let now = Instant::now();
        if let Ok(read) = self.read.lock() {
            if let Some((at, known)) = *read {
                // A router that starts later is looked for sooner.
                let trusted = if known.is_some() {
                    KNOWN_FOR
                } else {
                    UNKNOWN_FOR
                };
                if now.duration_since(at) < trusted {
                    return known;
                }
            }
        }
        match self.ask().await {
            Ok(known) => {
                if let Ok(mut read) = self.read.lock() {
                    *read = Some((now, known));
                }
                known
            }
            Err(err) => {
                // Not remembered: the next task asks again.
                tracing::warn!(error = %err, "cannot read the router's defaults; sending through the router");
                None
            }
        }
    }

    async fn ask(&self) -> Result<Option<Defaults>, async_nats::Error> {
        let stream = self
            .jetstream
            .get_stream_no_info(self.subjects.tasks_stream())
            .await?;
        match stream.consumer_info(Subjects::INGRESS_CONSUMER).await {
            Ok(info) => Ok(Defaults::from_metadata(&info.config.metadata)),
            Err(err)
                if err.kind() == jetstream::context::ConsumerInfoErrorKind::NotFound
                    || err.kind() == jetstream::context::ConsumerInfoErrorKind::StreamNotFound =>
            {
                Ok(None)
            }
            Err(err) => Err(err.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_read_back_from_the_metadata_they_write() {
        let defaults = Defaults {
            deadline: Some(Duration::from_millis(90_000)),
            budget: Budget {
                tokens: Some(4_000),
                cost_micros: None,
            },
        };
        let metadata = defaults.metadata();
        assert_eq!(metadata[DEADLINE], "90000");
        assert_eq!(metadata[COST], "");
        assert_eq!(Defaults::from_metadata(&metadata), Some(defaults));
        assert_eq!(
            Defaults::from_metadata(&Defaults::default().metadata()),
            Some(Defaults::default())
        );
        // A consumer no router wrote defaults into: send through the router.
        assert_eq!(Defaults::from_metadata(&HashMap::new()), None);
        let mut garbled = metadata;
        garbled.insert(TOKENS.to_owned(), "lots".to_owned());
        assert_eq!(Defaults::from_metadata(&garbled), None);
    }

    #[test]
    fn a_task_keeps_what_it_sets_and_takes_the_rest() {
        let defaults = Defaults {
            deadline: Some(Duration::from_secs(60)),
            budget: Budget {
                tokens: Some(4_000),
                cost_micros: Some(500),
            },
        };
        let mut task = Envelope::task("q");
        task.budget = Some(Budget {
            tokens: Some(10),
            cost_micros: None,
        });
        let before = baton_proto::now_ms();
        defaults.apply(&mut task);
        let deadline = task.deadline.unwrap_or_default();
        assert!(
            (before + 60_000..before + 61_000).contains(&deadline),
            "{deadline}"
        );
        assert_eq!(
            task.budget,
            Some(Budget {
                tokens: Some(10),
                cost_micros: Some(500)
            })
        );
        let mut bare = Envelope::task("q");
        Defaults::default().apply(&mut bare);
        assert_eq!((bare.deadline, bare.budget), (None, None));
    }
}
