//! The job list (`GET /api/jobs`): every filter, alone and combined, for every role; keyset
//! pages both ways across their boundaries; and the counts per status, exact after concurrent
//! changes settle.

use std::collections::{HashMap, HashSet};

use app::{
    auth::Role,
    job_list::{JobPage, ListQuery},
    model::{JobKind, JobStatus, JobView},
};
use chrono::{DateTime, Duration, TimeZone, Utc};
use futures::future::join_all;
use reqwest::{Client, StatusCode};
use uuid::Uuid;

use crate::support::{TestDb, TestServer, account, json_of};

/// Who the list is read as.
struct People {
    a: Uuid,
    b: Uuid,
    admin: Client,
    viewer: Client,
    member_a: Client,
}

async fn people(db: &TestDb, server: &TestServer) -> People {
    let a = account(db, "a@example.com", Role::Member).await;
    let b = account(db, "b@example.com", Role::Member).await;
    account(db, "admin@example.com", Role::Admin).await;
    account(db, "viewer@example.com", Role::Viewer).await;
    People {
        a,
        b,
        admin: server.signed_in("admin@example.com").await,
        viewer: server.signed_in("viewer@example.com").await,
        member_a: server.signed_in("a@example.com").await,
    }
}

async fn dataset(db: &TestDb, owner: Uuid, name: &str) -> Uuid {
    sqlx::query_scalar("insert into datasets (id, owner, name) values ($1, $2, $3) returning id")
        .bind(Uuid::now_v7())
        .bind(owner)
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// One job row as a list reads it (the list only reads; how jobs get to these states is the
/// engine's business, tested elsewhere).
struct Seed<'a> {
    owner: Uuid,
    kind: JobKind,
    status: JobStatus,
    dataset: Option<Uuid>,
    filename: Option<&'a str>,
    created_at: DateTime<Utc>,
    rows_failed: i64,
}

async fn seed(db: &TestDb, job: Seed<'_>) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        "insert into jobs (id, kind, owner, status, dataset_id, source_filename, created_at,
                           rows_failed, format)
         values ($1, $2, $3, $4, $5, $6, $7, $8,
                 case when $2 = 'export' then 'csv'::export_format end)",
    )
    .bind(id)
    .bind(job.kind)
    .bind(job.owner)
    .bind(job.status)
    .bind(job.dataset)
    .bind(job.filename)
    .bind(job.created_at)
    .bind(job.rows_failed)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

fn base_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 8, 0, 0).unwrap()
}

/// 60 jobs of two members: every status and kind, two datasets named alike, file names with
/// `_` and `%` in them, some with row errors, and pairs created at the same instant (so the
/// list's order falls back to the id).
async fn sixty_jobs(db: &TestDb, people: &People) {
    let a_people = dataset(db, people.a, "people").await;
    let a_orders = dataset(db, people.a, "orders").await;
    let b_people = dataset(db, people.b, "people").await;
    let b_report = dataset(db, people.b, "q3_report").await;
    for i in 0..60_i64 {
        let owner = if i % 2 == 0 { people.a } else { people.b };
        let kind = match i {
            _ if i % 11 == 0 => JobKind::Batch,
            _ if i % 7 == 0 => JobKind::Export,
            _ => JobKind::Import,
        };
        let dataset = match (kind, i % 2 == 0, i % 3) {
            (JobKind::Batch, ..) => None,
            (_, true, 0) => Some(a_orders),
            (_, true, _) => Some(a_people),
            (_, false, 0) => Some(b_report),
            (_, false, _) => Some(b_people),
        };
        let filename = match (kind, i % 5) {
            (JobKind::Import, 0) => Some("Quarterly_Report 50%.xlsx".to_owned()),
            (JobKind::Import, _) => Some(format!("file-{i}.csv")),
            _ => None,
        };
        seed(
            db,
            Seed {
                owner,
                kind,
                status: JobStatus::ALL[(i % 5) as usize],
                dataset,
                filename: filename.as_deref(),
                created_at: base_time() + Duration::minutes(i / 2),
                rows_failed: if i % 4 == 0 { i } else { 0 },
            },
        )
        .await;
    }
}

async fn page(client: &Client, server: &TestServer, query: &str) -> JobPage {
    json_of(client.get(server.url(&format!("/api/jobs?{query}")))).await
}

fn ids(jobs: &[JobView]) -> Vec<Uuid> {
    jobs.iter().map(|job| job.id).collect()
}

