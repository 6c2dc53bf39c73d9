//! A session's path as a picture: agents as nodes (each `TYPE@VERSION`
//! when a version of it ran), hops as labelled edges, loops and
//! escalations highlighted. Plain SVG, drawn on the server.

use baton_proto::{Event, EventType, Hop};
use maud::{Markup, html};

use crate::index::Versions;

/// One edge of the picture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    /// Index of the node it leaves.
    pub(crate) from: usize,
    /// Index of the node it reaches.
    pub(crate) to: usize,
    /// Why control moved (the hop's reason).
    pub(crate) label: String,
    /// `hop`, `loop` (back to an agent already visited), `escalation`
    /// (to a fallback or a person) or `refused` (the loop guard said no).
    pub(crate) class: &'static str,
}

/// Nodes (agent types with their versions, in order of first visit) and
/// edges of a path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Graph {
    /// Agent types, as `TYPE@VERSION` where a version ran: two versions of
    /// one type (a replay onto another) are two nodes.
    pub(crate) nodes: Vec<String>,
    /// Hops between them.
    pub(crate) edges: Vec<Edge>,
}

const ESCALATIONS: &[&str] = &[
    "escalated",
    "no_match",
    "loop_detected",
    "max_hops",
    "human",
];

impl Graph {
    fn node(&mut self, agent: &str) -> usize {
        if let Some(index) = self.nodes.iter().position(|n| n == agent) {
            return index;
        }
        self.nodes.push(agent.to_owned());
        self.nodes.len() - 1
    }

    /// The graph of `path`, plus the routes the loop guard refused and the
    /// person a waiting session went to, from `events`; `versions` names
    /// the version of each agent.
    #[must_use]
    pub(crate) fn of(path: &[Hop], events: &[Event], versions: &Versions) -> Self {
        let mut graph = Self::default();
        let mut previous: Option<usize> = None;
        for hop in path {
            let node = versions.hop_label(hop);
            let seen = graph.nodes.contains(&node);
            let index = graph.node(&node);
            if let Some(from) = previous {
                let label = hop.reason.as_ref().map_or("", |r| r.as_str()).to_owned();
                let class = if seen {
                    "loop"
                } else if ESCALATIONS.contains(&label.as_str()) {
                    "escalation"
                } else {
                    "hop"
                };
                graph.edges.push(Edge {
                    from,
                    to: index,
                    label,
                    class,
                });
            }
            previous = Some(index);
        }
        for event in events {
            let (Some(_), Some(to)) = (&event.agent, &event.to) else {
                continue;
            };
            let class = match event.kind {
                EventType::LoopDetected => "refused",
                EventType::Escalated => "escalation",
                _ => continue,
            };
            let from = graph.node(&versions.event_label(event));
            let to = graph.node(&versions.label(to));
            let label = event.reason.as_ref().map_or("", |r| r.as_str()).to_owned();
            let edge = Edge {
                from,
                to,
                label,
                class,
            };
            if !graph.edges.contains(&edge) {
                graph.edges.push(edge);
            }
        }
        if let Some(waiting) = events.iter().rev().find(|e| e.kind == EventType::Waiting) {
            if let (Some(last), Some(agent)) = (previous, &waiting.agent) {
                let to = graph.node(&versions.label(agent));
                if to != last {
                    let label = "waiting".to_owned();
                    graph.edges.push(Edge {
                        from: last,
                        to,
                        label,
                        class: "escalation",
                    });
                }
            }
        }
        graph
    }
}

const STEP: i64 = 220;
const WIDTH: i64 = 150;
const Y: i64 = 90;

