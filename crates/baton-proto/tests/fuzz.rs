//! The decoders never panic: arbitrary bytes and mutated valid payloads
//! (bit flips, truncation, splices, deep nesting) decode or fail with a
//! classified error.

use baton_proto::{
    Envelope, ErrorKind, Event, EventType, Heartbeat, LookupRequest, Wire, check_out, claims,
};

fn decode_all(bytes: &[u8]) {
    for result in [
        Envelope::from_msgpack(bytes).map(drop),
        Event::from_msgpack(bytes).map(drop),
        Heartbeat::from_msgpack(bytes).map(drop),
        LookupRequest::from_msgpack(bytes).map(drop),
    ] {
        if let Err(err) = result {
            assert!(matches!(
                err.kind(),
                ErrorKind::Malformed | ErrorKind::UnsupportedVersion | ErrorKind::TooLarge
            ));
            assert!(!err.detail().is_empty());
        }
    }
    let _ = claims(bytes);
    let _ = check_out(bytes.to_vec(), 16, 4);
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = fastrand::Rng::with_seed(0x0123_4567_89ab_cdef);
    for _ in 0..20_000 {
        let len = rng.usize(..200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        decode_all(&bytes);
    }
}

#[test]
fn mutated_payloads_never_panic() {
    let mut rng = fastrand::Rng::with_seed(0xfeed_beef_cafe_f00d);
    let mut task = Envelope::task("Where is my order?").with_variable("order", "ABC-123");
    task.context.state.insert("n".into(), 3.into());
    let seeds = [
        task.to_msgpack().unwrap(),
        Event::new(task.id, task.session, EventType::Completed)
            .to_msgpack()
            .unwrap(),
        LookupRequest::default().to_msgpack().unwrap(),
    ];
    for round in 0..30_000 {
        let mut bytes = seeds[round % seeds.len()].clone();
        match rng.usize(..4) {
            0 => {
                for _ in 0..=rng.usize(..6) {
                    let at = rng.usize(..bytes.len());
                    bytes[at] ^= 1 << rng.u32(..8);
                }
            }
            1 => bytes.truncate(rng.usize(..bytes.len())),
            2 => {
                let at = rng.usize(..bytes.len());
                let other = &seeds[rng.usize(..seeds.len())];
                let from = rng.usize(..other.len());
                bytes.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                // Deep nesting where a value goes.
                let at = rng.usize(..bytes.len());
                let depth = 100 + rng.usize(..20_000);
                let mut deep = vec![0x91; depth];
                deep.push(0xc0);
                bytes.splice(at..at, deep);
            }
        }
        decode_all(&bytes);
    }
}

#[test]
fn deep_nesting_is_malformed_not_a_crash() {
    let mut bytes = vec![0x81, 0xa1, b'v', 0x01, 0xa1, b'x'];
    bytes[0] = 0x82;
    bytes.extend(vec![0x91; 100_000]);
    bytes.push(0xc0);
    let err = Envelope::from_msgpack(&bytes).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Malformed);
    assert!(
        err.detail().contains("nested deeper than 128"),
        "{}",
        err.detail()
    );
}

#[test]
fn re_encoding_never_inflates_a_payload() {
    // A task with only the fields a writer must send, and an event with the
    // fewest: decoding and encoding again adds nothing.
    let task = serde_json::json!({
        "v": 1, "id": "10000000-0000-4000-8000-000000000001",
        "session": "10000000-0000-4000-8000-000000000002", "kind": "task", "path": [],
        "created_at": 1, "context": {"initial_query": "q", "problem": "",
        "messages": [{"role": "user", "content": "q", "at": 1}], "variables": {},
        "trace": [], "state": {}, "metadata": {}}
    });
    let bytes = rmp_serde::to_vec_named(&task).unwrap();
    let again = Envelope::from_msgpack(&bytes)
        .unwrap()
        .to_msgpack()
        .unwrap();
    assert!(
        again.len() <= bytes.len(),
        "{} > {}",
        again.len(),
        bytes.len()
    );
    let event = serde_json::json!({
        "v": 1, "id": "10000000-0000-4000-8000-000000000003",
        "session": "10000000-0000-4000-8000-000000000002", "at": 5, "type": "accepted"
    });
    let bytes = rmp_serde::to_vec_named(&event).unwrap();
    let again = Event::from_msgpack(&bytes).unwrap().to_msgpack().unwrap();
    assert_eq!(again.len(), bytes.len());
}
