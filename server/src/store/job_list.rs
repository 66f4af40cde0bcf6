//! The job list: which jobs a [`JobFilter`] selects, a page of them in list order, capped counts
//! for filters no counter covers, and the ids a bulk action works through.
//!
//! These statements are built per request (`QueryBuilder`), the one place outside
//! `leases`/`queue` that is not compile-checked: the filter decides which conditions exist, and
//! a statement holding only those lets the planner pick the index for them (one prepared
//! statement with `$n is null or …` for every filter would be planned once for all of them, and
//! badly). They select ids only; the jobs' views come from the compile-checked
//! [`super::jobs::find_many`].

use app::{
    job_list::{Cursor, JobFilter, JobPage, ListQuery, PageAt, StatusCount, id_prefix},
    model::{JobStatus, JobView},
};
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::{job_counts, jobs};
use crate::auth::Sees;

/// Counts for filters without counters look at this many jobs at most ("1,000+").
pub const COUNT_CAP: i64 = 1000;

/// A search looks for jobs by the distinct file names it matches when there are at most this
/// many (each found by equality); past it, by the pattern on the jobs' own trigram index.
const NAMES_CAP: i64 = 1000;

/// Whose jobs a request lists: the reader's scope and the filter's owner together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    Any,
    Only(Uuid),
    /// The filter names someone the reader cannot see, or no one: an empty list.
    Nobody,
}

impl Owners {
    /// What `sees` and the filter's owner (an email or an id) leave.
    pub async fn resolve(pool: &PgPool, sees: Sees, owner: Option<&str>) -> sqlx::Result<Self> {
        let named = match owner {
            None => None,
            Some(text) => match Uuid::try_parse(text) {
                Ok(id) => Some(Some(id)),
                Err(_) => Some(
                    sqlx::query_scalar!("select id from users where email = $1", text)
                        .fetch_optional(pool)
                        .await?,
                ),
            },
        };
        Ok(match (sees, named) {
            (Sees::Nothing, _) | (_, Some(None)) => Self::Nobody,
            (Sees::Everything, None) => Self::Any,
            (Sees::Everything, Some(Some(id))) => Self::Only(id),
            (Sees::OwnedBy(me), None) => Self::Only(me),
            (Sees::OwnedBy(me), Some(Some(id))) if id == me => Self::Only(me),
            (Sees::OwnedBy(_), Some(Some(_))) => Self::Nobody,
        })
    }
}

/// The jobs a bulk action works on: those of a filter, or these ids (with the filter's
/// statuses and kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub ids: Option<Vec<Uuid>>,
    pub filter: JobFilter,
}

/// A selection's conditions with what the database says first: whose jobs, and the ids of the
/// datasets its dataset name names (so the condition is `dataset_id = $1`, which an index
/// returns in list order, rather than a join). `None` when it can select nothing.
struct Conditions<'a> {
    owner: Option<Uuid>,
    datasets: Option<Vec<Uuid>>,
    /// The file names a search matches, when there are few (see [`NAMES_CAP`]).
    names: Option<Vec<String>>,
    ids: Option<&'a [Uuid]>,
    filter: &'a JobFilter,
}

impl<'a> Conditions<'a> {
    async fn resolve(
        conn: &mut PgConnection,
        owners: Owners,
        filter: &'a JobFilter,
        ids: Option<&'a [Uuid]>,
    ) -> sqlx::Result<Option<Self>> {
        let owner = match owners {
            Owners::Nobody => return Ok(None),
            Owners::Any => None,
            Owners::Only(id) => Some(id),
        };
        let datasets = match &filter.dataset {
            None => None,
            Some(name) => {
                let found = sqlx::query_scalar!(
                    "select id from datasets where name = $1 and ($2::uuid is null or owner = $2)",
                    name,
                    owner,
                )
                .fetch_all(&mut *conn)
                .await?;
                if found.is_empty() {
                    return Ok(None);
                }
                Some(found)
            }
        };
        let names = match &filter.search {
            None => None,
            Some(search) => {
                let found = sqlx::query_scalar!(
                    "select name from job_file_names where name ilike $1 limit $2",
                    like_pattern(search),
                    NAMES_CAP + 1,
                )
                .fetch_all(&mut *conn)
                .await?;
                (found.len() as i64 <= NAMES_CAP).then_some(found)
            }
        };
        Ok(Some(Self {
            owner,
            datasets,
            names,
            ids,
            filter,
        }))
    }