#[tokio::test]
async fn every_filter_selects_exactly_its_jobs_for_every_role() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let people = people(&db, &server).await;
    sixty_jobs(&db, &people).await;

    // Every job, newest first (ties by id): the views the filters are checked against.
    let all = page(&people.admin, &server, "limit=500").await.jobs;
    assert_eq!(all.len(), 60);
    let mut order: Vec<_> = all.iter().map(|j| (j.created_at, j.id)).collect();
    order.sort_by(|x, y| y.cmp(x));
    assert_eq!(
        order,
        all.iter().map(|j| (j.created_at, j.id)).collect::<Vec<_>>()
    );

    let some_id = all[17].id.simple().to_string();
    let from = (base_time() + Duration::minutes(5)).to_rfc3339();
    let to = (base_time() + Duration::minutes(12)).to_rfc3339();
    let queries = [
        "status=failed".to_owned(),
        "status=failed,cancelled".to_owned(),
        "type=export".to_owned(),
        "type=batch,export".to_owned(),
        "owner=a@example.com".to_owned(),
        format!("owner={}", people.b),
        "dataset=people".to_owned(),
        format!("from={from}&to={to}"),
        "errors=1".to_owned(),
        "q=report".to_owned(),
        "q=50%25".to_owned(),
        "q=_".to_owned(),
        format!("q={}", &some_id[..13]),
        format!("q={}", all[3].id),
        "status=failed&owner=a@example.com&type=import&errors=1".to_owned(),
        format!("dataset=people&status=completed,waiting&from={from}"),
        "q=file-1&status=running".to_owned(),
    ];
    for query in &queries {
        let filter = ListQuery::from_query_string(query).unwrap().filter;
        let expected: Vec<Uuid> = all
            .iter()
            .filter(|j| filter.matches(j))
            .map(|j| j.id)
            .collect();
        assert!(
            !expected.is_empty() && expected.len() < 60,
            "{query} should select some jobs, not all: {}",
            expected.len()
        );
        let listed = page(&people.admin, &server, &format!("{query}&limit=500")).await;
        assert_eq!(ids(&listed.jobs), expected, "admin: {query}");
        let viewed = page(&people.viewer, &server, &format!("{query}&limit=500")).await;
        assert_eq!(ids(&viewed.jobs), expected, "viewer: {query}");
        let own: Vec<Uuid> = all
            .iter()
            .filter(|j| filter.matches(j) && j.owner == people.a)
            .map(|j| j.id)
            .collect();
        let member = page(&people.member_a, &server, &format!("{query}&limit=500")).await;
        let a_named = [Some("a@example.com".to_owned()), Some(people.a.to_string())];
        let member_expected = if filter.owner.is_none() || a_named.contains(&filter.owner) {
            own
        } else {
            Vec::new()
        };
        assert_eq!(ids(&member.jobs), member_expected, "member a: {query}");

        // The counts are of the filter without its statuses, per status.
        let mut unstatused = filter.clone();
        unstatused.statuses.clear();
        for count in &listed.counts {
            let truth = all
                .iter()
                .filter(|j| unstatused.matches(j) && j.status == count.status)
                .count() as i64;
            assert_eq!(
                (count.count, count.or_more),
                (truth, false),
                "{query}: {count:?}"
            );
        }
    }

    // Spot checks that do not lean on `matches`.
    let failed = page(&people.admin, &server, "status=failed&limit=500").await;
    assert_eq!(failed.jobs.len(), 12);
    assert!(failed.jobs.iter().all(|j| j.status == JobStatus::Failed));
    let literal = page(&people.admin, &server, "q=50%25&limit=500").await;
    assert!(
        literal
            .jobs
            .iter()
            .all(|j| j.filename.as_deref() == Some("Quarterly_Report 50%.xlsx"))
    );
    let day = page(
        &people.admin,
        &server,
        "from=2026-11-01&to=2026-11-01&limit=500",
    )
    .await;
    assert_eq!(day.jobs.len(), 60, "a date as `to` is the end of that day");
    assert!(
        page(&people.admin, &server, "to=2026-10-31")
            .await
            .jobs
            .is_empty()
    );
    let unknown = page(&people.admin, &server, "owner=nobody@example.com").await;
    assert!(unknown.jobs.is_empty());
    assert!(unknown.counts.iter().all(|c| c.count == 0));
    let others = page(&people.member_a, &server, "owner=b@example.com").await;
    assert!(others.jobs.is_empty());

    // A bad parameter is named, not ignored.
    let response = people
        .admin
        .get(server.url("/api/jobs?status=done"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "\"status\" cannot be \"done\".");
    server.stop().await;
}

