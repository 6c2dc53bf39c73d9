//! The refresh lock of a sign-in, against a real nats-server: one holder
//! at a time, a waiter gets it when the holder lets go, and a holder whose
//! lock was taken over does not release the new holder's.

use std::time::Duration;

use baton_mcp_client::Tokens;
use baton_proto::Subjects;
use baton_testkit::NatsServer;

const URL: &str = "http://127.0.0.1:9/mcp";

async fn tokens() -> (NatsServer, async_nats::Client, Tokens) {
    let server = tokio::task::spawn_blocking(NatsServer::start)
        .await
        .unwrap()
        .unwrap();
    let nats = async_nats::connect(server.url()).await.unwrap();
    let tokens = Tokens::open(&nats, &Subjects::default(), 1).await.unwrap();
    (server, nats, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_and_a_waiter_gets_it_when_released() {
    let (_server, _nats, tokens) = tokens().await;
    let first = tokens.of(URL).lock().await.unwrap();
    let waiting = tokio::spawn({
        let tokens = tokens.clone();
        async move {
            tokens
                .of(URL)
                .lock()
                .await
                .map(|held| (held, std::time::Instant::now()))
        }
    });
    // The second waits while the first holds it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "two workers held the refresh lock at once"
    );
    let released = std::time::Instant::now();
    first.release().await;
    let (second, taken) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter got the lock once it was released")
        .unwrap()
        .unwrap();
    assert!(taken >= released);
    second.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_lock_was_taken_over_leaves_the_new_holders() {
    let (_server, nats, tokens) = tokens().await;
    let first = tokens.of(URL).lock().await.unwrap();
    // Another worker takes it over (as after 45 s without a change): the
    // lock key gets a new revision.
    let bucket = async_nats::jetstream::new(nats)
        .get_key_value(Subjects::default().mcp_auth_bucket())
        .await
        .unwrap();
    let key = bucket
        .keys()
        .await
        .unwrap()
        .next_key()
        .await
        .expect("the lock key");
    let held = bucket.entry(&key).await.unwrap().unwrap();
    bucket
        .update(&key, "taken over".into(), held.revision)
        .await
        .unwrap();
    // The first holder lets go: the new holder's lock stays.
    first.release().await;
    let kept = bucket.get(&key).await.unwrap();
    assert_eq!(kept.as_deref(), Some(&b"taken over"[..]));
}

/// The first key of a key listing.
trait NextKey {
    async fn next_key(self) -> Option<String>;
}

impl<S> NextKey for S
where
    S: futures::Stream<Item = Result<String, async_nats::jetstream::kv::WatcherError>> + Unpin,
{
    async fn next_key(mut self) -> Option<String> {
        use futures::StreamExt as _;
        self.next().await.and_then(Result::ok)
    }
}
