//! Which process does a maintenance duty this round: the one that takes the duty's
//! transaction-level advisory lock. No leader election, nothing to hand over: a process that
//! dies mid-round ends its transaction and so its lock, and the next round anywhere takes it.

use sqlx::PgConnection;

/// A duty done by one process at a time; its advisory lock key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    LeaseRescue,
    Requeue,
    BatchSettlement,
    Retention,
    CountFolding,
}

impl Duty {
    /// "conveyor" in ASCII, then the duty's number: keys no other user of the database takes.
    fn key(self) -> i64 {
        const BASE: i64 = 0x636f_6e76_6579_6f72;
        BASE + match self {
            Duty::LeaseRescue => 0,
            Duty::Retention => 1,
            Duty::Requeue => 2,
            Duty::BatchSettlement => 3,
            Duty::CountFolding => 4,
        }
    }
}

/// Whether this transaction now leads `duty` (until it ends); `false` when another process's
/// round holds it.
pub async fn lead(conn: &mut PgConnection, duty: Duty) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select pg_try_advisory_xact_lock($1) as "led!""#,
        duty.key()
    )
    .fetch_one(conn)
    .await
}
