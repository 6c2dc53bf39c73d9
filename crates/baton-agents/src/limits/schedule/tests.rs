use super::*;

const S: u64 = 1_000_000;

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn fresh(configured: Configured) -> Schedule {
    let mut schedule = Schedule::default();
    schedule.align(configured, 10 * S);
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
fn with_nothing_known_calls_are_not_paced_and_a_small_window_widens_while_held() {
    let mut schedule = fresh(Configured::default());
    assert!(schedule.unpaced);
    assert!(near(schedule.rate, 0.0));
    assert_eq!(schedule.source, Source::Adaptive);
    assert!(near(schedule.window, START_WINDOW));
    // A lone caller: nothing else in flight, so it goes.
    assert!(schedule.admits(0, 10 * S));
    // Another process has four in flight: the window is full.
    schedule.flew("other", 4, 0, 10 * S);
    assert_eq!(schedule.in_flight(10 * S, "me", 0), 4);
    assert!(!schedule.admits(schedule.in_flight(10 * S, "me", 0), 10 * S + 1));
    // Answers while callers are held widen it, one an answer, at most
    // doubling a second.
    schedule.flew("other", 3, 3, 10 * S + 2);
    assert!(
        near(schedule.window, START_WINDOW + 3.0),
        "{}",
        schedule.window
    );
    schedule.flew("other", 0, 10, 10 * S + 3);
    assert!(
        near(schedule.window, 2.0 * START_WINDOW),
        "{}",
        schedule.window
    );
    assert!(schedule.flights.is_empty());
    // A second later, it may double again.
    schedule.admits(8, 11 * S + 4);
    schedule.flew("other", 0, 3, 11 * S + 5);
    assert!(near(schedule.window, 2.0 * START_WINDOW + 3.0));
    // Answers with nobody held do not widen it.
    schedule.flew("other", 0, 5, 13 * S);
    assert!(near(schedule.window, 2.0 * START_WINDOW + 3.0));
    // A process that stopped saying no longer counts.
    schedule.flew("gone", 7, 0, 13 * S);
    assert_eq!(schedule.flying(13 * S + FLIGHT_LEASE_US - 1), 7);
    assert_eq!(schedule.flying(13 * S + FLIGHT_LEASE_US), 0);
}

#[test]
fn the_first_429_paces_under_what_was_answered_in_the_second_before() {
    let mut schedule = fresh(Configured::default());
    // Ten sent and answered in the first 10 ms of a burst, then a 429 for
    // the eleventh (and one for the twelfth, sent later, of the same burst).
    for n in 0..12 {
        schedule.sent.add(1, 10 * S + n * 1_000);
    }
    schedule.flew("me", 2, 10, 10 * S + 20_000);
    schedule.refuse((10 * S + 11_000, 11.0), 10 * S + 21_000);
    schedule.refuse((10 * S + 10_000, 10.0), 10 * S + 21_500);
    assert!(!schedule.unpaced);
    assert!(near(schedule.shown, 10.0), "{}", schedule.shown);
    assert!(near(schedule.rate, 10.0 * MARGIN), "{}", schedule.rate);
    assert!(near(schedule.window, START_WINDOW / 2.0));
    // The ten answered count as paced: the next slot waits about a second.
    let next = schedule.next - (10 * S + 21_000);
    assert!((1_020_000..1_040_000).contains(&next), "{next}");
    // For a minute, neither the climb nor the headers go above it.
    for second in 11..20 {
        schedule.grow(second * S, true);
    }
    assert!(near(schedule.rate, 10.0 * MARGIN), "{}", schedule.rate);
    schedule.hear(
        Heard {
            rps: Some(50.0),
            ..Heard::default()
        },
        40 * S,
    );
    assert!(near(schedule.rate, 10.0 * MARGIN), "{}", schedule.rate);
    // After it, the headers are heard again.
    schedule.hear(
        Heard {
            rps: Some(50.0),
            ..Heard::default()
        },
        90 * S,
    );
    assert!(near(schedule.rate, 50.0 * MARGIN), "{}", schedule.rate);
}

#[test]
fn a_heard_rate_ends_the_windows_slow_start_counting_the_calls_sent() {
    let mut schedule = fresh(Configured::default());
    for n in 0..5 {
        schedule.sent.add(1, 10 * S + n);
    }
    schedule.hear(
        Heard {
            rps: Some(10.0),
            from: 1,
            ..Heard::default()
        },
        10 * S + 10,
    );
    assert!(!schedule.unpaced);
    assert!(near(schedule.rate, 10.0 * MARGIN));
    assert_eq!(schedule.headers(), ["x-ratelimit"]);
    let next = schedule.next - (10 * S + 10);
    assert!((500_000..530_000).contains(&next), "{next}");
}

#[test]
fn a_429_cuts_once_per_burst_and_the_rate_then_climbs_additively() {
    let mut schedule = fresh(Configured::default());
    schedule.unpaced = false;
    schedule.starting = true;
    schedule.rate = 16.0;
    // Out of slow start: × 0.7.
    schedule.refuse((10 * S, 0.0), 10 * S + 100);
    assert!(near(schedule.rate, 16.0 * 0.7), "{}", schedule.rate);
    assert!(!schedule.starting);
    // A call that went out before the cut is of the same burst: counted,
    // not cut again.
    schedule.refuse((10 * S + 50, 0.0), 10 * S + 200);
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
    schedule.refuse((11 * S + 200, 0.0), 11 * S + 300);
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
    schedule.refuse((20 * S, 0.0), 20 * S + 1);
    assert!(near(schedule.rate, 10.0 * MARGIN * 0.85));
    // The next alignment keeps the cut rate: a ceiling is not a promise.
    schedule.align(
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
            ..Heard::default()
        },
        11 * S,
    );
    assert!(near(schedule.rate, 10.0 * MARGIN));
    assert_eq!(schedule.source, Source::Headers);
    assert!(!schedule.starting);
    schedule.align(Configured::default(), 11 * S);
    assert!(near(schedule.ceiling, 10.0));
    assert!(near(schedule.token_rate, 500.0));
    // Configured higher than heard: the heard rate is the ceiling.
    schedule.align(
        Configured {
            rps: Some(20.0),
            tps: None,
        },
        11 * S,
    );
    assert_eq!(schedule.source, Source::Headers);
    assert!(near(schedule.ceiling, 10.0));
    // Configured lower: the configured one.
    schedule.align(
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
            empty_for_us: Some(S / 2),
            ..Heard::default()
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
    schedule.refuse((11 * S + 1, 0.0), 11 * S + 2);
    let cut = schedule.rate;
    schedule.hear(
        Heard {
            rps: Some(10.0),
            ..Heard::default()
        },
        12 * S,
    );
    assert!(near(schedule.rate, cut));
    // Later, they lift it to the rate that drew the 429 at most, for a
    // minute; after that, to what they say.
    let drew = 10.0 * MARGIN;
    schedule.hear(
        Heard {
            rps: Some(20.0),
            ..Heard::default()
        },
        30 * S,
    );
    assert!(near(schedule.rate, drew), "{}", schedule.rate);
    schedule.hear(
        Heard {
            rps: Some(20.0),
            ..Heard::default()
        },
        80 * S,
    );
    assert!(near(schedule.rate, 20.0 * MARGIN));
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
    read.align(Configured::default(), S);
    assert!(read.unpaced);
    assert!(near(read.window, START_WINDOW));
    // One paced by an older version stays paced.
    let mut paced = Schedule {
        rate: 7.0,
        ..Schedule::default()
    };
    paced.align(Configured::default(), S);
    assert!(!paced.unpaced);
    assert!(near(paced.rate, 7.0));
}
