//! Ranking with what was learned: today's score, scaled by a draw from the
//! learned estimate (Thompson sampling), and raised for the `prefer`
//! agent's good collaborators.

use baton_proto::{Candidate, LookupRequest, features};

use crate::learn::{Learner, key};
use crate::rank::{AgentSummary, best_first};

/// Outcomes of a kind of work the candidates need between them before
/// what was learned ranks them.
pub const MIN_EVIDENCE: u32 = 5;

/// How much a perfect past collaboration of the `prefer` agent raises a
/// candidate's score: by up to half.
const PREFER_WEIGHT: f64 = 0.5;

/// The agent types that fit `request`, best first, by today's score and
/// what `learner` learned.
///
/// For each fitting agent type:
///
/// 1. **base**: today's score ([`AgentSummary::score`]): fit, tier, free
///    capacity and success ratio;
/// 2. **learned** (when learning is on, and the candidates have
///    [`MIN_EVIDENCE`] outcomes of this kind of work between them): the share of its recent sessions of
///    this kind of work that were resolved, as a Beta distribution (one
///    success and one failure assumed before any outcome), plus the votes
///    of the past sessions most like the request's `query` or `features`,
///    each counting as up to `vote_weight` sessions by similarity; a draw
///    from it scales the base score. An agent type with little history
///    has a wide distribution and is tried now and then; one that keeps
///    failing is drawn low and chosen less;
/// 3. **notebook** (when the request names `prefer`): a past collaborator
///    of that agent type has its score raised by up to half, by the mean
///    reward of their sessions together and how many there were.
///
/// Every candidate's `why` says how its score came about.
pub fn rank_learned<'a>(
    agents: impl IntoIterator<Item = &'a AgentSummary>,
    request: &LookupRequest,
    learner: &Learner,
    rng: &mut impl rand::Rng,
) -> Vec<Candidate> {
    let work = key(&request.requires, &request.domains);
    let fitting: Vec<&AgentSummary> = agents.into_iter().filter(|a| a.fits(request)).collect();
    // Until the candidates have a few outcomes of this kind of work between
    // them, a draw would be noise: today's ranking decides.
    let seen: u32 = fitting
        .iter()
        .map(|agent| learner.observations(&work, &agent.agent))
        .sum();
    let learning = learner.config().enabled && seen >= MIN_EVIDENCE;
    let neighbours = if learning {
        learner.neighbours(&work, &asked(request))
    } else {
        Vec::new()
    };
    let scored = fitting
        .into_iter()
        .map(|agent| {
            let mut why = agent.why(request);
            let mut score = why.base;
            if learning {
                let (learned, similar) = learner.estimate(&work, &agent.agent, &neighbours, rng);
                score *= learned.sample;
                why.learned = Some(learned);
                why.similar = similar;
            }
            if let Some(prefer) = &request.prefer {
                if let Some(known) = learner.collaborator(prefer, &agent.agent) {
                    let confidence = known.sessions as f64 / (known.sessions as f64 + 2.0);
                    score *= 1.0 + PREFER_WEIGHT * known.reward * confidence;
                    why.notebook = Some(known);
                }
            }
            (score, why, agent)
        })
        .collect();
    best_first(scored)
}

/// What the request's task looks like: its `features`, sorted, once each
/// and at most so many (as [`features`] gives them), or those of its
/// `query`.
fn asked(request: &LookupRequest) -> Vec<u32> {
    if request.features.is_empty() {
        return request.query.as_deref().map(features).unwrap_or_default();
    }
    let mut given = request.features.clone();
    given.sort_unstable();
    given.dedup();
    given.truncate(baton_proto::MAX_FEATURES);
    given
}
