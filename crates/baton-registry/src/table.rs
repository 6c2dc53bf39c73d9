//! The live instances, from heartbeats, grouped by agent type.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use baton_proto::{AgentName, Heartbeat};
use tokio::time::Instant;

use crate::rank::AgentSummary;

/// Heartbeats an instance may miss before it counts as gone.
const MISSED_BEATS: u32 = 3;

/// An agent type's consumer backlog, as JetStream reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Messages not yet delivered to any instance.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub ack_pending: u64,
}

#[derive(Debug, Clone)]
struct Seen {
    beat: Heartbeat,
    received: Instant,
    expires: Instant,
}

/// Every live worker instance, by agent type, plus each type's backlog.
///
/// An instance is live until three of its heartbeat intervals pass without a
/// heartbeat. Its interval is the one it states (`interval_ms`), else the
/// table's default. Time is passed in, so the table is tested without sleeping.
#[derive(Debug, Clone)]
pub struct Table {
    agents: BTreeMap<baton_proto::AgentName, BTreeMap<String, Seen>>,
    backlogs: HashMap<String, Backlog>,
    default_interval: Duration,
    /// The summaries as of the last change, and until when they hold (the
    /// first expiry among the instances they count). Lookups far outnumber
    /// heartbeats, so they are summed once per change, not once per lookup.
    cache: Option<(Instant, Vec<AgentSummary>)>,
}

impl Table {
    /// An empty table; `default_interval` applies to heartbeats that do not state theirs.
    #[must_use]
    pub fn new(default_interval: Duration) -> Self {
        Self {
            agents: BTreeMap::new(),
            backlogs: HashMap::new(),
            default_interval,
            cache: None,
        }
    }

    /// Records a heartbeat received at `now`. Heartbeats with an invalid agent
    /// type name are ignored (and reported as `false`).
    pub fn record(&mut self, beat: Heartbeat, now: Instant) -> bool {
        if AgentName::new(beat.agent.as_str()).is_err() || beat.instance.is_empty() {
            return false;
        }
        let interval = beat
            .interval_ms
            .filter(|ms| *ms > 0)
            .map_or(self.default_interval, Duration::from_millis);
        let seen = Seen {
            expires: now + interval * MISSED_BEATS,
            received: now,
            beat,
        };
        self.agents
            .entry(seen.beat.agent.clone())
            .or_default()
            .insert(seen.beat.instance.clone(), seen);
        self.cache = None;
        true
    }

    /// Replaces the backlogs of every agent type.
    pub fn set_backlogs(&mut self, backlogs: HashMap<String, Backlog>) {
        self.backlogs = backlogs;
        self.cache = None;
    }

    /// Forgets instances that are gone at `now`, and agent types left with none.
    pub fn expire(&mut self, now: Instant) {
        for instances in self.agents.values_mut() {
            instances.retain(|_, seen| seen.expires > now);
        }
        self.agents.retain(|_, instances| !instances.is_empty());
        self.cache = None;
    }

    /// Like [`Table::summaries`], from a cache that holds until the table
    /// changes or one of the counted instances expires.
    pub fn current(&mut self, now: Instant) -> &[AgentSummary] {
        if self.cache.as_ref().is_none_or(|(until, _)| now >= *until) {
            let until = self
                .agents
                .values()
                .flat_map(BTreeMap::values)
                .map(|seen| seen.expires)
                .filter(|expires| *expires > now)
                .min()
                .unwrap_or(now + self.default_interval);
            self.cache = Some((until, self.summaries(now)));
        }
        self.cache.as_ref().map_or(&[], |(_, summaries)| summaries)
    }

    /// The agent types known now (with or without live instances), by name.
    pub fn agent_types(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(|agent| agent.as_str())
    }

    /// Each agent type with a live instance at `now`, summed up, by name.
    ///
    /// Capabilities, domains and tier come from the type's most recent
    /// heartbeat, so a rolling upgrade takes effect as it rolls.
    #[must_use]
    pub fn summaries(&self, now: Instant) -> Vec<AgentSummary> {
        self.agents
            .iter()
            .filter_map(|(agent, instances)| {
                let live: Vec<&Seen> = instances.values().filter(|s| s.expires > now).collect();
                let newest = live.iter().max_by_key(|seen| seen.received)?;
                let backlog = self
                    .backlogs
                    .get(agent.as_str())
                    .copied()
                    .unwrap_or_default();
                let sum = |f: fn(&Heartbeat) -> u64| live.iter().map(|s| f(&s.beat)).sum::<u64>();
                Some(AgentSummary {
                    agent: agent.clone(),
                    tier: newest.beat.tier,
                    capabilities: newest.beat.capabilities.clone(),
                    domains: newest.beat.domains.clone(),
                    instances: u32::try_from(live.len()).unwrap_or(u32::MAX),
                    in_flight: sum(|b| u64::from(b.in_flight)),
                    capacity: sum(|b| u64::from(b.max_concurrency)),
                    pending: backlog.pending,
                    ack_pending: backlog.ack_pending,
                    processed: sum(|b| b.processed),
                    failed: sum(|b| b.failed),
                    description: newest.beat.description.clone(),
                    tool_schema: newest.beat.tool_schema.clone(),
                    versions: versions(&live),
                })
            })
            .collect()
    }
}