#[tokio::test]
async fn counts_no_counter_covers_stop_at_the_cap_and_say_so() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let people = people(&db, &server).await;
    let people_of_a = dataset(&db, people.a, "people").await;
    sqlx::query(
        "insert into jobs (id, kind, owner, status, dataset_id, created_at)
         select gen_random_uuid(), 'import', $1,
                case when i % 2 = 0 then 'completed'::job_status else 'failed' end, $2,
                now() - make_interval(secs => i)
         from generate_series(1, 2101) i",
    )
    .bind(people.a)
    .bind(people_of_a)
    .execute(&db.pool)
    .await
    .unwrap();
    let capped = page(&people.admin, &server, "dataset=people&limit=1").await;
    let count = |status| {
        capped
            .counts
            .iter()
            .find(|c| c.status == status)
            .copied()
            .unwrap()
    };
    // Counted among the newest 1,000: half of each status, all marked "or more".
    let (completed, failed) = (count(JobStatus::Completed), count(JobStatus::Failed));
    assert_eq!(completed.count + failed.count, 1000);
    assert!((490..=510).contains(&completed.count), "{completed:?}");
    assert!(capped.counts.iter().all(|c| c.or_more));
    let few = page(
        &people.admin,
        &server,
        "dataset=people&to=2000-01-01&limit=1",
    )
    .await;
    assert!(
        few.counts
            .iter()
            .all(|c| (c.count, c.or_more) == (0, false))
    );
    // Only owner and kind narrow it: exact, from the counters.
    let exact = page(&people.admin, &server, "owner=a@example.com&limit=1").await;
    let completed = exact
        .counts
        .iter()
        .find(|c| c.status == JobStatus::Completed)
        .unwrap();
    assert_eq!((completed.count, completed.or_more), (1050, false));
    server.stop().await;
}

