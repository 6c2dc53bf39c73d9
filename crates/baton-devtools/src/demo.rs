//! The customer-service demo: five rule-based, deterministic agent types.
//!
//! | agent | tier | does |
//! |---|---|---|
//! | `general_enquiry` | 1 | entry point: answers simple questions, routes the rest |
//! | `order_management` | 1 | order status through an order tool that can fail |
//! | `advanced_order` | 2 | special orders the standard tool cannot read |
//! | `refund` | 2 | refund policy and eligibility |
//! | `human_support` | 3 | the fallback: a person takes the case |

use baton_proto::{Reason, Value};
use baton_worker::{Agent, AgentError, AgentName, Need, Outcome, Profile, RetryPolicy, Task};

/// Names of the demo agent types, entry first, fallback last.
pub const AGENTS: [&str; 5] = [
    "general_enquiry",
    "order_management",
    "advanced_order",
    "refund",
    "human_support",
];

/// The entry agent of the demo.
pub const ENTRY: &str = "general_enquiry";

/// The fallback agent of the demo.
pub const FALLBACK: &str = "human_support";

/// The demo's tasks: each shows one routing case.
pub const TASKS: [(&str, &str); 5] = [
    (
        "knowledge gap",
        "What is your refund policy? I want my money back for order ABC-123.",
    ),
    (
        "tool failure, then success on retry",
        "Where is my order FLK-204?",
    ),
    (
        "tool failure, handed to a tier-2 agent",
        "Where is my special order SPC-777?",
    ),
    (
        "user escalation",
        "This is the third time I ask. Let me speak to a human!",
    ),
    (
        "loop caught by the guard",
        "My order ABC-123 arrived broken. What does the warranty cover?",
    ),
];

/// One demo agent type.
#[derive(Debug, Clone, Copy)]
pub enum Demo {
    /// `general_enquiry`: the entry point.
    GeneralEnquiry,
    /// `order_management`: order status through a tool that can fail.
    OrderManagement,
    /// `advanced_order`: special orders.
    AdvancedOrder,
    /// `refund`: refund policy and eligibility.
    Refund,
    /// `human_support`: the fallback, a person.
    HumanSupport,
}

impl Demo {
    /// The demo agent called `name`.
    pub fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "general_enquiry" => Self::GeneralEnquiry,
            "order_management" => Self::OrderManagement,
            "advanced_order" => Self::AdvancedOrder,
            "refund" => Self::Refund,
            "human_support" => Self::HumanSupport,
            _ => return None,
        })
    }

    /// The agent's tier.
    pub fn tier(self) -> u32 {
        match self {
            Self::GeneralEnquiry | Self::OrderManagement => 1,
            Self::AdvancedOrder | Self::Refund => 2,
            Self::HumanSupport => 3,
        }
    }

    /// What the agent advertises to the registry.
    pub fn profile(self) -> Profile {
        let (capabilities, domains): (&[&str], &[&str]) = match self {
            Self::GeneralEnquiry => (&["general_enquiry"], &["customer_service"]),
            Self::OrderManagement => (&["order_status"], &["orders"]),
            Self::AdvancedOrder => (&["order_status", "special_orders"], &["orders"]),
            Self::Refund => (&["refunds"], &["billing", "orders"]),
            Self::HumanSupport => (&["human", "general_enquiry"], &["customer_service"]),
        };
        let description = match self {
            Self::GeneralEnquiry => "Answers general questions and routes the rest",
            Self::OrderManagement => "Tracks orders: status, shipping, delivery",
            Self::AdvancedOrder => "Handles special orders and order-system failures",
            Self::Refund => "Decides refunds under the shop's policy",
            Self::HumanSupport => "A support specialist who takes escalated cases",
        };
        let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        Profile {
            capabilities: owned(capabilities),
            domains: owned(domains),
            tier: self.tier(),
            description: Some(description.to_owned()),
            tool_schema: None,
        }
    }
}

/// The first order id in `text`, such as `ABC-123`.
fn order_id(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find_map(|word| {
            let (letters, digits) = word.split_once('-')?;
            let ok = letters.len() == 3
                && letters.chars().all(|c| c.is_ascii_uppercase())
                && !digits.is_empty()
                && digits.chars().all(|c| c.is_ascii_digit());
            ok.then(|| word.to_owned())
        })
}

fn mentions(text: &str, words: &[&str]) -> bool {
    let lower = text.to_lowercase();
    words.iter().any(|word| lower.contains(word))
}

impl Agent for Demo {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        let text = task.last_user_message().to_owned();
        let order = order_id(&text);
        match self {
            Self::GeneralEnquiry => Ok(general_enquiry(&text, order)),
            Self::OrderManagement => order_management(&task, &text, order),
            Self::AdvancedOrder => Ok(advanced_order(&task)),
            Self::Refund => Ok(refund(&task, &text)),
            Self::HumanSupport => Ok(human_support(&task)),
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            min_backoff: std::time::Duration::from_millis(100),
            ..RetryPolicy::default()
        }
    }
}

