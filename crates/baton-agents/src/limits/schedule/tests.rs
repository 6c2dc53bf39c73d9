use super::*;

const S: u64 = 1_000_000;

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn fresh(configured: Configured) -> Schedule {
    let mut schedule = Schedule::default();
    schedule.settle(configured, 10 * S);
    schedule
}

#[test]
fn a_configured_limit_is_reached_by_slow_start_and_paced_a_little_under() {
    let configured = Configured {
        rps: Some(10.0),
        tps: Some(1000.0),
    };
    let mut schedule = fresh(configured);
    assert!(near(schedule.rate, START_RPS), "{}", schedule.rate);
    assert!(schedule.starting);
    assert_eq!(schedule.source, Source::Configured);
    assert!(near(schedule.ceiling, 10.0));
    assert!(near(schedule.token_rate, 1000.0));
    // Doubling stops at the ceiling, and slow start with it.
    schedule.grow(11 * S, true);
    assert!(near(schedule.rate, 10.0 * MARGIN), "{}", schedule.rate);
    assert!(!schedule.starting);
    assert_eq!(schedule.interval(), (1e6 / (10.0 * MARGIN)) as u64);
    // A ceiling under the start rate is where it starts.
    let low = fresh(Configured {
        rps: Some(1.0),
        tps: None,
    });
    assert!(near(low.rate, MARGIN));
    assert!(!low.starting);
}

#[test]
fn with_nothing_known_the_rate_starts_low_and_doubles_each_second_callers_wait() {
    let mut schedule = fresh(Configured::default());
    assert!(near(schedule.rate, START_RPS));
    assert_eq!(schedule.source, Source::Adaptive);
    schedule.grow(11 * S, true);
    assert!(near(schedule.rate, 2.0 * START_RPS), "{}", schedule.rate);
    // A quiet second does not count, and a long one counts as one.
    schedule.grow(12 * S, false);
    assert!(near(schedule.rate, 2.0 * START_RPS));
    schedule.grow(20 * S, true);
    assert!(near(schedule.rate, 4.0 * START_RPS), "{}", schedule.rate);
    // Half a second since the last wait: × √2.
    schedule.grow(20 * S + S / 2, true);
    assert!(
        near(schedule.rate, 4.0 * START_RPS * 2f64.sqrt()),
        "{}",
        schedule.rate
    );
    // One call may go an interval early while starting, none after a cut.
    assert_eq!(schedule.tolerance(), schedule.interval());
    schedule.refuse(21 * S, 21 * S);
    assert_eq!(schedule.tolerance(), 0);
}

#[test]
fn a_429_cuts_once_per_burst_and_the_rate_then_climbs_additively() {
    let mut schedule = fresh(Configured::default());
    schedule.rate = 16.0;
    // Out of slow start: × 0.7.
    schedule.refuse(10 * S, 10 * S + 100);
    assert!(near(schedule.rate, 16.0 * 0.7), "{}", schedule.rate);
    assert!(!schedule.starting);
    // A call that went out before the cut is of the same burst: counted,
    // not cut again.
    schedule.refuse(10 * S + 50, 10 * S + 200);
    assert!(near(schedule.rate, 16.0 * 0.7));
    assert_eq!(schedule.refused, 2);
    // The callers that would meet the same full window wait one interval.
    assert_eq!(schedule.next, 10 * S + 100 + schedule.interval());
    // It climbs 2.5 % of the rate before the cut a second.
    let before = schedule.rate;
    schedule.grow(11 * S + 100, true);
    assert!(
        near(schedule.rate, before + 16.0 * 0.025),
        "{}",
        schedule.rate
    );
    // A call sent after the cut and refused cuts again, × 0.85.
    let before = schedule.rate;
    schedule.refuse(11 * S + 200, 11 * S + 300);
    assert!(near(schedule.rate, before * 0.85), "{}", schedule.rate);
}

#[test]
fn a_ceiling_caps_the_climb_and_a_429_below_it_still_cuts() {
    let mut schedule = fresh(Configured {
        rps: Some(10.0),
        tps: None,
    });
    for second in 11..20 {
        schedule.grow(second * S, true);
    }
    assert!(near(schedule.rate, 10.0 * MARGIN));
    schedule.refuse(20 * S, 20 * S + 1);
    assert!(near(schedule.rate, 10.0 * MARGIN * 0.85));
    // The next settle keeps the cut rate: a ceiling is not a promise.
    schedule.settle(
        Configured {
            rps: Some(10.0),
            tps: None,
        },
        20 * S + 2,
    );
    assert!(near(schedule.rate, 10.0 * MARGIN * 0.85));
    assert_eq!(schedule.source, Source::Configured);
}

#[test]
fn headers_give_the_rate_at_once_and_the_lower_of_heard_and_configured_wins() {
    let mut schedule = fresh(Configured::default());
    schedule.hear(
        Heard {
            rps: Some(10.0),
            tps: Some(500.0),
            empty_for_us: None,
        },
        11 * S,
    );
    assert!(near(schedule.rate, 10.0 * MARGIN));
    assert_eq!(schedule.source, Source::Headers);
    assert!(!schedule.starting);
    schedule.settle(Configured::default(), 11 * S);
    assert!(near(schedule.ceiling, 10.0));
    assert!(near(schedule.token_rate, 500.0));
    // Configured higher than heard: the heard rate is the ceiling.
    schedule.settle(
        Configured {
            rps: Some(20.0),
            tps: None,
        },
        11 * S,
    );
    assert_eq!(schedule.source, Source::Headers);
    assert!(near(schedule.ceiling, 10.0));
    // Configured lower: the configured one.
    schedule.settle(
        Configured {
            rps: Some(5.0),
            tps: None,
        },
        11 * S,
    );
    assert_eq!(schedule.source, Source::Configured);
    assert!(near(schedule.rate, 5.0 * MARGIN));
    // Nothing left: the next slot waits until one is.
    schedule.hear(
        Heard {
            rps: None,
            tps: None,
            empty_for_us: Some(S / 2),
        },
        12 * S,
    );
    assert_eq!(schedule.next, 12 * S + S / 2);
}

#[test]
fn after_a_429_headers_do_not_lift_the_rate_at_once() {
    let mut schedule = fresh(Configured::default());
    schedule.hear(
        Heard {
            rps: Some(10.0),
            ..Heard::default()
        },
        11 * S,
    );
    schedule.refuse(11 * S + 1, 11 * S + 2);
    let cut = schedule.rate;
    schedule.hear(
        Heard {
            rps: Some(10.0),
            ..Heard::default()
        },
        12 * S,
    );
    assert!(near(schedule.rate, cut));
    // Long after the cut, they do.
    schedule.hear(
        Heard {
            rps: Some(10.0),
            ..Heard::default()
        },
        30 * S,
    );
    assert!(near(schedule.rate, 10.0 * MARGIN));
}

#[test]
fn an_entry_from_an_older_version_reads_with_defaults() {
    #[derive(Serialize)]
    struct Old {
        next: u64,
        tokens: u64,
        agents: BTreeMap<String, u64>,
        paused: u64,
    }
    let old = rmp_serde::to_vec_named(&Old {
        next: 5,
        tokens: 6,
        agents: BTreeMap::new(),
        paused: 7,
    })
    .unwrap();
    let read: Schedule = rmp_serde::from_slice(&old).unwrap();
    assert_eq!(read.next, 5);
    assert!(near(read.rate, 0.0));
    let mut read = read;
    read.settle(Configured::default(), S);
    assert!(near(read.rate, START_RPS));
}
