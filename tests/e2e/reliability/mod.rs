//! What must not be lost or doubled: failures and retries, chaos, deadlines, cancels, budgets, shared rate limits and providers' rate-limit headers, claim-checks, isolation, streaming, replay, tool calls.

pub(crate) mod budgets;
pub(crate) mod cancel;
pub(crate) mod chaos;
pub(crate) mod claims;
pub(crate) mod deadlines;
pub(crate) mod failures;
pub(crate) mod fuzz;
pub(crate) mod isolation;
pub(crate) mod limits;
pub(crate) mod providers;
pub(crate) mod reopen;
pub(crate) mod replay;
pub(crate) mod streaming;
pub(crate) mod tools;
