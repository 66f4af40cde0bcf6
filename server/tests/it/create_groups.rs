//! An owner's plain imports asked for while their previous create is being made are made
//! together, in one transaction (`jobs::group`), with the turns and the live-job limit that
//! one-by-one creates give; a group that meets the limit is made again without the imports
//! past it, which are refused; one that meets anything else is made one by one, each request
//! answered on its own.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use server::{
    auth::Sees,
    jobs::{
        create::{CreateError, Created, Import},
        group::Groups,
        lane,
    },
    store::{
        jobs::Options,
        uploads::{self, UploadError, UploadLimits},
    },
};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::support::{TestDb, TestServer, assert_stored_bytes_follow_uploads, csv, until, writers};

const IMPORTS: usize = 8;

/// `sets(n)` datasets, each of their own name.
fn sets(n: usize) -> Vec<String> {
    (0..n).map(|n| format!("set{n}")).collect()
}

/// Plain imports of one owner's, one into each of `datasets`, asked for at once (of `groups`)
/// while the test holds the owner's lock: the first request's leader waits for it with that import alone, and
/// the others wait for it to finish. Meanwhile the file of import `removed` (if any) is
/// removed, as retention would. Their answers, in order.
async fn made_at_once(
    db: &TestDb,
    server: &TestServer,
    groups: &Arc<Groups>,
    datasets: &[String],
    limit: Option<i64>,
    removed: Option<usize>,
) -> Vec<Result<Created, CreateError>> {
    let imports = datasets.len();
    let mut uploaded = Vec::new();
    for n in 0..imports {
        let upload = server.upload(&format!("{n}.csv"), csv(5)).await;
        uploaded.push(Uuid::parse_str(upload["id"].as_str().unwrap()).unwrap());
    }
    let owner = owner_of(db, uploaded[0]).await;
    let mut files = Vec::new();
    for &id in &uploaded {
        let upload = uploads::find(&db.pool, id, Sees::OwnedBy(owner)).await;
        files.push(uploads::File::Stored(upload.unwrap().unwrap()));
    }
    let removed = removed.map(|n| uploaded[n]);
    asked_at_once(db, groups, owner, files, datasets, limit, removed).await
}

async fn owner_of(db: &TestDb, upload: Uuid) -> Uuid {
    sqlx::query_scalar("select owner from uploads where id = $1")
        .bind(upload)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// [`made_at_once`], of `owner`'s `files`: the file `removed` is removed meanwhile.
async fn asked_at_once(
    db: &TestDb,
    groups: &Arc<Groups>,
    owner: Uuid,
    files: Vec<uploads::File>,
    datasets: &[String],
    limit: Option<i64>,
    removed: Option<Uuid>,
) -> Vec<Result<Created, CreateError>> {
    let imports = datasets.len();
    let held = hold_owners_lock(db, owner).await;
    let creates = files.into_iter().zip(datasets).map(|(file, name)| {
        let import = Import {
            upload_id: file.upload().id,
            dataset: name,
            sheet: None,
            reading: Default::default(),
            mapping: None,
            dry_run: false,
            fixes: None,
            new_dataset: None,
        };
        let options = Options {
            serialize_key: Some(format!("{owner}:dataset:{name}")),
            active_jobs_limit: limit,
            ..Options::default()
        };
        groups.create(&db.pool, owner, file, import, options)
    });
    let mut all = Box::pin(join_all(creates));
    // Polled (nothing else runs meanwhile) until every import is asked for: the first
    // request's leader is spawned with its import, the others wait for the next group. (Past
    // 30 futures, `join_all` polls only some of them each time.)
    for _ in 0..imports {
        assert!(futures::poll!(&mut all).is_pending());
    }
    // (An import past those that may wait may be waiting for the lock too.)
    until("the leader waits for the owner's lock", || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'
               and query like '%active jobs:%'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        waiting >= 1
    })
    .await;
    if let Some(removed) = removed {
        sqlx::query("delete from uploads where id = $1")
            .bind(removed)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    held.rollback().await.unwrap();
    all.await
}

async fn hold_owners_lock(db: &TestDb, owner: Uuid) -> Transaction<'static, Postgres> {
    let mut held = db.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('active jobs:' || $1, 0))")
        .bind(owner.to_string())
        .execute(&mut *held)
        .await
        .unwrap();
    held
}