    /// ` and …` for each condition, with `statuses` for the statuses.
    fn push(&self, sql: &mut QueryBuilder<Postgres>, statuses: &[JobStatus]) {
        let filter = self.filter;
        if let Some(ids) = self.ids {
            sql.push(" and j.id = any(").push_bind(ids).push(")");
        }
        if let Some(owner) = self.owner {
            sql.push(" and j.owner = ").push_bind(owner);
        }
        // One value as `=`: an index on (column, created_at) then gives rows in list order,
        // which `= any(…)` does not on PostgreSQL 15.
        match statuses {
            [] => {}
            [status] => {
                sql.push(" and j.status = ").push_bind(*status);
            }
            _ => {
                sql.push(" and j.status = any(")
                    .push_bind(statuses)
                    .push(")");
            }
        }
        match &filter.kinds[..] {
            [] => {}
            [kind] => {
                sql.push(" and j.kind = ").push_bind(*kind);
            }
            kinds => {
                sql.push(" and j.kind = any(").push_bind(kinds).push(")");
            }
        }
        match self.datasets.as_deref() {
            None => {}
            Some([dataset]) => {
                sql.push(" and j.dataset_id = ").push_bind(*dataset);
            }
            Some(datasets) => {
                sql.push(" and j.dataset_id = any(")
                    .push_bind(datasets)
                    .push(")");
            }
        }
        if let Some(from) = filter.created_from {
            sql.push(" and j.created_at >= ").push_bind(from);
        }
        if let Some(to) = filter.created_to {
            sql.push(" and j.created_at < ").push_bind(to);
        }
        if filter.with_row_errors {
            sql.push(" and j.rows_failed > 0");
        }
        if let Some(search) = &filter.search {
            // Each branch can use its own index (the file names' equality or trigram, trigram
            // on datasets, primary key), combined by a bitmap OR; the datasets' ids are read
            // once (an init plan).
            let pattern = like_pattern(search);
            match &self.names {
                Some(names) => sql
                    .push(" and (j.source_filename = any(")
                    .push_bind(names.clone())
                    .push(")"),
                None => sql
                    .push(" and (j.source_filename ilike ")
                    .push_bind(pattern.clone()),
            };
            sql.push(" or j.dataset_id = any(array(select id from datasets where name ilike ")
                .push_bind(pattern)
                .push("))");
            if let Some((low, high)) = id_prefix(search).and_then(|prefix| id_range(&prefix)) {
                sql.push(" or j.id between ")
                    .push_bind(low)
                    .push(" and ")
                    .push_bind(high);
            }
            sql.push(")");
        }
    }
}

/// One page of the list, with the counts per status.
pub async fn page(pool: &PgPool, owners: Owners, query: &ListQuery) -> sqlx::Result<JobPage> {
    let mut conn = pool.acquire().await?;
    let Some(conditions) = Conditions::resolve(&mut conn, owners, &query.filter, None).await?
    else {
        return Ok(JobPage {
            jobs: Vec::new(),
            older: None,
            newer: None,
            top: None,
            counts: JobStatus::ALL
                .into_iter()
                .map(|status| StatusCount {
                    status,
                    count: 0,
                    or_more: false,
                })
                .collect(),
        });
    };
    let Tally { counts, every } = tally(&mut conn, &conditions).await?;
    let source = match &every {
        Some(every) => Source::These {
            every,
            statuses: &query.filter.statuses,
        },
        None => Source::Table(&conditions),
    };
    let limit = query.limit;
    let mut places = source.places(&mut conn, query.at, limit).await?;
    let mut newer = None;
    let mut older = None;
    match query.at {
        PageAt::Newest | PageAt::Before(_) => {
            if places.len() as i64 > limit {
                places.truncate(limit as usize);
                older = places.last().copied();
            }
            if let PageAt::Before(at) = query.at {
                newer = Some(places.first().copied().unwrap_or(at));
            }
        }
        PageAt::After(at) => {
            if places.len() as i64 <= limit {
                // Back at the top: the first page, full, rather than its last few jobs.
                places = source.places(&mut conn, PageAt::Newest, limit).await?;
                if places.len() as i64 > limit {
                    places.truncate(limit as usize);
                    older = places.last().copied();
                }
            } else {
                places.truncate(limit as usize);
                places.reverse();
                newer = places.first().copied();
                older = Some(places.last().copied().unwrap_or(at));
            }
        }
    }
    let top = match newer {
        None => places.first().copied(),
        Some(_) => source
            .places(&mut conn, PageAt::Newest, 0)
            .await?
            .first()
            .copied(),
    };
    drop(conn);
    let ids: Vec<Uuid> = places.iter().map(|place| place.id).collect();
    let mut jobs = jobs::find_many(pool, &ids, Sees::Everything).await?;
    jobs.sort_by_key(|job| std::cmp::Reverse((job.created_at, job.id)));
    Ok(JobPage {
        jobs,
        older,
        newer,
        top,
        counts,
    })
}

