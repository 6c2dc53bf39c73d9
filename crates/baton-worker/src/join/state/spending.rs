//! What a join knows of the session's spending: the delegating hop's, each
//! child's own, and what async reports that kept waiting spent.

use baton_proto::{Envelope, Usage};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::JoinState;

/// What an async report that kept waiting spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waited {
    by: Uuid,
    spent: Usage,
}

/// A child's spending: what the session had spent when it was sent (when
/// that was more than the delegating hop's), and what its branch added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Spend {
    #[serde(default)]
    from: Option<Usage>,
    #[serde(default)]
    own: Option<Usage>,
}

impl JoinState {
    /// What the session spent up to now: the delegating hop's spending
    /// and what each child that answered spent of its own. `None` when
    /// nothing was spent, so a session without usage stays without.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.spent
            .iter()
            .filter_map(|spend| spend.own)
            .chain(self.waited.iter().map(|waited| waited.spent))
            .fold(self.envelope.usage, |sum, own| {
                Some(sum.unwrap_or_default().plus(own))
            })
    }

    /// Notes what the async report that result `by` ran spent and added to
    /// the context, when it kept waiting: `true` when that changed the
    /// state (it spent or added something, and was not noted before).
    pub(crate) fn note_wait(
        &mut self,
        by: Uuid,
        spent: Usage,
        update: &baton_author::ContextUpdate,
    ) -> bool {
        let nothing = spent.total() == 0 && spent.cost_micros == 0 && update.is_empty();
        if nothing || self.waited.iter().any(|waited| waited.by == by) {
            return false;
        }
        self.waited.push(Waited { by, spent });
        update.apply_to(&mut self.envelope.context);
        true
    }

    /// What the session had spent when child `i` was sent: what its
    /// envelope carries.
    pub(crate) fn usage_from(&self, i: usize) -> Option<Usage> {
        self.spent
            .get(i)
            .and_then(|spend| spend.from)
            .or(self.envelope.usage)
    }

    fn spend(&mut self, i: usize) -> &mut Spend {
        if self.spent.len() <= i {
            self.spent.resize(i + 1, Spend::default());
        }
        &mut self.spent[i]
    }

    /// Notes what child `i`'s branch spent of its own, as its `result` says.
    pub(super) fn charge(&mut self, i: usize, result: &Envelope) {
        let Some(spent) = result.usage else { return };
        let own = spent.beyond(self.usage_from(i).unwrap_or_default());
        self.spend(i).own = Some(own);
    }

    /// A child sent now (the next serial or chain step, or a recovery
    /// step: `started` moved from `before`) starts from what the session
    /// spent up to now, its siblings' spending too.
    pub(super) fn begin_from(&mut self, before: usize) {
        let now = self.usage();
        if self.started == before || now == self.envelope.usage {
            return;
        }
        let next = self.started - 1;
        self.spend(next).from = now;
    }
}