/// The entry point: answers simple questions, routes the rest.
fn general_enquiry(text: &str, order: Option<String>) -> Outcome {
    if mentions(text, &["human", "a person", "manager"]) {
        // Any person of a higher tier; the registry picks which.
        Outcome::escalate_to(Need::capabilities(["human"]), Reason::UserEscalation)
            .say("I understand. I am bringing in a member of our support team.")
            .step(
                "classify",
                "escalation request",
                "the customer asked for a person",
            )
            .into()
    } else if mentions(text, &["refund", "money back"]) {
        let mut handoff = Outcome::handoff(Need::capabilities(["refunds"]), Reason::KnowledgeGap)
            .say("Refund rules are handled by our refund specialist; passing you over.")
            .step(
                "classify",
                "refund question",
                "refund policy is outside general enquiries",
            )
            .next_action("explain the refund policy and check eligibility");
        if let Some(order) = order {
            handoff = handoff.set_var("order_id", order);
        }
        handoff.into()
    } else if let Some(order) = order {
        Outcome::handoff(Need::capabilities(["order_status"]), Reason::OutOfScope)
            .say("Let me get our order team to look at that.")
            .set_var("order_id", order)
            .step(
                "classify",
                "order question",
                "order lookups need the order tool",
            )
            .next_action("look up the order status")
            .into()
    } else {
        Outcome::complete(
            "Thanks for reaching out! Our shop is open 9-17 on weekdays; ask me about an order or a refund.",
        )
        .into()
    }
}

/// Order status, through an order tool that can fail.
fn order_management(task: &Task, text: &str, order: Option<String>) -> Result<Outcome, AgentError> {
    Ok({
        let order = order.unwrap_or_else(|| "unknown".to_owned());
        if mentions(text, &["warranty"]) {
            // Warranty questions are not ours; general enquiry sent it here,
            // and sending it back is exactly the loop the guard stops.
            Outcome::handoff(AgentName::new(ENTRY)?, Reason::OutOfScope)
                .say("Warranty questions are handled by general enquiries.")
                .step(
                    "classify",
                    "warranty question",
                    "not an order status question",
                )
                .into()
        } else if order.starts_with("FLK-") && task.attempt < 2 {
            return Err(AgentError::retryable("order database timed out"));
        } else if order.starts_with("SPC-") {
            Outcome::handoff(Need::capabilities(["special_orders"]), Reason::ToolFailure)
                .say("Our standard order tool cannot read special orders; a specialist will take over.")
                .step("lookup", "tool failed", "special orders are not in the standard order database")
                .set_state("tool_error", "special order not found in standard database")
                .next_action("look up the special order in the manufacturing system")
                .into()
        } else {
            let answer =
                format!("Order {order} shipped yesterday and arrives within 2 business days.");
            Outcome::complete(answer.clone())
                .say(answer)
                .set_var("order_status", "shipped")
                .step(
                    "lookup",
                    "shipped",
                    format!("order tool answered on attempt {}", task.attempt),
                )
                .into()
        }
    })
}

/// The order id an earlier agent put in the shared variables.
fn known_order(task: &Task) -> &str {
    task.variable("order_id")
        .and_then(Value::as_str)
        .unwrap_or("your order")
}

/// Special orders the standard tool cannot read.
fn advanced_order(task: &Task) -> Outcome {
    let order = known_order(task);
    let answer = format!("Special order {order} is being hand-built and ships in 5 business days.");
    Outcome::complete(answer.clone())
        .say(answer)
        .step("lookup", "found", "manufacturing system")
        .into()
}

/// Refund policy and eligibility; in a conversation, once the customer
/// heard it, their next message is the reason, and the label is sent.
fn refund(task: &Task, text: &str) -> Outcome {
    let order = known_order(task);
    if task.variable("refund_eligible").and_then(Value::as_bool) == Some(true) {
        let answer = format!(
            "Sorry to hear it. A return label for {order} is on its way to your email, and the refund follows when the parcel is back. Reason noted: {text}"
        );
        return Outcome::complete(answer.clone())
            .say(answer)
            .set_var("return_label_sent", true)
            .into();
    }
    let answer = format!(
        "Refunds are accepted within 30 days of delivery. {order} qualifies: reply with the reason and we send a return label."
    );
    Outcome::complete(answer.clone())
        .say(answer)
        .set_var("refund_eligible", true)
        .into()
}

/// The fallback: a person takes the case.
fn human_support(task: &Task) -> Outcome {
    let why = task
        .envelope
        .reason
        .as_ref()
        .map_or("none", |reason| reason.as_str())
        .to_owned();
    let answer = format!(
        "A support specialist has taken your case (escalation reason: {why}) and will reply within one business day."
    );
    Outcome::complete(answer.clone()).say(answer).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_order_ids() {
        assert_eq!(
            order_id("Where is my order FLK-204?").as_deref(),
            Some("FLK-204")
        );
        assert_eq!(
            order_id("order ABC-123 arrived").as_deref(),
            Some("ABC-123")
        );
        assert_eq!(order_id("no order here, co-op"), None);
    }
}
