//! `/jobs`: the job list. Its filter, page and size are the URL's query string (the same as
//! `GET /api/jobs`), so a view can be shared and the back button works; counts per status above
//! the rows; keyset pages both ways; bulk actions on the selected rows or on every job the
//! filter selects; rows kept live by the list's event stream.
//!
//! - [`filters`]: the filter form and the counts per status.
//! - [`bulk`]: the selection bar and its confirmation.

mod bulk;
mod filters;

use std::collections::HashSet;

use leptos::prelude::*;
use leptos_router::hooks::use_location;
use uuid::Uuid;

use crate::{
    data::list_jobs,
    job_list::{Cursor, JobPage, ListQuery, PageAt},
    live,
    model::{JobKind, JobView, duration, owner_label, thousands},
    pages::controls::JobControls,
    session::use_session,
    zone::{LocalTime, use_zone},
};

#[component]
pub fn JobsPage() -> impl IntoView {
    let session = use_session();
    let location = use_location();
    let query_string = move || location.search.get().trim_start_matches('?').to_owned();
    let page = Resource::new(query_string, list_jobs);
    view! {
        <section class="card">
            <h1>"Jobs"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading jobs..."</p> }>
                {move || Suspend::new(async move {
                    session.ready().await;
                    let loaded = page.await;
                    let text = location.search.get_untracked();
                    let query = ListQuery::from_query_string(text.trim_start_matches('?'))
                        .unwrap_or_default();
                    let form = view! { <filters::FilterForm query=query.clone() /> };
                    match loaded {
                        Ok(page) => view! { {form} <JobList page query /> }.into_any(),
                        Err(err) => {
                            let message = err.to_string();
                            let message = message
                                .strip_prefix("error running server function: ")
                                .unwrap_or(&message)
                                .to_owned();
                            view! {
                                {form}
                                <p class="error" role="alert">"Cannot list jobs: " {message}</p>
                            }
                            .into_any()
                        }
                    }
                })}
            </Suspense>
        </section>
    }
}

/// The page's place for live changes: which jobs are new to the reader, and whether new ones
/// go on the rows (the first page) or are only counted.
#[derive(Clone, Copy)]
struct Live {
    /// The newest job the filter selected when the page was read.
    top: Option<Cursor>,
    on_top: bool,
    limit: usize,
}

/// Where a live change of a job belongs in the list shown: a job shown is updated in place
/// (even when it no longer matches the filter); a job created since the page was read that
/// matches goes into the rows in list order on the first page, and is counted elsewhere.
/// Anything else (an older job changing) stays off this page.
fn place_update(
    rows: &mut Vec<JobView>,
    fresh: &mut HashSet<Uuid>,
    query: &ListQuery,
    live: Live,
    update: JobView,
) {
    if let Some(row) = rows.iter_mut().find(|row| row.id == update.id) {
        if update.version > row.version {
            *row = update;
        }
        return;
    }
    let is_new = live.top.is_none_or(|top| Cursor::of(&update) > top);
    if !is_new || !query.filter.matches(&update) {
        return;
    }
    if live.on_top {
        rows.push(update);
        rows.sort_by_key(|row| std::cmp::Reverse(Cursor::of(row)));
        rows.truncate(live.limit);
    } else {
        fresh.insert(update.id);
    }
}

