//! One reservation against a schedule, with no I/O: whether the window
//! lets the call go, and when (at once before anything is known; else at
//! the next slot of the rate, taking turns with the other agent types).

use super::schedule::Schedule;
use super::{ACTIVE_FOR_US, Reserved};

/// What one call asks of the schedule.
pub(super) struct Ask<'a> {
    /// The agent type asking.
    pub(super) agent: &'a str,
    /// The process asking, and its calls in flight.
    pub(super) process: (&'a str, u32),
    /// The call's estimated tokens.
    pub(super) tokens: u64,
    /// The latest its turn may come, unix µs.
    pub(super) until: u64,
}

/// Reserves `ask`'s turn in `schedule` at `now`, aligned already.
pub(super) fn reserve(schedule: &mut Schedule, ask: &Ask<'_>, now: u64) -> Reserved {
    let (me, mine) = ask.process;
    let flying = schedule.in_flight(now, me, mine);
    if !schedule.admits(flying, now) {
        return if now > ask.until {
            Reserved::Late
        } else {
            Reserved::Full
        };
    }
    let sent = schedule.sent.last_second(now);
    let reserved = if schedule.unpaced {
        unpaced(schedule, ask, now)
    } else {
        paced(schedule, ask, now)
    };
    let reserved = match reserved {
        Reserved::Granted(slot, rate, window, _) => Reserved::Granted(slot, rate, window, sent),
        other => other,
    };
    if let Reserved::Granted(..) = reserved {
        schedule.sent.add(1, now);
        schedule.flew(me, mine + 1, 0, now);
    }
    reserved
}

/// Before anything is known: at once (or when the token rate allows).
fn unpaced(schedule: &mut Schedule, ask: &Ask<'_>, now: u64) -> Reserved {
    let mut slot = now;
    let per_token = schedule.per_token();
    if per_token.is_some() {
        slot = slot.max(schedule.tokens);
    }
    if slot > ask.until {
        return Reserved::Late;
    }
    if slot > now.saturating_add(250_000) {
        return Reserved::Early(slot - 250_000);
    }
    if let Some(per_token) = per_token {
        schedule.tokens = slot + (per_token * ask.tokens as f64) as u64;
    }
    Reserved::Granted(slot, 0.0, schedule.window, 0.0)
}

/// Moves the schedule on by one call if its turn falls within the horizon
/// and before `until`. A turn past the horizon still marks this agent type
/// active, so the others make room for it.
fn paced(schedule: &mut Schedule, ask: &Ask<'_>, now: u64) -> Reserved {
    let agent = ask.agent;
    schedule
        .agents
        .retain(|_, next| next.saturating_add(ACTIVE_FOR_US) > now);
    let others = schedule
        .agents
        .keys()
        .filter(|name| name.as_str() != agent)
        .count();
    let mine = schedule.agents.get(agent).copied().unwrap_or(0);
    let due = schedule.next.saturating_sub(schedule.tolerance());
    let mut slot = now.max(due).max(mine);
    if schedule.per_token().is_some() {
        slot = slot.max(schedule.tokens);
    }
    if slot > ask.until {
        return Reserved::Late;
    }
    let horizon = (2 * schedule.interval()).max(250_000);
    if slot > now.saturating_add(horizon) {
        schedule.agents.entry(agent.to_owned()).or_insert(now);
        return Reserved::Early(slot - horizon);
    }
    schedule.grow(now, slot > now);
    let interval = schedule.interval();
    schedule.next = schedule.next.max(slot) + interval;
    schedule
        .agents
        .insert(agent.to_owned(), slot + interval * (others as u64 + 1));
    if let Some(per_token) = schedule.per_token() {
        schedule.tokens = slot + (per_token * ask.tokens as f64) as u64;
    }
    Reserved::Granted(slot, schedule.rate, schedule.window, 0.0)
}
