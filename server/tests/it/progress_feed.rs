//! `progress::feed` against a real database, driven through a broadcast channel of the test's
//! own that holds two changes: a stream whose receiver lagged (more changes arrived than the
//! channel holds, so some were lost) or that is told to resync reads again what it shows, and
//! so still ends on the latest state of jobs whose own notifications it never saw.
//!
//! The runtime has one thread: the feed's task runs only while the test awaits, so changes
//! sent together arrive together.

use std::pin::Pin;

use app::model::JobView;
use futures::{Stream, StreamExt};
use server::{
    auth::Sees,
    progress::{
        Change,
        feed::{self, Scope},
    },
    store::notify::JobChanged,
};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::support::{PATIENCE, TestDb, TestServer, csv};

type Feed = Pin<Box<dyn Stream<Item = JobView> + Send>>;

/// A feed over `changes`, for an admin (who sees every job).
fn follow(db: &TestDb, changes: broadcast::Receiver<Change>, scope: Scope) -> Feed {
    Box::pin(feed::follow_changes(
        db.pool.clone(),
        changes,
        scope,
        Sees::Everything,
        None,
    ))
}

async fn next(feed: &mut Feed) -> JobView {
    tokio::time::timeout(PATIENCE, feed.next())
        .await
        .expect("a state in time")
        .expect("the feed stays open")
}

/// Changes the job's row as a worker would, but tells nobody; its new version.
async fn change_quietly(db: &TestDb, id: Uuid) -> i64 {
    sqlx::query_scalar("update jobs set version = version + 1 where id = $1 returning version")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Three changes the stream does not show, one more than the channel holds: it lags.
fn overflow(changes: &broadcast::Sender<Change>) {
    for _ in 0..3 {
        let elsewhere = JobChanged {
            id: Uuid::new_v4(),
            version: 1,
        };
        changes.send(Change::Job(elsewhere)).unwrap();
    }
}

#[tokio::test]
async fn a_job_stream_that_lags_reads_its_job_again() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let job = server.import("a.csv", csv(3), "a").await;
    let (changes, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::One(job.id));
    assert_eq!(next(&mut feed).await.version, job.version);

    // The job's own notification is lost among changes to other jobs.
    let version = change_quietly(&db, job.id).await;
    overflow(&changes);
    let seen = next(&mut feed).await;
    assert_eq!((seen.id, seen.version), (job.id, version));
    server.stop().await;
}

#[tokio::test]
async fn a_list_stream_that_lags_while_gathering_changes_reads_every_job_again() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let b = server.import("b.csv", csv(3), "b").await;
    let (changes, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::All);
    let first: Vec<Uuid> = vec![next(&mut feed).await.id, next(&mut feed).await.id];
    assert_eq!(first, [a.id, b.id], "oldest first");

    // A's change is told, and the stream starts gathering what else comes within its window
    // (had it not taken A's change yet, it would lag at once instead: the same outcome);
    // meanwhile B's change is lost among changes to jobs it does not show.
    let a_version = change_quietly(&db, a.id).await;
    let b_version = change_quietly(&db, b.id).await;
    changes
        .send(Change::Job(JobChanged {
            id: a.id,
            version: a_version,
        }))
        .unwrap();
    tokio::task::yield_now().await;
    overflow(&changes);
    let seen = [next(&mut feed).await, next(&mut feed).await];
    assert_eq!(
        seen.map(|job| (job.id, job.version)),
        [(a.id, a_version), (b.id, b_version)]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_resync_reads_the_list_again_and_finds_what_no_notification_told() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let a = server.import("a.csv", csv(3), "a").await;
    let (changes, receiver) = broadcast::channel(2);
    let mut feed = follow(&db, receiver, Scope::All);
    assert_eq!(next(&mut feed).await.id, a.id);

    // As after the hub reconnects: whatever happened meanwhile was never told.
    let a_version = change_quietly(&db, a.id).await;
    let b = server.import("b.csv", csv(3), "b").await;
    changes.send(Change::Resync).unwrap();
    let seen = [next(&mut feed).await, next(&mut feed).await];
    assert_eq!(
        seen.map(|job| (job.id, job.version)),
        [(a.id, a_version), (b.id, b.version)]
    );
    server.stop().await;
}