/// The picture of `graph`: nodes in a row in order of first visit, hops
/// to the next node as straight arrows, every other edge as an arc (above
/// when it goes back, below when it skips ahead).
#[must_use]
pub(crate) fn svg(graph: &Graph) -> Markup {
    let width = (graph.nodes.len().max(1) as i64) * STEP + 20;
    let x = |index: usize| 20 + index as i64 * STEP;
    html! {
        svg class="path" role="img" aria-label="the session's path" width=(width) height="190"
            viewBox=(format!("0 0 {width} 190")) xmlns="http://www.w3.org/2000/svg" {
            defs {
                marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
                    markerHeight="7" orient="auto-start-reverse" {
                    path d="M 0 0 L 10 5 L 0 10 z" {}
                }
            }
            @for (n, edge) in graph.edges.iter().enumerate() {
                @let (a, b) = (x(edge.from), x(edge.to));
                @let adjacent = edge.to == edge.from + 1;
                @let (d, lx, ly) = if adjacent {
                    (format!("M {} {Y} L {} {Y}", a + WIDTH, b), (a + WIDTH + b) / 2, Y - 26)
                } else {
                    // Back (and self) edges arc above, skips below; each a little further out.
                    let up = edge.to <= edge.from;
                    let lift = 55 + (n as i64 % 3) * 12;
                    let (sy, cy) = if up { (Y - 18, Y - 18 - lift) } else { (Y + 18, Y + 18 + lift) };
                    let (sx, ex) = (a + WIDTH / 2 + 10, b + WIDTH / 2 - 10);
                    (format!("M {sx} {sy} Q {} {cy} {ex} {sy}", (sx + ex) / 2), (sx + ex) / 2, if up { sy - lift / 2 - 4 } else { sy + lift / 2 + 10 })
                };
                g class=(format!("edge {}", edge.class)) {
                    path d=(d) marker-end="url(#arrow)" {}
                    text x=(lx) y=(ly) text-anchor="middle" { (edge.label) }
                }
            }
            @for (index, node) in graph.nodes.iter().enumerate() {
                g class="node" {
                    rect x=(x(index)) y=(Y - 18) width=(WIDTH) height="36" rx="6" {}
                    text x=(x(index) + WIDTH / 2) y=(Y + 5) text-anchor="middle" { (node) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::Reason;
    use uuid::Uuid;

    fn hop(agent: &str, reason: Option<&str>) -> Hop {
        Hop::new(
            baton_proto::AgentName::unchecked(agent),
            "i",
            reason.map(Reason::parse),
        )
    }

    #[test]
    fn a_return_to_a_visited_agent_is_a_loop_and_a_fallback_an_escalation() {
        let path = [
            hop("front", None),
            hop("back", Some("handoff")),
            hop("front", Some("handoff")),
            hop("human", Some("escalated")),
        ];
        let graph = Graph::of(&path, &[], &Versions::default());
        assert_eq!(graph.nodes, ["front", "back", "human"]);
        let classes: Vec<_> = graph
            .edges
            .iter()
            .map(|e| (e.from, e.to, e.class))
            .collect();
        assert_eq!(
            classes,
            [(0, 1, "hop"), (1, 0, "loop"), (0, 2, "escalation")]
        );
    }

    #[test]
    fn a_refused_route_and_a_waiting_person_are_drawn() {
        let mut refused = Event::new(Uuid::nil(), Uuid::nil(), EventType::LoopDetected);
        refused.agent = Some(baton_proto::AgentName::from_static("b"));
        refused.to = Some(baton_proto::AgentName::from_static("a"));
        refused.reason = Some(Reason::LoopDetected);
        let mut waiting = Event::new(Uuid::nil(), Uuid::nil(), EventType::Waiting);
        waiting.agent = Some(baton_proto::AgentName::from_static("person"));
        let versions = Versions::default();
        let graph = Graph::of(
            &[hop("a", None), hop("b", Some("x"))],
            &[refused, waiting],
            &versions,
        );
        let classes: Vec<_> = graph
            .edges
            .iter()
            .map(|e| (e.from, e.to, e.class))
            .collect();
        assert_eq!(
            classes,
            [(0, 1, "hop"), (1, 0, "refused"), (1, 2, "escalation")]
        );
        let picture = svg(&graph).into_string();
        assert_eq!(picture.matches("<rect").count(), 3);
        assert!(picture.contains("class=\"edge refused\""));
    }

    #[test]
    fn agent_names_are_escaped_in_the_picture() {
        let graph = Graph::of(
            &[hop("<script>x</script>", None)],
            &[],
            &Versions::default(),
        );
        let picture = svg(&graph).into_string();
        assert!(!picture.contains("<script>"));
        assert!(picture.contains("&lt;script&gt;"));
    }

    #[test]
    fn nodes_name_the_version_each_hop_ran_at() {
        let mut versions = Versions::default();
        let ran = |agent: &str, instance: &str, version: &str| {
            let mut event = Event::new(Uuid::new_v4(), Uuid::nil(), EventType::Accepted);
            event.agent = Some(baton_proto::AgentName::unchecked(agent));
            event.instance = Some(instance.into());
            event.version = Some(baton_proto::Version::unchecked(version));
            event
        };
        let helper = crate::index::Versioned::of(["helper"]);
        versions.take(&ran("helper", "v1", "1"), &helper);
        // A replay onto version 2: the first hop stays on 1.
        versions.take(&ran("helper", "v2", "2"), &helper);
        // A spec's hash labels a type that has no rollout: it stays plain.
        versions.take(&ran("front", "f", "e07de5fa828a"), &helper);
        let path = [
            Hop::new(baton_proto::AgentName::from_static("front"), "f", None),
            Hop::new(baton_proto::AgentName::from_static("helper"), "v1", None),
            Hop::new(
                baton_proto::AgentName::from_static("helper"),
                "v2",
                Some(Reason::KnowledgeGap),
            ),
        ];
        let graph = Graph::of(&path, &[], &versions);
        assert_eq!(graph.nodes, ["front", "helper@1", "helper@2"]);
        let picture = svg(&graph).into_string();
        assert!(picture.contains(">helper@2</text>"), "{picture}");
    }
}
