//! Ending assignments (issue 14): results and failures, one or a batch at a time, each counted
//! exactly once.
//!
//! Only an item's current assignment, inside its lease, may end it; anything else (expired,
//! reassigned, never issued) is refused and changes nothing. A batch is one transaction of a
//! few statements whatever its size: its items are locked (in order), then their jobs' trees
//! (`states::item_job::lock_tree`), then the items end together, their follow-up items are
//! added, and each job's counters move once. A failure with a retry keeps the assignment id on
//! the item, so the same failure sent twice is recognised.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    items::{self, AddedBy, NewItem},
    notify,
    states::{self, ChunkState, JobKind, JobStatus, item_job},
};

/// How a worker ended an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Done, with this result (JSON text).
    Done(&'a str),
    /// Failed: tried again after the backoff if `retry` and attempts are left, else failed.
    Failed { message: &'a str, retry: bool },
}

/// An assignment, and how its worker ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending<'a> {
    pub assignment: Uuid,
    pub outcome: Outcome<'a>,
}

/// What ending an assignment did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Recorded: the item is now in `state`.
    Recorded {
        state: ChunkState,
        /// When a failed item that will be tried again becomes due.
        retry_at: Option<DateTime<Utc>>,
    },
    /// This assignment already ended the same way (a request sent again): nothing changed.
    AlreadyRecorded { state: ChunkState },
    /// The job stopped (cancelled or failed): nothing recorded.
    JobStopped(JobStatus),
    /// Not current: the lease expired, or the item was handed to another worker.
    NotCurrent,
    /// The result is larger than the follow-up type takes as a payload: nothing recorded.
    TooLargeForFollowUp { limit: i32 },
}

/// An item an ending names, as locked.
struct Held {
    job_id: Uuid,
    item_no: i64,
    state: ChunkState,
    attempts: i32,
    held: bool,
    ended: bool,
    max_failures_per_item: i32,
    job_type: String,
    backoff_seconds: i32,
    ordered: bool,
    follow_up_limit: Option<i32>,
}