#[tokio::test]
async fn imports_asked_for_at_once_are_made_in_one_transaction_with_their_turns() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let made = made_at_once(&db, &server, &Groups::new(None), &sets(IMPORTS), None, None).await;
    let jobs: Vec<Uuid> = made
        .into_iter()
        .map(|created| {
            let created = created.unwrap();
            assert!(!created.replayed);
            created.job.id
        })
        .collect();
    // Each request got a job of its own, in the order asked.
    let datasets: Vec<String> = sqlx::query_scalar(
        "select d.name from unnest($1::uuid[]) with ordinality as asked(id, n)
         join jobs j on j.id = asked.id join datasets d on d.id = j.dataset_id order by n",
    )
    .bind(&jobs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(datasets, sets(IMPORTS));
    // The first alone, the seven others together.
    assert_eq!(writers(&db, &jobs).await, 2);
    // Queued with the turns one-by-one creates give: each behind the owner's earlier jobs.
    let turns: Vec<i32> = sqlx::query_scalar(
        "select m.priority from unnest($1::uuid[]) with ordinality as asked(id, n)
         join apalis.jobs m on (convert_from(m.job, 'UTF8')::jsonb ->> 'job_id')::uuid = asked.id
         order by n",
    )
    .bind(&jobs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let one_by_one: Vec<i32> = (0..IMPORTS as i32).map(|ahead| 1_000_000 - ahead).collect();
    assert_eq!(turns, one_by_one);
    server.stop().await;
}

#[tokio::test]
async fn a_group_that_meets_the_live_job_limit_is_made_without_the_imports_past_it() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let mut made = made_at_once(
        &db,
        &server,
        &Groups::new(None),
        &sets(IMPORTS),
        Some(5),
        None,
    )
    .await;
    // The first five asked for are made, the last three refused.
    for refusal in made.split_off(5) {
        assert!(matches!(
            refusal,
            Err(CreateError::TooManyActive { limit: 5 })
        ));
    }
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    // The first alone; the group of seven met the limit at its fifth import, was rolled back
    // and made again without it and those after it.
    assert_eq!(writers(&db, &jobs).await, 2);
    let (live, datasets): (i64, i64) = sqlx::query_as(
        "select (select count(*) from jobs where kind = 'import'),
                (select count(*) from datasets)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((live, datasets), (5, 5));
    server.stop().await;
}

#[tokio::test]
async fn a_group_one_of_whose_files_was_removed_is_made_one_by_one() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let mut made = made_at_once(
        &db,
        &server,
        &Groups::new(None),
        &sets(IMPORTS),
        None,
        Some(3),
    )
    .await;
    assert!(matches!(
        made.remove(3),
        Err(CreateError::UploadNotFound(_))
    ));
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    // The first alone; the group of seven met the removed file, was rolled back, and its six
    // other imports were made one by one.
    assert_eq!(writers(&db, &jobs).await, 7);
    let datasets: i64 = sqlx::query_scalar("select count(*) from datasets")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(datasets, 7);
    server.stop().await;
}

/// `n` small files of `owner`'s, sent with their imports: held, not stored.
async fn sent_files(
    db: &TestDb,
    owner: Uuid,
    n: usize,
    limits: UploadLimits,
) -> Vec<uploads::File> {
    let mut files = Vec::new();
    for i in 0..n {
        let body = futures::stream::iter([Ok::<_, UploadError>(csv(5))]);
        let file = uploads::take(&db.pool, owner, &format!("{i}.csv"), None, limits, body).await;
        let file = file.unwrap();
        assert!(
            file.sent().is_some(),
            "a small file that arrived whole is held"
        );
        files.push(file);
    }
    files
}

