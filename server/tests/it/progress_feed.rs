//! `progress::views` and `progress::feed` against a real database. The process's one reader
//! reads each burst of changes once, whatever the number of streams, and each stream keeps what
//! its reader may see. A stream whose channel lagged (more views arrived than it holds, so some
//! were lost) or that is told to resync reads again what it shows, and so still ends on the
//! latest state of jobs whose views it never saw.
//!
//! The runtime has one thread: the feed's task runs only while the test awaits, so views
//! sent together arrive together.

use std::{pin::Pin, sync::Arc};

use app::model::JobView;
use futures::{Stream, StreamExt};
use server::{
    auth::Sees,
    progress::{
        Change, Views,
        feed::{self, Push, Scope},
        views::{Seen, Shown},
    },
    store::notify::JobChanged,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::{PATIENCE, TestDb, TestServer, csv};

type Feed = Pin<Box<dyn Stream<Item = Push> + Send>>;

/// A feed over `seen`, for an admin (who sees every job).
fn follow(db: &TestDb, seen: broadcast::Receiver<Seen>, scope: Scope) -> Feed {
    Box::pin(feed::follow_seen(
        db.pool.clone(),
        seen,
        scope,
        Sees::Everything,
        None,
    ))
}

/// What the feed sends next.
async fn push(feed: &mut Feed) -> Push {
    tokio::time::timeout(PATIENCE, feed.next())
        .await
        .expect("a push in time")
        .expect("the feed stays open")
}

/// Whether the feed sends nothing for a while.
async fn quiet(feed: &mut Feed) -> bool {
    tokio::time::timeout(std::time::Duration::from_millis(100), feed.next())
        .await
        .is_err()
}

async fn next(feed: &mut Feed) -> JobView {
    let Push::Job(shown) = push(feed).await else {
        panic!("a state, not a keep-alive");
    };
    assert_eq!(
        serde_json::from_slice::<JobView>(&shown.json).unwrap(),
        shown.view,
        "sent as it is"
    );
    let event = format!(
        "event: job\nid: {}\ndata: {}\n\n",
        shown.view.version,
        std::str::from_utf8(&shown.json).unwrap()
    );
    assert_eq!(shown.event, event.as_bytes(), "one event, made once");
    shown.view.clone()
}

/// Changes the job's row as a worker would, but tells nobody; its new version.
async fn change_quietly(db: &TestDb, id: Uuid) -> i64 {
    sqlx::query_scalar("update jobs set version = version + 1 where id = $1 returning version")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Three views of a job the stream does not show, one more than the channel holds: it lags.
fn overflow(seen: &broadcast::Sender<Seen>, elsewhere: &JobView) {
    for _ in 0..3 {
        seen.send(Seen::Job(Arc::new(Shown::new(elsewhere.clone()))))
            .unwrap();
    }
}

#[tokio::test]
async fn a_job_stream_that_lags_reads_its_job_again() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("a.csv", csv(3), "a").await;
    let other = server.import("b.csv", csv(3), "b").await;
    let (seen, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::One(job.id));
    assert_eq!(next(&mut feed).await.version, job.version);

    // The job's own view is lost among views of another job.
    let version = change_quietly(&db, job.id).await;
    overflow(&seen, &other);
    let now = next(&mut feed).await;
    assert_eq!((now.id, now.version), (job.id, version));
    server.stop().await;
}

/// `view` as it would be at `version`, sent on `seen`.
fn send_at(seen: &broadcast::Sender<Seen>, view: &JobView, version: i64) {
    let view = JobView {
        version,
        ..view.clone()
    };
    seen.send(Seen::Job(Arc::new(Shown::new(view)))).unwrap();
}

#[tokio::test]
async fn a_stream_behind_its_channel_sends_only_the_newest_state_of_each_job() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let b = server.import("b.csv", csv(3), "b").await;
    let (seen, receiver) = broadcast::channel(16);
    let mut one = follow(&db, receiver, Scope::One(a.id));
    let mut all = follow(&db, seen.subscribe(), Scope::All);
    assert_eq!(next(&mut one).await.version, a.version);
    assert_eq!(
        [next(&mut all).await.id, next(&mut all).await.id],
        [a.id, b.id]
    );

    // Three states of A and one of B came while the client was busy with the last push.
    for version in 1..=2 {
        send_at(&seen, &a, a.version + version);
    }
    send_at(&seen, &b, b.version + 1);
    send_at(&seen, &a, a.version + 3);
    send_at(&seen, &a, a.version + 2);
    let now = next(&mut one).await;
    assert_eq!((now.id, now.version), (a.id, a.version + 3));
    let now = [next(&mut all).await, next(&mut all).await];
    assert_eq!(
        now.map(|job| (job.id, job.version)),
        [(a.id, a.version + 3), (b.id, b.version + 1)],
        "each job once, in the order the jobs first came"
    );
    for feed in [&mut one, &mut all] {
        let nothing = tokio::time::timeout(std::time::Duration::from_millis(100), feed.next());
        assert!(nothing.await.is_err(), "nothing older follows");
    }

    // Told to resync behind a state it took: that state still goes (the list's read finds
    // only the newest jobs, which may not include this one), and the read adds nothing older.
    change_quietly(&db, a.id).await;
    send_at(&seen, &a, a.version + 9);
    seen.send(Seen::Resync).unwrap();
    let now = next(&mut all).await;
    assert_eq!((now.id, now.version), (a.id, a.version + 9));
    let nothing = tokio::time::timeout(std::time::Duration::from_millis(300), all.next());
    assert!(nothing.await.is_err(), "the read found nothing newer");
    server.stop().await;
}