/// Ends assignments of `types`' items with results or failures, in one transaction with their
/// jobs' counters (and the jobs' ends, and their follow-ups). One answer per ending, in order.
pub async fn finish(
    pool: &PgPool,
    types: &[String],
    endings: &[Ending<'_>],
) -> sqlx::Result<Vec<Finished>> {
    let mut tx = pool.begin().await?;
    let ids: Vec<Uuid> = endings.iter().map(|e| e.assignment).collect();
    let found = sqlx::query!(
        r#"select i.assignment as "assignment!", i.job_id, i.item_no,
               i.state as "state: ChunkState", i.attempts,
               coalesce(i.lease_expires_at > now(), false) as "held!",
               i.lease_expires_at is null as "ended!",
               j.max_failures_per_item, j.job_type as "job_type!", t.backoff_seconds, t.ordered,
               f.max_payload_bytes as "follow_up_limit?"
           from job_items i join jobs j on j.id = i.job_id join job_types t on t.name = j.job_type
           left join job_types f on f.name = t.follow_up
           where i.assignment = any($1) and j.job_type = any($2)
           order by i.job_id, i.item_no
           for no key update of i"#,
        &ids,
        types,
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut held: HashMap<Uuid, Held> = found
        .into_iter()
        .map(|row| {
            let item = Held {
                job_id: row.job_id,
                item_no: row.item_no,
                state: row.state,
                attempts: row.attempts,
                held: row.held,
                ended: row.ended,
                max_failures_per_item: row.max_failures_per_item,
                job_type: row.job_type,
                backoff_seconds: row.backoff_seconds,
                ordered: row.ordered,
                follow_up_limit: row.follow_up_limit,
            };
            (row.assignment, item)
        })
        .collect();

    // What each ending can be told without its job; the rest end if their job runs.
    let mut answers: Vec<Option<Finished>> = endings
        .iter()
        .map(|ending| before_job(held.get(&ending.assignment), ending.outcome))
        .collect();
    let jobs: BTreeSet<Uuid> = endings
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_none())
        .filter_map(|(ending, _)| held.get(&ending.assignment).map(|item| item.job_id))
        .collect();
    let jobs: Vec<Uuid> = jobs.into_iter().collect();
    if jobs.is_empty() {
        tx.commit().await?;
        return Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Finished::NotCurrent))
            .collect());
    }
    // Items, then their jobs (as claims take them); the jobs' whole trees, as a job's end may
    // seal its child or end its parent. A cancel waits, or is seen: no item ends uncounted.
    item_job::lock_tree(&mut tx, &jobs).await?;
    let statuses: HashMap<Uuid, (JobStatus, Option<Uuid>)> = sqlx::query!(
        r#"select id, status as "status: JobStatus",
               (select c.id from jobs c where c.parent_id = j.id and c.kind = $2) as follow_up
           from jobs j where id = any($1)"#,
        &jobs,
        JobKind::Items as JobKind,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|job| (job.id, (job.status, job.follow_up)))
    .collect();

    let mut done = Ends::default();
    let mut failed = Failures::default();
    let mut counts: BTreeMap<Uuid, (i32, i32)> = BTreeMap::new();
    let mut ready: BTreeSet<String> = BTreeSet::new();
    let mut follow_ups: BTreeMap<Uuid, Vec<NewItem>> = BTreeMap::new();
    for (at, ending) in endings.iter().enumerate() {
        if answers[at].is_some() {
            continue;
        }
        let Some(item) = held.get_mut(&ending.assignment) else {
            continue;
        };
        let (status, follow_up) = statuses[&item.job_id];
        if status != JobStatus::Running {
            answers[at] = Some(Finished::JobStopped(status));
            continue;
        }
        // A second ending of the same assignment in one batch: the first one counts, and this
        // one is answered as if sent again later.
        if item.ended {
            answers[at] = before_job(Some(item), ending.outcome);
            continue;
        }
        item.ended = true;
        let count = counts.entry(item.job_id).or_default();
        match ending.outcome {
            Outcome::Done(result) => {
                done.push(item, result);
                if let Some(child) = follow_up {
                    follow_ups.entry(child).or_default().push(NewItem {
                        payload: result.to_owned(),
                        // One follow-up per parent item, whatever happens.
                        dedupe_key: Some(format!("parent-item-{}", item.item_no)),
                    });
                }
                count.0 += 1;
                item.state = ChunkState::Done;
            }
            Outcome::Failed { message, retry } => {
                let again = retry && item.attempts < item.max_failures_per_item;
                // The backoff doubles at each attempt: 1×, 2×, 4×… the type's.
                let backoff = again.then(|| {
                    f64::from(item.backoff_seconds) * 2f64.powi((item.attempts - 1).clamp(0, 20))
                });
                failed.push(item, message, backoff);
                if again {
                    ready.insert(item.job_type.clone());
                } else {
                    count.1 += 1;
                    item.state = ChunkState::Failed;
                }
            }
        }
        if item.ordered {
            // The next item of an ordered job may be claimed now.
            ready.insert(item.job_type.clone());
        }
        answers[at] = Some(Finished::Recorded {
            state: item.state,
            retry_at: None,
        });
    }
    states::item::done(&mut tx, &done.jobs, &done.numbers, &done.results).await?;
    let retry_at = states::item::fail_attempt(
        &mut tx,
        &failed.jobs,
        &failed.numbers,
        &failed.messages,
        &failed.backoffs,
    )
    .await?;
    let mut changed = Vec::new();
    for (child, new) in &follow_ups {
        if let Ok(added) = items::add(&mut tx, *child, AddedBy::Chain, new).await?
            && let Some(version) = added.version
        {
            changed.push((*child, version));
        }
    }
    for (job_id, (done, failed)) in counts {
        if done + failed > 0 {
            changed.extend(item_job::add_items(&mut tx, job_id, done, failed).await?);
        }
    }
    for job_type in ready {
        notify::items_ready(&mut tx, &job_type).await?;
    }
    for (job_id, version) in changed {
        notify::job_changed(&mut tx, job_id, version).await?;
    }
    tx.commit().await?;
    // When each item failed with a retry is due again.
    for (answer, ending) in answers.iter_mut().zip(endings) {
        if let (Some(Finished::Recorded { retry_at: at, .. }), Some(item)) =
            (answer.as_mut(), held.get(&ending.assignment))
        {
            *at = retry_at
                .get(&(item.job_id, item.item_no))
                .copied()
                .flatten();
        }
    }
    Ok(answers
        .into_iter()
        .map(|a| a.unwrap_or(Finished::NotCurrent))
        .collect())
}

/// The answer to an ending that does not depend on its job's state, if there is one.
fn before_job(item: Option<&Held>, outcome: Outcome<'_>) -> Option<Finished> {
    let Some(item) = item else {
        return Some(Finished::NotCurrent);
    };
    if item.ended {
        // The assignment ended already: the same ending sent again changes nothing.
        let same = match outcome {
            Outcome::Done(_) => item.state == ChunkState::Done,
            Outcome::Failed { .. } => item.state != ChunkState::Done,
        };
        return Some(if same {
            Finished::AlreadyRecorded { state: item.state }
        } else {
            Finished::NotCurrent
        });
    }
    if item.state != ChunkState::Pending || !item.held {
        return Some(Finished::NotCurrent);
    }
    match (outcome, item.follow_up_limit) {
        (Outcome::Done(result), Some(limit)) if result.len() > limit as usize => {
            Some(Finished::TooLargeForFollowUp { limit })
        }
        _ => None,
    }
}

/// Items done, as columns for one statement.
#[derive(Default)]
struct Ends<'a> {
    jobs: Vec<Uuid>,
    numbers: Vec<i64>,
    results: Vec<&'a str>,
}

impl<'a> Ends<'a> {
    fn push(&mut self, item: &Held, result: &'a str) {
        self.jobs.push(item.job_id);
        self.numbers.push(item.item_no);
        self.results.push(result);
    }
}

/// Failed attempts, as columns for one statement.
#[derive(Default)]
struct Failures<'a> {
    jobs: Vec<Uuid>,
    numbers: Vec<i64>,
    messages: Vec<&'a str>,
    /// Seconds until the next attempt; none: failed for good.
    backoffs: Vec<Option<f64>>,
}

impl<'a> Failures<'a> {
    fn push(&mut self, item: &Held, message: &'a str, backoff: Option<f64>) {
        self.jobs.push(item.job_id);
        self.numbers.push(item.item_no);
        self.messages.push(message);
        self.backoffs.push(backoff);
    }
}
