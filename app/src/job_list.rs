//! The job list's question and answer, shared by `GET /api/jobs`, the `/jobs` page and its live
//! stream: which jobs ([`JobFilter`]), where in the list ([`PageAt`]), how many ([`ListQuery`]),
//! and the answer ([`JobPage`], with [`StatusCount`]s). A query string parses and prints the same
//! way everywhere, so a page's URL is its API call and back and forward work.
//!
//! The list is newest first, ordered by `(created_at, id)`; a [`Cursor`] is one job's place in
//! that order, so a page is "the next `limit` jobs before (or after) this place" and never an
//! offset.

use std::{fmt, str::FromStr};

use chrono::{DateTime, FixedOffset, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{JobKind, JobStatus, JobView};

/// The page sizes the list offers; the API takes any size from 1 to [`MAX_LIMIT`].
pub const PAGE_SIZES: [i64; 4] = [25, 50, 100, 200];
pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;

/// The longest search, owner or dataset accepted.
const MAX_TEXT_CHARS: usize = 200;

/// Times outside 1970–9999 name no job (and PostgreSQL's range ends sooner than chrono's).
fn in_range(at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (0..=253_402_300_799)
        .contains(&at.timestamp())
        .then_some(at)
}

/// Which jobs: every condition given must hold (an empty filter lists every job).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFilter {
    /// Any of these statuses (`status=failed,cancelled`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<JobStatus>,
    /// Any of these kinds (`type=import`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<JobKind>,
    /// The owner's email or id (`owner=`); members only ever see their own jobs anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The dataset's exact name (`dataset=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// Created at or after this instant (`from=`, a date or an RFC 3339 time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_from: Option<DateTime<Utc>>,
    /// Created before this instant (`to=`; a date means the end of that day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_to: Option<DateTime<Utc>>,
    /// Only jobs with rows in error (`errors=1`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_row_errors: bool,
    /// The file name or dataset name contains it, or the job id starts with it (`q=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

/// One job's place in the list: `<microseconds since 1970>_<id as 32 hex digits>` in URLs.
/// Clients treat it as opaque. Ordered as the list is, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

impl Cursor {
    pub fn of(job: &JobView) -> Self {
        Self {
            created_at: job.created_at,
            id: job.id,
        }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_{}",
            self.created_at.timestamp_micros(),
            self.id.simple()
        )
    }
}

impl FromStr for Cursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("\"{text}\" is not a place in the list: pass back a cursor we gave.");
        let (micros, id) = text.split_once('_').ok_or_else(bad)?;
        let created_at = micros
            .parse()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .and_then(in_range)
            .ok_or_else(bad)?;
        let id = Uuid::try_parse(id).map_err(|_| bad())?;
        Ok(Self { created_at, id })
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// In the API's schema: an opaque string.
#[cfg(feature = "ssr")]
impl utoipa::PartialSchema for Cursor {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .description(Some(
                "A job's place in the list: pass back as `before` or `after`.",
            ))
            .examples(["1763890000123456_0193a1b2c3d4e5f60718293a4b5c6d7e"])
            .into()
    }
}

#[cfg(feature = "ssr")]
impl utoipa::ToSchema for Cursor {}

/// Where in the list a page is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PageAt {
    /// The first page: the newest jobs.
    #[default]
    Newest,
    /// The jobs just older than the cursor (`before=`).
    Before(Cursor),
    /// The jobs just newer than the cursor (`after=`).
    After(Cursor),
}

/// A request for one page of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub filter: JobFilter,
    pub at: PageAt,
    pub limit: i64,
}