/// Files sent with their imports are stored by the transactions that make their jobs: a
/// group's in one statement, within the owner's limits for all of them together; past them,
/// each import is made (or refused) alone, and nothing is stored for a job not made.
#[tokio::test]
async fn files_sent_with_a_groups_imports_are_stored_by_its_transaction() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let first = server.upload("owner.csv", csv(1)).await;
    let owner = owner_of(&db, Uuid::parse_str(first["id"].as_str().unwrap()).unwrap()).await;
    let size = csv(5).len() as i64;
    let uploads_count = || async {
        let count: i64 = sqlx::query_scalar("select count(*) from uploads")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        count
    };

    let files = sent_files(&db, owner, IMPORTS, UploadLimits::NONE).await;
    assert_eq!(uploads_count().await, 1, "held files are not stored");
    let (groups, names) = (Groups::new(None), sets(IMPORTS));
    let made = asked_at_once(&db, &groups, owner, files, &names, None, None).await;
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    // The first alone, the seven others together, each job with its own file, whole.
    assert_eq!(writers(&db, &jobs).await, 2);
    let whole: i64 = sqlx::query_scalar(
        "select count(distinct u.id) from jobs j join uploads u on u.id = j.upload_id
         join upload_parts p on p.upload_id = u.id
         where j.id = any($1) and u.size = $2 and length(p.data) = $2 and not u.receiving",
    )
    .bind(&jobs)
    .bind(size)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(whole, IMPORTS as i64);
    assert_eq!(uploads_count().await, 1 + IMPORTS as i64);
    assert_stored_bytes_follow_uploads(&db).await;

    // Room for four more files: the first is made alone, the group of seven would pass the
    // limit together, and is made one by one: three more fit, the last four are refused.
    let stored: i64 = sqlx::query_scalar("select sum(size)::int8 from uploads")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let limits = UploadLimits {
        stored_bytes: Some(stored + 4 * size),
        ..UploadLimits::NONE
    };
    let files = sent_files(&db, owner, IMPORTS, limits).await;
    let names: Vec<String> = (0..IMPORTS).map(|n| format!("more{n}")).collect();
    let mut made = asked_at_once(&db, &Groups::new(None), owner, files, &names, None, None).await;
    for refusal in made.split_off(4) {
        assert!(
            matches!(refusal, Err(CreateError::File(UploadError::StoreFull { limit })) if limit == stored + 4 * size),
            "{refusal:?}"
        );
    }
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    assert_eq!(writers(&db, &jobs).await, 4);
    assert_eq!(uploads_count().await, 1 + IMPORTS as i64 + 4);
    let datasets: i64 = sqlx::query_scalar("select count(*) from datasets where name like 'more%'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(datasets, 4);
    assert_stored_bytes_follow_uploads(&db).await;

    // A group of files stored before and files sent with their imports is made together.
    let mut files = sent_files(&db, owner, IMPORTS / 2, UploadLimits::NONE).await;
    for n in 0..IMPORTS / 2 {
        let upload = server.upload(&format!("stored{n}.csv"), csv(5)).await;
        let id = Uuid::parse_str(upload["id"].as_str().unwrap()).unwrap();
        let upload = uploads::find(&db.pool, id, Sees::OwnedBy(owner)).await;
        files.push(uploads::File::Stored(upload.unwrap().unwrap()));
    }
    let names: Vec<String> = (0..IMPORTS).map(|n| format!("mixed{n}")).collect();
    let made = asked_at_once(&db, &groups, owner, files, &names, None, None).await;
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    assert_eq!(writers(&db, &jobs).await, 2);
    let files: i64 =
        sqlx::query_scalar("select count(distinct upload_id) from jobs where id = any($1)")
            .bind(&jobs)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(files, IMPORTS as i64);
    assert_stored_bytes_follow_uploads(&db).await;
    server.stop().await;
}