/// The newest jobs of `owners` the filter selects, for a live list's resync.
pub async fn newest(
    pool: &PgPool,
    owners: Owners,
    filter: &JobFilter,
    limit: i64,
) -> sqlx::Result<Vec<JobView>> {
    let query = ListQuery {
        filter: filter.clone(),
        at: PageAt::Newest,
        limit,
    };
    Ok(page(pool, owners, &query).await?.jobs)
}

/// Where a page's places come from: the table, or every matching job already read.
enum Source<'a> {
    Table(&'a Conditions<'a>),
    These {
        every: &'a [(JobStatus, Cursor)],
        statuses: &'a [JobStatus],
    },
}

impl Source<'_> {
    /// Up to `limit + 1` places of the page (one more tells whether the list goes on), in the
    /// direction of travel: newest first, or oldest first for [`PageAt::After`].
    async fn places(
        &self,
        conn: &mut PgConnection,
        at: PageAt,
        limit: i64,
    ) -> sqlx::Result<Vec<Cursor>> {
        match self {
            Self::Table(conditions) => table_places(conn, conditions, at, limit).await,
            Self::These { every, statuses } => Ok(places_among(every, statuses, at, limit)),
        }
    }
}

/// [`table_places`] among every matching job's place, already read.
fn places_among(
    every: &[(JobStatus, Cursor)],
    statuses: &[JobStatus],
    at: PageAt,
    limit: i64,
) -> Vec<Cursor> {
    let mut places: Vec<Cursor> = every
        .iter()
        .filter(|(status, _)| statuses.is_empty() || statuses.contains(status))
        .map(|(_, place)| *place)
        .filter(|place| match at {
            PageAt::Newest => true,
            PageAt::Before(at) => *place < at,
            PageAt::After(at) => *place > at,
        })
        .collect();
    places.sort_unstable();
    if !matches!(at, PageAt::After(_)) {
        places.reverse();
    }
    places.truncate(limit as usize + 1);
    places
}

async fn table_places(
    conn: &mut PgConnection,
    conditions: &Conditions<'_>,
    at: PageAt,
    limit: i64,
) -> sqlx::Result<Vec<Cursor>> {
    let mut sql = QueryBuilder::new("select j.created_at, j.id from jobs j where true");
    conditions.push(&mut sql, &conditions.filter.statuses);
    let ascending = match at {
        PageAt::Newest => false,
        PageAt::Before(at) => {
            push_place(&mut sql, "<", at);
            false
        }
        PageAt::After(at) => {
            push_place(&mut sql, ">", at);
            true
        }
    };
    sql.push(if ascending {
        " order by j.created_at, j.id limit "
    } else {
        " order by j.created_at desc, j.id desc limit "
    });
    sql.push_bind(limit + 1);
    places(sql, conn).await
}

async fn places(
    mut sql: QueryBuilder<Postgres>,
    conn: &mut PgConnection,
) -> sqlx::Result<Vec<Cursor>> {
    let rows: Vec<(chrono::DateTime<chrono::Utc>, Uuid)> =
        sql.build_query_as().fetch_all(conn).await?;
    Ok(rows
        .into_iter()
        .map(|(created_at, id)| Cursor { created_at, id })
        .collect())
}

/// The counts shown above the list, and every matching job's place when they are few.
struct Tally {
    counts: Vec<StatusCount>,
    every: Option<Vec<(JobStatus, Cursor)>>,
}