#[tokio::test]
async fn a_search_finds_its_jobs_by_few_or_many_file_names() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let people = people(&db, &server).await;
    // 1,002 distinct names, two jobs for one of them: "many-" matches more names than a search
    // looks up one by one, and falls back to the jobs' own trigram index.
    sqlx::query(
        "insert into jobs (id, kind, owner, status, source_filename, created_at)
         select gen_random_uuid(), 'import', $1, 'completed',
                'many-' || least(i, 1002) || '.csv', now() - make_interval(secs => i)
         from generate_series(1, 1003) i",
    )
    .bind(people.a)
    .execute(&db.pool)
    .await
    .unwrap();
    let mut seen = HashSet::new();
    let mut query = "q=many-&limit=500".to_owned();
    loop {
        let page = page(&people.admin, &server, &query).await;
        assert!(
            page.counts.iter().all(|c| c.or_more),
            "more than 1,000 match"
        );
        seen.extend(ids(&page.jobs));
        match page.older {
            Some(older) => query = format!("q=many-&limit=500&before={older}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 1003, "every job, once");
    // A few names: each found by name, with every job of it, and no other name.
    let few = page(&people.admin, &server, "q=MANY-1002.").await;
    assert_eq!(few.jobs.len(), 2);
    assert!(
        few.jobs
            .iter()
            .all(|job| job.filename.as_deref() == Some("many-1002.csv"))
    );
    let own = page(&people.member_a, &server, "q=many-7.csv").await;
    assert_eq!(ids(&own.jobs).len(), 1, "their own");
    server.stop().await;
}

#[tokio::test]
async fn pages_go_both_ways_across_their_boundaries() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let people = people(&db, &server).await;
    sixty_jobs(&db, &people).await;
    // Counted filters page through the table; the others, matching fewer than the count cap
    // here, page among the matches the count read (in list order, or in none for a search).
    for filter in [
        "",
        "status=failed,completed&",
        "dataset=people&",
        "q=file&status=failed,completed&",
    ] {
        let everything = ids(&page(&people.admin, &server, &format!("{filter}limit=500"))
            .await
            .jobs);
        // Older, page by page, from the first.
        let first = page(&people.admin, &server, &format!("{filter}limit=7")).await;
        assert!(first.newer.is_none(), "the first page has nothing newer");
        let mut pages = vec![first];
        while let Some(older) = pages.last().unwrap().older {
            let next = page(
                &people.admin,
                &server,
                &format!("{filter}limit=7&before={older}"),
            )
            .await;
            assert!(next.newer.is_some());
            pages.push(next);
        }
        let walked: Vec<Uuid> = pages.iter().flat_map(|p| ids(&p.jobs)).collect();
        assert_eq!(
            walked, everything,
            "{filter}: older pages cover the list once, in order"
        );
        assert!(pages.iter().rev().skip(1).all(|p| p.jobs.len() == 7));

        // Newer, page by page, from the last: the same pages (the top one is the full first).
        let mut back = vec![pages.last().unwrap().clone()];
        while let Some(newer) = back.last().unwrap().newer {
            back.push(
                page(
                    &people.admin,
                    &server,
                    &format!("{filter}limit=7&after={newer}"),
                )
                .await,
            );
        }
        let back_ids: Vec<Vec<Uuid>> = back.iter().rev().map(|p| ids(&p.jobs)).collect();
        let page_ids: Vec<Vec<Uuid>> = pages.iter().map(|p| ids(&p.jobs)).collect();
        assert_eq!(
            back_ids.first(),
            page_ids.first(),
            "{filter}: back at the top"
        );
        let mut from_back: Vec<Uuid> = back_ids.concat();
        from_back.dedup();
        let unique: HashSet<_> = from_back.iter().collect();
        assert_eq!(unique.len(), from_back.len(), "{filter}: no job twice");
        assert_eq!(
            unique.len(),
            everything.len(),
            "{filter}: no job missed going back"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn counts_are_exact_after_concurrent_changes() {
    let db = TestDb::new().await;
    let server = TestServer::start(&db, None).await;
    let people = people(&db, &server).await;
    let (a, b) = (people.a, people.b);
    let waiting = |owner, i: i64| Seed {
        owner,
        kind: JobKind::Import,
        status: JobStatus::Waiting,
        dataset: None,
        filename: None,
        created_at: base_time() + Duration::seconds(i),
        rows_failed: 0,
    };
    let mut first = Vec::new();
    for i in 0..60 {
        first.push(seed(&db, waiting(if i % 2 == 0 { a } else { b }, i)).await);
    }
    // At once: cancels and retries through the API, more jobs created, finished jobs deleted,
    // and the deltas folded while all that happens.
    let admin = &people.admin;
    let server_ref = &server;
    let cancel_retry = first.iter().enumerate().map(|(i, id)| async move {
        let cancel = admin
            .post(server_ref.url(&format!("/api/jobs/{id}/cancel")))
            .send();
        // A job deleted the moment its cancel committed is not there to answer with.
        let deleted = i % 3 == 1;
        let status = cancel.await.unwrap().status();
        assert!(status == StatusCode::OK || deleted && status == StatusCode::NOT_FOUND);
        if i % 3 == 0 {
            let retry = admin
                .post(server_ref.url(&format!("/api/jobs/{id}/retry")))
                .send();
            assert_eq!(retry.await.unwrap().status(), StatusCode::OK);
        }
    });
    let creates = (0..40).map(|i| seed(&db, waiting(if i % 2 == 0 { a } else { b }, 100 + i)));
    let deletes = async {
        for id in first.iter().skip(1).step_by(3) {
            sqlx::query("delete from jobs where id = $1 and status = 'cancelled'")
                .bind(id)
                .execute(&db.pool)
                .await
                .unwrap();
        }
    };
    let folds = async {
        for _ in 0..20 {
            let mut tx = db.pool.begin().await.unwrap();
            server::store::job_counts::fold(&mut tx).await.unwrap();
            tx.commit().await.unwrap();
        }
    };
    tokio::join!(join_all(cancel_retry), join_all(creates), deletes, folds);

    let truth = |owner: Option<Uuid>| {
        let pool = db.pool.clone();
        async move {
            let rows: Vec<(JobStatus, i64)> = sqlx::query_as(
                "select status, count(*) from jobs where $1::uuid is null or owner = $1
                 group by status",
            )
            .bind(owner)
            .fetch_all(&pool)
            .await
            .unwrap();
            rows.into_iter().collect::<HashMap<_, _>>()
        }
    };
    let shown = |page: JobPage| {
        page.counts
            .into_iter()
            .filter(|c| c.count > 0)
            .map(|c| (c.status, c.count))
            .collect::<HashMap<_, _>>()
    };
    for _ in 0..2 {
        assert_eq!(
            shown(page(admin, &server, "limit=1").await),
            truth(None).await
        );
        assert_eq!(
            shown(page(admin, &server, "limit=1&owner=a@example.com").await),
            truth(Some(a)).await
        );
        assert_eq!(
            shown(page(&people.member_a, &server, "limit=1").await),
            truth(Some(a)).await
        );
        // Once more with every delta folded: the same.
        let mut tx = db.pool.begin().await.unwrap();
        server::store::job_counts::fold(&mut tx).await.unwrap();
        tx.commit().await.unwrap();
    }
    let cancelled = truth(None).await[&JobStatus::Cancelled];
    assert!(cancelled > 0 && truth(None).await[&JobStatus::Waiting] > 40);
    server.stop().await;
}