/// A group's imports into one dataset, or into one the owner has, are made on it, as they
/// would be one by one; the others get new datasets. All in the group's transaction.
#[tokio::test]
async fn a_groups_imports_into_one_dataset_or_an_existing_one_are_made_on_it() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    // The owner's dataset "kept", ready, and "abandoned", provisional with no import left (as
    // a failed import leaves it).
    let upload = server.upload("kept.csv", csv(3)).await;
    let made: Vec<(String, Uuid)> = sqlx::query_as(
        "insert into datasets (id, owner, name, state)
         select gen_random_uuid(), owner, name, state::dataset_state
         from uploads, (values ('kept', 'ready'), ('abandoned', 'provisional')) v (name, state)
         where id = $1::uuid
         returning name, id",
    )
    .bind(upload["id"].as_str().unwrap())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let id_of = |name: &str| made.iter().find(|(n, _)| n == name).unwrap().1;
    let (kept_id, abandoned_id) = (id_of("kept"), id_of("abandoned"));
    // A process that takes jobs (and never runs them).
    let (lane, _never_read) = lane::new("taker-1-deadbeef", Duration::from_secs(600), 2);
    let groups = Groups::new(Some(lane));
    let names = [
        "first",
        "shared",
        "kept",
        "shared",
        "own",
        "abandoned",
        "abandoned",
    ]
    .map(String::from);
    let made = made_at_once(&db, &server, &groups, &names, None, None).await;
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    // The first alone, the six others together.
    assert_eq!(writers(&db, &jobs).await, 2);
    let on: Vec<Uuid> = sqlx::query_scalar(
        "select j.dataset_id from unnest($1::uuid[]) with ordinality as asked(id, n)
         join jobs j on j.id = asked.id order by n",
    )
    .bind(&jobs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(on[1], on[3], "one dataset for both imports into \"shared\"");
    assert_eq!(
        on[2], kept_id,
        "the owner's dataset \"kept\" is imported into"
    );
    // The abandoned dataset is taken over once: both imports into "abandoned" go to the new
    // one, which the second does not take over in turn.
    assert_eq!(
        on[5], on[6],
        "one dataset for both imports into \"abandoned\""
    );
    assert_ne!(on[5], abandoned_id);
    let distinct: std::collections::HashSet<_> = on.iter().collect();
    assert_eq!(distinct.len(), 5);
    let datasets: Vec<(String, String)> =
        sqlx::query_as("select name, state::text from datasets order by name, state::text")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let state = |name: &str, state: &str| (name.to_owned(), state.to_owned());
    assert_eq!(
        datasets,
        [
            state("abandoned", "deleted"),
            state("abandoned", "provisional"),
            state("first", "provisional"),
            state("kept", "ready"),
            state("own", "provisional"),
            state("shared", "provisional"),
        ]
    );
    // Each leased by its insert, but the second into "shared" and into "abandoned": behind the
    // first in its dataset's line, each is queued.
    let leased: Vec<bool> = sqlx::query_scalar(
        "select coalesce(j.lease_owner like 'taker-1-deadbeef/%', false)
         from unnest($1::uuid[]) with ordinality as asked(id, n)
         join jobs j on j.id = asked.id order by n",
    )
    .bind(&jobs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(leased, [true, true, true, false, true, true, false]);
    let mut queued: Vec<Uuid> = sqlx::query_scalar(
        "select (convert_from(job, 'UTF8')::jsonb ->> 'job_id')::uuid from apalis.jobs",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    queued.sort();
    let mut behind = vec![jobs[3], jobs[6]];
    behind.sort();
    assert_eq!(queued, behind);
    server.stop().await;
}

/// More imports than may wait for a group: the 128 that may wait go in groups of at most 32,
/// and the one past them is made alone, by its own request.
#[tokio::test]
async fn groups_hold_at_most_32_and_an_import_past_128_waiting_is_made_alone() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let made = made_at_once(&db, &server, &Groups::new(None), &sets(130), None, None).await;
    let jobs: Vec<Uuid> = made.into_iter().map(|made| made.unwrap().job.id).collect();
    let groups: Vec<i64> = sqlx::query_scalar(
        "select count(*) from jobs where id = any($1) group by xmin::text order by 1",
    )
    .bind(&jobs)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // The leader's first import, the one past those waiting, and four groups.
    assert_eq!(groups, [1, 1, 32, 32, 32, 32]);
    server.stop().await;
}