impl Default for ListQuery {
    fn default() -> Self {
        Self {
            filter: JobFilter::default(),
            at: PageAt::Newest,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl ListQuery {
    /// Reads a query string's pairs; unknown names are ignored, a bad value is an error that
    /// names it. `status` and `type` may repeat (a form's checkboxes) or list words with
    /// commas. A date in `from`/`to` is a day in the time zone `tz` (minutes east of UTC, as
    /// the page's form sends it; UTC without it).
    pub fn parse<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, String> {
        let mut query = Self::default();
        let (mut from, mut to, mut tz) = (None, None, 0);
        for (name, value) in pairs {
            let value = value.as_ref().trim();
            if value.is_empty() {
                continue;
            }
            let filter = &mut query.filter;
            let name = name.as_ref();
            if matches!(name, "owner" | "dataset" | "q") && value.chars().count() > MAX_TEXT_CHARS {
                return Err(format!(
                    "\"{name}\" must be at most {MAX_TEXT_CHARS} characters."
                ));
            }
            match name {
                "status" => add_words(&mut filter.statuses, value, "status", parse_status)?,
                "type" => add_words(&mut filter.kinds, value, "type", parse_kind)?,
                "owner" => filter.owner = Some(value.to_lowercase()),
                "dataset" => filter.dataset = Some(value.to_owned()),
                "from" => from = Some(value.to_owned()),
                "to" => to = Some(value.to_owned()),
                "tz" => {
                    tz = value
                        .parse()
                        .ok()
                        .filter(|minutes: &i32| minutes.abs() <= 18 * 60)
                        .ok_or("\"tz\" must be minutes east of UTC (-1080 to 1080).")?;
                }
                "errors" => {
                    filter.with_row_errors = match value {
                        "1" | "true" | "yes" | "on" => true,
                        "0" | "false" | "no" => false,
                        _ => return Err("\"errors\" must be 1 or 0.".into()),
                    }
                }
                "q" => filter.search = Some(value.to_owned()),
                "before" => query.at = PageAt::Before(value.parse()?),
                "after" => query.at = PageAt::After(value.parse()?),
                "limit" => {
                    query.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| format!("\"limit\" must be from 1 to {MAX_LIMIT}."))?;
                }
                _ => {}
            }
        }
        let zone = FixedOffset::east_opt(tz * 60).unwrap_or(FixedOffset::east_opt(0).unwrap());
        query.filter.created_from = from.map(|v| instant(&v, "from", zone, false)).transpose()?;
        query.filter.created_to = to.map(|v| instant(&v, "to", zone, true)).transpose()?;
        Ok(query)
    }

    /// Parses a query string (without its `?`).
    pub fn from_query_string(query: &str) -> Result<Self, String> {
        Self::parse(form_urlencoded::parse(query.as_bytes()))
    }

    /// The query string (without `?`) that [`Self::parse`] reads back as this query.
    pub fn to_query_string(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        let filter = &self.filter;
        if !filter.statuses.is_empty() {
            let statuses: Vec<_> = filter.statuses.iter().map(|s| s.as_str()).collect();
            out.append_pair("status", &statuses.join(","));
        }
        if !filter.kinds.is_empty() {
            let kinds: Vec<_> = filter.kinds.iter().map(|k| k.as_str()).collect();
            out.append_pair("type", &kinds.join(","));
        }
        for (name, value) in [
            ("owner", &filter.owner),
            ("dataset", &filter.dataset),
            ("q", &filter.search),
        ] {
            if let Some(value) = value {
                out.append_pair(name, value);
            }
        }
        for (name, value) in [("from", filter.created_from), ("to", filter.created_to)] {
            if let Some(value) = value {
                out.append_pair(name, &value.to_rfc3339());
            }
        }
        if filter.with_row_errors {
            out.append_pair("errors", "1");
        }
        match self.at {
            PageAt::Newest => {}
            PageAt::Before(cursor) => {
                out.append_pair("before", &cursor.to_string());
            }
            PageAt::After(cursor) => {
                out.append_pair("after", &cursor.to_string());
            }
        }
        if self.limit != DEFAULT_LIMIT {
            out.append_pair("limit", &self.limit.to_string());
        }
        out.finish()
    }

    /// The same question at another place in the list.
    pub fn at(&self, at: PageAt) -> Self {
        Self { at, ..self.clone() }
    }
}

/// Adds a comma-separated list of words, each read by `parse`, to `out` (once each).
fn add_words<T: PartialEq>(
    out: &mut Vec<T>,
    value: &str,
    name: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<(), String> {
    for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let item = parse(word).ok_or_else(|| format!("\"{name}\" cannot be \"{word}\"."))?;
        if !out.contains(&item) {
            out.push(item);
        }
    }
    Ok(())
}

fn parse_status(word: &str) -> Option<JobStatus> {
    JobStatus::ALL.into_iter().find(|s| s.as_str() == word)
}

fn parse_kind(word: &str) -> Option<JobKind> {
    JobKind::ALL.into_iter().find(|k| k.as_str() == word)
}

/// An RFC 3339 time, or a date in `zone`: its start, or with `end_of_day` the start of the
/// next.
fn instant(
    value: &str,
    name: &str,
    zone: FixedOffset,
    end_of_day: bool,
) -> Result<DateTime<Utc>, String> {
    // A `+` offset that reached us unencoded was read as a space.
    if let Ok(time) = DateTime::parse_from_rfc3339(&value.replace(' ', "+")) {
        return Ok(time.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .and_then(|date| {
            if end_of_day {
                date.succ_opt()
            } else {
                Some(date)
            }
        })
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .and_then(|time| time.and_local_timezone(zone).single())
        .map(|time| time.with_timezone(&Utc))
        .ok_or_else(|| {
            format!("\"{name}\" must be a date (2026-11-23) or a time (2026-11-23T09:30:00Z).")
        })
}

/// A search's job id prefix: its hex digits, when it is nothing else (dashes aside).
pub fn id_prefix(search: &str) -> Option<String> {
    let hex: String = search.chars().filter(|c| *c != '-').collect();
    (!hex.is_empty() && hex.len() <= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

impl JobFilter {
    /// Whether `job` is one this filter lists (the owner as the server resolved it: `owner_id`);
    /// the live list uses it to tell a new job that belongs on the page from one that does not.
    pub fn matches(&self, job: &JobView) -> bool {
        let owner_ok = self.owner.as_deref().is_none_or(|owner| {
            job.owner_email.as_deref() == Some(owner) || job.owner.to_string() == owner
        });
        let search_ok = self.search.as_deref().is_none_or(|search| {
            let search = search.to_lowercase();
            let contains = |text: &Option<String>| {
                text.as_ref()
                    .is_some_and(|t| t.to_lowercase().contains(&search))
            };
            contains(&job.filename)
                || contains(&job.dataset)
                || id_prefix(&search)
                    .is_some_and(|prefix| job.id.simple().to_string().starts_with(&prefix))
        });
        (self.statuses.is_empty() || self.statuses.contains(&job.status))
            && (self.kinds.is_empty() || self.kinds.contains(&job.job_type))
            && owner_ok
            && self
                .dataset
                .as_ref()
                .is_none_or(|d| job.dataset.as_ref() == Some(d))
            && self.created_from.is_none_or(|from| job.created_at >= from)
            && self.created_to.is_none_or(|to| job.created_at < to)
            && (!self.with_row_errors || job.rows_failed > 0)
            && search_ok
    }

    /// Whether only the owner, kind and status narrow it: its counts are exact, from counters.
    pub fn is_counted(&self) -> bool {
        self.dataset.is_none()
            && self.created_from.is_none()
            && self.created_to.is_none()
            && !self.with_row_errors
            && self.search.is_none()
    }
}

/// How many jobs of the filter (without its statuses) have a status: exact, or at least
/// `count` when `or_more` (counted up to a cap, for filters no counter covers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StatusCount {
    pub status: JobStatus,
    pub count: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub or_more: bool,
}

/// A page of the list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `before` for the next older page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older: Option<Cursor>,
    /// Pass as `after` for the next newer page; absent on the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer: Option<Cursor>,
    /// The newest job the filter selected when the page was read, wherever the page is: a job
    /// newer than this is new to the reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<Cursor>,
    /// Per status, for the filter without its statuses, every status listed.
    pub counts: Vec<StatusCount>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_string_reads_back_as_itself() {
        let query = ListQuery::from_query_string(
            "status=failed,cancelled&type=import&owner=Ann@Example.com&dataset=people\
             &from=2026-11-01&to=2026-11-02&errors=1&q=report+2026%25&limit=25\
             &before=1763890000123456_0193a1b2c3d4e5f60718293a4b5c6d7e",
        )
        .unwrap();
        assert_eq!(
            query.filter.statuses,
            [JobStatus::Failed, JobStatus::Cancelled]
        );
        assert_eq!(query.filter.owner.as_deref(), Some("ann@example.com"));
        assert_eq!(query.filter.search.as_deref(), Some("report 2026%"));
        assert_eq!(
            query.filter.created_to.unwrap().to_rfc3339(),
            "2026-11-03T00:00:00+00:00"
        );
        assert!(matches!(query.at, PageAt::Before(_)));
        assert_eq!(
            ListQuery::from_query_string(&query.to_query_string()),
            Ok(query)
        );
    }

    #[test]
    fn repeated_words_add_up_and_dates_are_days_in_the_given_zone() {
        let query = ListQuery::from_query_string(
            "status=failed&status=running,failed&from=2026-11-23&tz=60",
        )
        .unwrap();
        assert_eq!(
            query.filter.statuses,
            [JobStatus::Failed, JobStatus::Running]
        );
        assert_eq!(
            query.filter.created_from.unwrap().to_rfc3339(),
            "2026-11-22T23:00:00+00:00"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (text, named) in [
            ("status=done", "\"status\""),
            ("limit=0", "\"limit\""),
            ("before=123", "cursor"),
            ("from=yesterday", "\"from\""),
            ("errors=maybe", "\"errors\""),
            ("to=99999-01-01T00:00:00Z", "\"to\""),
            (
                "before=-1000000000000000000_0193a1b2c3d4e5f60718293a4b5c6d7e",
                "cursor",
            ),
        ] {
            let err = ListQuery::from_query_string(text).unwrap_err();
            assert!(err.contains(named), "{text}: {err}");
        }
    }

    #[test]
    fn an_id_prefix_is_hex_only() {
        assert_eq!(id_prefix("0193A1b2-c3"), Some("0193a1b2c3".into()));
        assert_eq!(id_prefix("report"), None);
        assert_eq!(id_prefix("-"), None);
    }
}
