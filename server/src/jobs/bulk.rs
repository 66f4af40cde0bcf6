//! Bulk actions: cancel or retry every selected job (chosen rows, or every job a filter of the
//! list selects), set-based, [`BATCH`] jobs per transaction, each batch the same transitions
//! (`store::states::job`) one job's cancel or retry makes, with its notifications, and its count
//! added to the action's audit log entry in the same transaction.
//!
//! Each transition names the state it expects, so a job that moved on after it was selected (a
//! failed job retried by someone else that then completed) is left alone. The action covers the
//! jobs created before it began: it walks them oldest first and stops at its start.
//!
//! People acting on their own jobs are held to their limit of live jobs: a retry goes on while
//! it leaves room and reports where it stopped. Admins are not: they act for the operation.

use app::job_list::Cursor;
use app::{
    bulk::{BulkAction, BulkOutcome},
    job_list::JobFilter,
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    auth::Sees,
    store::{
        self, audit,
        job_list::{self, Owners, Selection},
        jobs, notify, states,
    },
};

/// Jobs changed per transaction.
pub const BATCH: i64 = 500;

/// The selection narrowed to the jobs `action` applies to.
pub fn applicable(action: BulkAction, ids: Option<Vec<Uuid>>, filter: JobFilter) -> Selection {
    let mut filter = filter;
    filter.statuses = narrowed(&filter.statuses, action.applies_to());
    filter.kinds = narrowed(&filter.kinds, action.applies_to_kinds());
    Selection { ids, filter }
}

/// The items of `asked` (every one when empty) that are also in `allowed`. Empty when none of
/// them is: [`may_match`] then says the selection holds nothing (an empty list in a filter
/// means "any").
fn narrowed<T: Copy + PartialEq>(asked: &[T], allowed: &[T]) -> Vec<T> {
    if asked.is_empty() {
        return allowed.to_vec();
    }
    asked
        .iter()
        .copied()
        .filter(|t| allowed.contains(t))
        .collect()
}

/// Whether the selection can hold any job at all.
fn may_match(selection: &Selection) -> bool {
    !selection.filter.statuses.is_empty() && !selection.filter.kinds.is_empty()
}

/// How many jobs the action would apply to now.
pub async fn preview(pool: &PgPool, owners: Owners, selection: &Selection) -> sqlx::Result<i64> {
    if !may_match(selection) {
        return Ok(0);
    }
    job_list::count_matching(pool, owners, selection).await
}

/// Who acts, and under which limit.
#[derive(Debug, Clone, Copy)]
pub struct Actor {
    pub id: Uuid,
    pub acts: Sees,
    /// The most live jobs an owner acting on their own jobs may have (`None`: not held to it).
    pub limit: Option<i64>,
}

/// Attempts of one batch that a deadlock or serialization failure aborted (another
/// transaction locking some of the same rows in another order: a lease rescue, retention).
const BATCH_ATTEMPTS: u32 = 5;

/// Runs the action over the selection (the jobs created before it began);
/// `selection_asked` is recorded in the audit log as asked.
pub async fn run(
    pool: &PgPool,
    actor: Actor,
    owners: Owners,
    action: BulkAction,
    mut selection: Selection,
    selection_asked: serde_json::Value,
) -> sqlx::Result<BulkOutcome> {
    // The database's clock, as `created_at` is.
    let began = store::now(pool).await?;
    let filter = &mut selection.filter;
    filter.created_to = Some(filter.created_to.map_or(began, |to| to.min(began)));
    let matched = preview(pool, owners, &selection).await?;
    let audit_id = audit::begin(pool, actor.id, action, &selection_asked, matched).await?;
    let mut outcome = BulkOutcome {
        action,
        matched,
        changed: 0,
        audit_id: Some(audit_id),
        stopped_at_limit: None,
    };
    let walked = walk(
        pool,
        actor,
        owners,
        action,
        &selection,
        audit_id,
        &mut outcome,
    )
    .await;
    let error = walked
        .as_ref()
        .err()
        .map(|err| crate::incident::error("bulk action", err).sentence());
    audit::finish(pool, audit_id, error.as_deref()).await?;
    walked.map(|()| outcome)
}