/// The versions `live` instances run, with how many run each, by version.
fn versions(live: &[&Seen]) -> BTreeMap<baton_proto::Version, u32> {
    let mut counted = BTreeMap::new();
    for seen in live {
        if let Some(version) = &seen.beat.version {
            *counted.entry(version.clone()).or_default() += 1;
        }
    }
    counted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(agent: &str, instance: &str, in_flight: u32) -> Heartbeat {
        Heartbeat {
            agent: baton_proto::AgentName::unchecked(agent),
            instance: instance.into(),
            capabilities: vec!["orders".into()],
            domains: vec![],
            tier: 1,
            in_flight,
            max_concurrency: 4,
            processed: 10,
            failed: 1,
            at: 0,
            interval_ms: Some(1000),
            description: None,
            tool_schema: None,
            version: None,
            extra: baton_proto::Map::new(),
        }
    }

    #[test]
    fn instances_are_summed_per_agent_type() {
        let now = Instant::now();
        let mut table = Table::new(Duration::from_secs(2));
        assert!(table.record(beat("orders", "a", 1), now));
        assert!(table.record(beat("orders", "b", 3), now));
        assert!(table.record(beat("refund", "c", 0), now));
        table.set_backlogs(HashMap::from([(
            "orders".to_owned(),
            Backlog {
                pending: 5,
                ack_pending: 4,
            },
        )]));
        let summaries = table.summaries(now);
        assert_eq!(summaries.len(), 2);
        let orders = &summaries[0];
        assert_eq!(
            (
                orders.agent.as_str(),
                orders.instances,
                orders.in_flight,
                orders.capacity
            ),
            ("orders", 2, 4, 8)
        );
        assert_eq!((orders.processed, orders.failed), (20, 2));
        assert_eq!((orders.pending, orders.ack_pending), (5, 4));
        assert_eq!(summaries[1].pending, 0);
    }

    #[test]
    fn an_instance_is_gone_after_three_missed_intervals() {
        let start = Instant::now();
        let mut table = Table::new(Duration::from_secs(2));
        table.record(beat("orders", "a", 0), start);
        // Its own interval (1 s) applies, not the table's default.
        let just_before = start + Duration::from_millis(2999);
        assert_eq!(table.summaries(just_before)[0].instances, 1);
        let after = start + Duration::from_millis(3000);
        assert!(table.summaries(after).is_empty());
        table.expire(after);
        assert_eq!(table.agent_types().count(), 0);
    }

    #[test]
    fn a_fresh_heartbeat_keeps_an_instance_alive_and_updates_it() {
        let start = Instant::now();
        let mut table = Table::new(Duration::from_secs(2));
        table.record(beat("orders", "a", 0), start);
        let mut newer = beat("orders", "a", 2);
        newer.tier = 2;
        table.record(newer, start + Duration::from_secs(2));
        let summary = &table.summaries(start + Duration::from_secs(4))[0];
        assert_eq!(
            (summary.instances, summary.in_flight, summary.tier),
            (1, 2, 2)
        );
    }

    #[test]
    fn the_cache_follows_heartbeats_and_expiry() {
        let start = Instant::now();
        let mut table = Table::new(Duration::from_secs(2));
        assert!(table.current(start).is_empty());
        table.record(beat("orders", "a", 0), start);
        assert_eq!(table.current(start)[0].in_flight, 0);
        table.record(beat("orders", "a", 5), start + Duration::from_millis(10));
        assert_eq!(
            table.current(start + Duration::from_millis(10))[0].in_flight,
            5
        );
        // No change to the table, but the instance's time is up.
        assert!(table.current(start + Duration::from_secs(4)).is_empty());
    }

    #[test]
    fn heartbeats_without_an_interval_use_the_default_and_bad_names_are_ignored() {
        let start = Instant::now();
        let mut table = Table::new(Duration::from_secs(2));
        let mut old_style = beat("orders", "a", 0);
        old_style.interval_ms = None;
        table.record(old_style, start);
        assert_eq!(
            table.summaries(start + Duration::from_millis(5999)).len(),
            1
        );
        assert!(table.summaries(start + Duration::from_secs(6)).is_empty());
        assert!(!table.record(beat("Not.Valid", "a", 0), start));
        assert!(!table.record(beat("orders", "", 0), start));
    }
}