/// Exact counts from the counters when only owner and kind narrow the filter. Else the first
/// [`COUNT_CAP`] + 1 matching jobs of any status are read: when there are no more than
/// [`COUNT_CAP`], they are counted exactly and the page is cut from them; when there are more,
/// every count is of the first [`COUNT_CAP`] found and marked "or more".
///
/// A search reads them in no order, so the planner takes the cheapest path to them: for a rare
/// file name, the trigram index (at 10M jobs in `make bench`, 180 ms where walking the list
/// order to the last of 171 matches took 1.6 s). Other filters read them in list order, along
/// the index the page uses: without an order, a filter matching many jobs (a dataset name
/// every owner has) is planned as a bitmap of all of them (850 ms for 1M matches).
async fn tally(conn: &mut PgConnection, conditions: &Conditions<'_>) -> sqlx::Result<Tally> {
    let filter = conditions.filter;
    if filter.is_counted() {
        return Ok(Tally {
            counts: job_counts::exact(&mut *conn, conditions.owner, &filter.kinds).await?,
            every: None,
        });
    }
    let mut sample =
        QueryBuilder::new("select j.status, j.created_at, j.id from jobs j where true");
    conditions.push(&mut sample, &[]);
    if filter.search.is_none() {
        sample.push(" order by j.created_at desc, j.id desc");
    }
    sample.push(" limit ").push_bind(COUNT_CAP + 1);
    let rows: Vec<(JobStatus, chrono::DateTime<chrono::Utc>, Uuid)> =
        sample.build_query_as().fetch_all(conn).await?;
    let capped = rows.len() as i64 > COUNT_CAP;
    let counted = &rows[..rows.len().min(COUNT_CAP as usize)];
    let counts = JobStatus::ALL
        .into_iter()
        .map(|status| StatusCount {
            status,
            count: counted.iter().filter(|row| row.0 == status).count() as i64,
            or_more: capped,
        })
        .collect();
    let every = (!capped).then(|| {
        rows.into_iter()
            .map(|(status, created_at, id)| (status, Cursor { created_at, id }))
            .collect()
    });
    Ok(Tally { counts, every })
}

/// How many jobs of `owners` the selection holds now (for a bulk action's confirmation):
/// from the counters when they cover it.
pub async fn count_matching(
    pool: &PgPool,
    owners: Owners,
    selection: &Selection,
) -> sqlx::Result<i64> {
    let mut conn = pool.acquire().await?;
    let ids = selection.ids.as_deref();
    let Some(conditions) = Conditions::resolve(&mut conn, owners, &selection.filter, ids).await?
    else {
        return Ok(0);
    };
    let filter = &selection.filter;
    if ids.is_none() && filter.is_counted() {
        let counts = job_counts::exact(&mut conn, conditions.owner, &filter.kinds).await?;
        return Ok(counts
            .iter()
            .filter(|c| filter.statuses.is_empty() || filter.statuses.contains(&c.status))
            .map(|c| c.count)
            .sum());
    }
    let mut sql = QueryBuilder::new("select count(*) from jobs j where true");
    conditions.push(&mut sql, &filter.statuses);
    sql.build_query_scalar().fetch_one(&mut *conn).await
}

/// The next `limit` jobs of the selection after `after` in list order (oldest first, so jobs
/// created meanwhile come last).
pub async fn matching_ids(
    conn: &mut PgConnection,
    owners: Owners,
    selection: &Selection,
    after: Option<Cursor>,
    limit: i64,
) -> sqlx::Result<Vec<Cursor>> {
    let ids = selection.ids.as_deref();
    let Some(conditions) = Conditions::resolve(&mut *conn, owners, &selection.filter, ids).await?
    else {
        return Ok(Vec::new());
    };
    let mut sql = QueryBuilder::new("select j.created_at, j.id from jobs j where true");
    conditions.push(&mut sql, &selection.filter.statuses);
    if let Some(after) = after {
        push_place(&mut sql, ">", after);
    }
    sql.push(" order by j.created_at, j.id limit ");
    sql.push_bind(limit);
    places(sql, conn).await
}

/// `and (j.created_at, j.id) <op> (at)`.
fn push_place(sql: &mut QueryBuilder<Postgres>, op: &str, at: Cursor) {
    sql.push(" and (j.created_at, j.id) ")
        .push(op)
        .push(" (")
        .push_bind(at.created_at)
        .push(", ")
        .push_bind(at.id)
        .push(")");
}

/// `%text%`, with `text` matched literally.
fn like_pattern(text: &str) -> String {
    format!("%{}%", escape_like(text))
}

/// `text` matched literally by `LIKE` (whose escape character is `\`).
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The first and last ids starting with these hex digits.
fn id_range(prefix: &str) -> Option<(Uuid, Uuid)> {
    let pad = |digit: char| {
        let mut hex = prefix.to_owned();
        hex.extend(std::iter::repeat_n(digit, 32 - prefix.len()));
        Uuid::try_parse(&hex).ok()
    };
    Some((pad('0')?, pad('f')?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_match_literally() {
        assert_eq!(escape_like(r"50%_a\b"), r"50\%\_a\\b");
    }

    #[test]
    fn an_id_prefix_is_a_range() {
        let (low, high) = id_range("0193a").unwrap();
        assert_eq!(low.simple().to_string(), format!("0193a{}", "0".repeat(27)));
        assert_eq!(
            high.simple().to_string(),
            format!("0193a{}", "f".repeat(27))
        );
    }
}