#[tokio::test]
async fn a_stream_that_sent_nothing_between_two_ticks_sends_a_comment() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let (seen, receiver) = broadcast::channel(16);
    let mut feed = follow(&db, receiver, Scope::One(a.id));
    assert_eq!(next(&mut feed).await.version, a.version);

    // It sent a state since the last tick (there was none): no comment yet.
    seen.send(Seen::KeepAlive).unwrap();
    assert!(quiet(&mut feed).await, "no comment after a state");
    // Then nothing until the next tick, and the next: a comment at each.
    for _ in 0..2 {
        seen.send(Seen::KeepAlive).unwrap();
        assert!(matches!(push(&mut feed).await, Push::KeepAlive));
    }
    // A state between two ticks: it was not idle, so no comment.
    send_at(&seen, &a, a.version + 1);
    assert_eq!(next(&mut feed).await.version, a.version + 1);
    seen.send(Seen::KeepAlive).unwrap();
    assert!(quiet(&mut feed).await, "no comment after a state");
    // A state taken with the tick that follows an idle spell goes instead of the comment.
    seen.send(Seen::KeepAlive).unwrap();
    send_at(&seen, &a, a.version + 2);
    assert_eq!(next(&mut feed).await.version, a.version + 2);
    assert!(quiet(&mut feed).await, "the state kept it alive");

    // The views a stream lagged behind may have held a tick: the lag counts as one (it sent
    // a state before, so no comment), and the next tick finds it idle since.
    let (seen, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::One(a.id));
    let now = next(&mut feed).await;
    overflow(&seen, &now);
    assert!(quiet(&mut feed).await, "its read found nothing newer");
    seen.send(Seen::KeepAlive).unwrap();
    assert!(matches!(push(&mut feed).await, Push::KeepAlive));
    server.stop().await;
}

#[tokio::test]
async fn a_resync_reads_the_list_again_and_finds_what_no_view_told() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let (seen, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::All);
    assert_eq!(next(&mut feed).await.id, a.id);

    // As after the hub reconnects: whatever happened meanwhile was never told.
    let a_version = change_quietly(&db, a.id).await;
    let b = server.import("b.csv", csv(3), "b").await;
    seen.send(Seen::Resync).unwrap();
    let now = [next(&mut feed).await, next(&mut feed).await];
    assert_eq!(
        now.map(|job| (job.id, job.version)),
        [(a.id, a_version), (b.id, b.version)]
    );

    // And when it lags, the same.
    let b_version = change_quietly(&db, b.id).await;
    overflow(&seen, &a);
    let last = next(&mut feed).await;
    assert_eq!((last.id, last.version), (b.id, b_version));
    server.stop().await;
}

#[tokio::test]
async fn one_read_per_burst_of_changes_whatever_the_number_of_streams() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let b = server.import("b.csv", csv(3), "b").await;
    let (changes, receiver) = broadcast::channel(16);
    let views = Views::start_with(
        db.pool.clone(),
        receiver,
        // No tick while the test runs: the stranger must be sent nothing at all.
        std::time::Duration::from_secs(3_600),
        CancellationToken::new(),
    );
    let mut feeds: Vec<Feed> = (0..50)
        .map(|_| {
            Box::pin(feed::follow(
                db.pool.clone(),
                &views,
                Scope::All,
                Sees::Everything,
                None,
            )) as Feed
        })
        .collect();
    // Someone who owns neither job follows the list too: they are sent nothing of them.
    let mut stranger: Feed = Box::pin(feed::follow(
        db.pool.clone(),
        &views,
        Scope::All,
        Sees::OwnedBy(Uuid::now_v7()),
        None,
    ));
    for feed in &mut feeds {
        assert_eq!([next(feed).await.id, next(feed).await.id], [a.id, b.id]);
    }

    // A burst: A changes twice and B once, each told (at once, as the listener would).
    let mut told = Vec::new();
    for id in [a.id, b.id, a.id] {
        told.push((id, change_quietly(&db, id).await));
    }
    for &(id, version) in &told {
        changes
            .send(Change::Job(JobChanged { id, version }))
            .unwrap();
    }
    let a_now = told[2];
    let b_now = told[1];
    for feed in &mut feeds {
        let mut now = [next(feed).await, next(feed).await];
        now.sort_by_key(|job| job.id);
        let mut expected = [a_now, b_now];
        expected.sort();
        assert_eq!(
            now.iter().map(|j| (j.id, j.version)).collect::<Vec<_>>(),
            expected
        );
    }
    assert_eq!(views.reads(), 1, "one query for the burst, for 51 streams");
    let nothing = tokio::time::timeout(std::time::Duration::from_millis(300), stranger.next());
    assert!(nothing.await.is_err(), "the stranger is sent nothing");
    server.stop().await;
}