/// Goes through the selection a batch at a time, adding what each changed to `outcome`.
async fn walk(
    pool: &PgPool,
    actor: Actor,
    owners: Owners,
    action: BulkAction,
    selection: &Selection,
    audit_id: i64,
    outcome: &mut BulkOutcome,
) -> sqlx::Result<()> {
    let mut after = None;
    let mut attempt = 1;
    while may_match(selection) {
        match batch(pool, actor, owners, action, selection, after, audit_id).await {
            Ok(Batch::Changed {
                last,
                changed,
                more,
            }) => {
                outcome.changed += changed;
                after = Some(last);
                attempt = 1;
                if !more {
                    return Ok(());
                }
            }
            Ok(Batch::Done) => return Ok(()),
            Ok(Batch::AtLimit(limit)) => {
                outcome.stopped_at_limit = Some(limit);
                return Ok(());
            }
            Err(err) if attempt < BATCH_ATTEMPTS && is_lock_conflict(&err) => attempt += 1,
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// What one batch did.
enum Batch {
    Changed {
        last: Cursor,
        changed: i64,
        /// The batch was full: there may be more.
        more: bool,
    },
    /// Nothing left.
    Done,
    /// The owner's live jobs are at their limit, and jobs are left.
    AtLimit(i64),
}

/// One batch, in one transaction: the next jobs after `after`, changed, notified, counted.
async fn batch(
    pool: &PgPool,
    actor: Actor,
    owners: Owners,
    action: BulkAction,
    selection: &Selection,
    after: Option<Cursor>,
    audit_id: i64,
) -> sqlx::Result<Batch> {
    let mut tx = pool.begin().await?;
    let mut size = BATCH;
    if let (BulkAction::Retry, Some(limit), Sees::OwnedBy(owner)) =
        (action, actor.limit, actor.acts)
    {
        // Held until the batch commits, so no create or retry of theirs slips in between.
        jobs::hold_owners_jobs(&mut tx, owner).await?;
        size = size.min(limit - jobs::live_jobs(&mut tx, owner).await?.limited);
        if size <= 0 {
            let left = job_list::matching_ids(&mut tx, owners, selection, after, 1).await?;
            return Ok(if left.is_empty() {
                Batch::Done
            } else {
                Batch::AtLimit(limit)
            });
        }
    }
    let places = job_list::matching_ids(&mut tx, owners, selection, after, size).await?;
    let Some(&last) = places.last() else {
        return Ok(Batch::Done);
    };
    let ids: Vec<Uuid> = places.iter().map(|place| place.id).collect();
    let changed = match action {
        BulkAction::Cancel => states::job::cancel(&mut tx, &ids, actor.acts).await?,
        BulkAction::Retry => states::job::retry(&mut tx, &ids, actor.acts).await?,
    };
    for &(id, version) in &changed {
        notify::job_changed(&mut tx, id, version).await?;
    }
    audit::add_changed(&mut tx, audit_id, changed.len() as i64).await?;
    tx.commit().await?;
    Ok(Batch::Changed {
        last,
        changed: changed.len() as i64,
        more: places.len() as i64 == size,
    })
}

/// A deadlock or serialization failure: PostgreSQL aborted this transaction so another could
/// go on; the same work can be tried again.
fn is_lock_conflict(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001")))
}

#[cfg(test)]
mod tests {
    use app::model::{JobKind, JobStatus};

    use super::*;

    #[test]
    fn a_selection_keeps_only_what_the_action_applies_to() {
        let filter = JobFilter {
            statuses: vec![JobStatus::Failed, JobStatus::Completed],
            kinds: vec![JobKind::Batch],
            ..JobFilter::default()
        };
        let selection = applicable(BulkAction::Retry, None, filter);
        assert_eq!(selection.filter.statuses, [JobStatus::Failed]);
        assert!(selection.filter.kinds.is_empty());
        assert!(!may_match(&selection));
        let selection = applicable(BulkAction::Cancel, None, JobFilter::default());
        assert_eq!(
            selection.filter.statuses,
            [JobStatus::Waiting, JobStatus::Running]
        );
    }
}