/// The counts, the selection bar, the rows and the pager of one page.
#[component]
fn JobList(page: JobPage, query: ListQuery) -> impl IntoView {
    let session = use_session();
    let zone = use_zone();
    // Read once: the page waited for the session before building this.
    let everyone = untrack(|| session.sees_everything());
    // New jobs go on top only on the first page; elsewhere they are counted.
    let live_at = Live {
        top: page.top,
        on_top: page.newer.is_none(),
        limit: query.limit as usize,
    };
    let rows = RwSignal::new(page.jobs);
    let fresh = RwSignal::new(HashSet::<Uuid>::new());
    let selected = RwSignal::new(HashSet::<Uuid>::new());
    {
        let query = query.clone();
        live::subscribe("/api/jobs/events".to_owned(), move |update: JobView| {
            rows.update(|rows| {
                fresh.update(|fresh| place_update(rows, fresh, &query, live_at, update));
            });
            true
        });
    }
    let href = {
        let query = query.clone();
        move |at: PageAt| format!("/jobs?{}", query.at(at).to_query_string())
    };
    let first_page = href(PageAt::Newest);
    let newer = page.newer.map(|cursor| href(PageAt::After(cursor)));
    let older = page.older.map(|cursor| href(PageAt::Before(cursor)));
    let on_changed = Callback::new(move |update: JobView| {
        rows.update(|rows| {
            if let Some(row) = rows.iter_mut().find(|row| row.id == update.id)
                && update.version > row.version
            {
                *row = update;
            }
        });
    });
    let all_selected = move || {
        let rows = rows.read();
        !rows.is_empty() && rows.iter().all(|row| selected.read().contains(&row.id))
    };
    let toggle_all = move |_| {
        let ids: Vec<Uuid> = rows.read().iter().map(|row| row.id).collect();
        let select = !all_selected();
        selected.update(|selected| {
            for id in ids {
                if select {
                    selected.insert(id);
                } else {
                    selected.remove(&id);
                }
            }
        });
    };
    view! {
        <filters::StatusCounts counts=page.counts query=query.clone() />
        <Show when=move || !fresh.read().is_empty()>
            <p class="notice" data-testid="new-jobs">
                {move || match fresh.read().len() {
                    1 => "1 new job. ".to_owned(),
                    n => format!("{} new jobs. ", thousands(n as i64)),
                }}
                <a href=first_page.clone()>"Show the newest"</a>
            </p>
        </Show>
        <bulk::BulkBar query=query.clone() selected />
        <Show
            when=move || !rows.read().is_empty()
            fallback=|| view! { <p class="muted" data-testid="no-jobs">"No jobs here. " <a href="/">"Import a file"</a></p> }
        >
            <div>
                <table class="jobs">
                    <thead>
                        <tr>
                            <th class="pick">
                                <input type="checkbox" aria-label="Select every job on this page"
                                    data-testid="select-all" prop:checked=all_selected
                                    on:change=toggle_all />
                            </th>
                            <th>"Job"</th>
                            <th>"Dataset"</th>
                            {everyone.then_some(view! { <th>"Owner"</th> })}
                            <th>"Status"</th>
                            <th>"Progress"</th>
                            <th>"Created (" {move || zone.label()} ")"</th>
                            <th>"Took"</th>
                            <th><span class="visually-hidden">"Actions"</span></th>
                        </tr>
                    </thead>
                    <tbody>
                        <For
                            each=move || rows.get()
                            key=|job| (job.id, job.version)
                            children=move |job| view! { <JobRow job selected everyone on_changed /> }
                        />
                    </tbody>
                </table>
            </div>
        </Show>
        <nav class="pager" aria-label="Pages">
            {newer.map(|href| view! { <a href=href rel="prev" data-testid="newer">"← Newer"</a> })}
            {older.map(|href| view! { <a href=href rel="next" data-testid="older">"Older →"</a> })}
        </nav>
    }
    // A plain view type: the page nests this in deep generic types.
    .into_any()
}

#[component]
fn JobRow(
    job: JobView,
    selected: RwSignal<HashSet<Uuid>>,
    everyone: bool,
    on_changed: Callback<JobView>,
) -> impl IntoView {
    let (id, status, owner) = (job.id, job.status, job.owner);
    let kind = job.job_type;
    let title = job.title();
    let progress = match job.item_count {
        _ if kind == JobKind::Items => job.rows_line().unwrap_or_default(),
        Some(count) => format!(
            "{}% ({} of {})",
            job.percent(),
            thousands(job.item_progress),
            thousands(count)
        ),
        None if job.item_progress > 0 => format!("{} rows so far", thousands(job.item_progress)),
        None => "-".to_owned(),
    };
    let written = job.written_line().map(|line| format!(", {line}"));
    let errors = (job.rows_failed > 0).then(|| {
        view! { <span class="error-count">{format!(", {} in error", thousands(job.rows_failed))}</span> }
    });
    let took = job.elapsed_seconds.map(duration).unwrap_or_default();
    let short_id = short_id(id);
    let checked = move || selected.read().contains(&id);
    let toggle = move |_| {
        selected.update(|selected| {
            if !selected.remove(&id) {
                selected.insert(id);
            }
        })
    };
    view! {
        <tr data-testid="job-row" data-status=job.status.as_str() data-id=id.to_string()>
            <td class="pick">
                <input type="checkbox" aria-label=format!("Select {title}") prop:checked=checked
                    on:change=toggle />
            </td>
            <td class="title">
                <a href=format!("/jobs/{id}") aria-label=format!("{title} ({id})")>{title.clone()}</a>
                <code class="id" title=id.to_string()>{short_id}</code>
            </td>
            <td>{job.dataset.clone().unwrap_or_default()}</td>
            {everyone.then(|| view! { <td data-testid="job-owner">{owner_label(job.owner_email.as_deref())}</td> })}
            <td data-testid="job-status">{job.status.as_str()}</td>
            <td>{progress}{written}{errors}</td>
            <td class="when"><LocalTime at=job.created_at /></td>
            <td class="when">{took}</td>
            <td class="actions">
                <JobControls id status=Signal::stored(status) owner on_changed kind name=title
                    remedy=job.remedy.clone() dataset_deleted=Signal::stored(job.dataset_deleted) />
            </td>
        </tr>
    }
    .into_any()
}

/// "0193a1b2…6d7e": the time prefix of a UUIDv7 (what a search by id prefix takes) and its last
/// random digits (what tells jobs of the same minute apart).
fn short_id(id: Uuid) -> String {
    let hex = id.simple().to_string();
    format!("{}…{}", &hex[..8], &hex[28..])
}
