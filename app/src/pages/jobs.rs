//! `/jobs`: every job, newest first, with live status and progress.

use leptos::prelude::*;

use crate::{
    data::list_jobs,
    live,
    model::{JobKind, JobView, owner_label, thousands},
    pages::controls::JobControls,
    session::use_session,
};

#[component]
pub fn JobsPage() -> impl IntoView {
    let session = use_session();
    let jobs = Resource::new(|| (), |_| list_jobs(String::new()));
    view! {
        <section class="card">
            <h1>"Jobs"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading jobs..."</p> }>
                {move || Suspend::new(async move {
                    session.ready().await;
                    match jobs.await {
                        Ok(page) => view! { <LiveJobTable jobs=page.jobs /> }.into_any(),
                        Err(err) => {
                            view! { <p class="error">"Cannot load jobs: " {err.to_string()}</p> }
                                .into_any()
                        }
                    }
                })}
            </Suspense>
        </section>
    }
}

/// The table, kept current by the job list's event stream.
#[component]
fn LiveJobTable(jobs: Vec<JobView>) -> impl IntoView {
    let rows = RwSignal::new(jobs);
    // Read once: the page waited for the session before building this.
    let everyone = untrack(|| use_session().sees_everything());
    live::subscribe("/api/jobs/events".to_owned(), move |update: JobView| {
        rows.update(|rows| apply_update(rows, update));
        true
    });
    view! {
        <Show
            when=move || !rows.read().is_empty()
            fallback=|| view! { <p class="muted">"No jobs yet. " <a href="/">"Import a file"</a></p> }
        >
            <table class="jobs">
                <thead>
                    <tr>
                        <th>"Job"</th>
                        <th>"What"</th>
                        <th>"Dataset"</th>
                        {everyone.then_some(view! { <th>"Owner"</th> })}
                        <th>"Status"</th>
                        <th>"Progress"</th>
                        <th>"Created"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    <For
                        each=move || rows.get()
                        key=|job| (job.id, job.version)
                        children=move |job| view! { <JobRow job rows everyone /> }
                    />
                </tbody>
            </table>
        </Show>
    }
}

#[component]
fn JobRow(job: JobView, rows: RwSignal<Vec<JobView>>, everyone: bool) -> impl IntoView {
    let on_changed = Callback::new(move |update: JobView| {
        rows.update(|rows| apply_update(rows, update));
    });
    let (id, status, owner) = (job.id, job.status, job.owner);
    let batch = job.job_type == JobKind::Batch;
    let progress = match job.item_count {
        Some(count) => format!(
            "{}% ({} of {})",
            job.percent(),
            thousands(job.item_progress),
            thousands(count)
        ),
        None if job.item_progress > 0 => format!("{} rows so far", thousands(job.item_progress)),
        None => "-".to_owned(),
    };
    view! {
        <tr data-testid="job-row" data-status=job.status.as_str()>
            <td>
                <a href=format!("/jobs/{}", job.id)>{job.id.to_string()[..8].to_owned()}</a>
            </td>
            <td>{job.title()}</td>
            <td>{job.dataset.clone().unwrap_or_default()}</td>
            {everyone.then(|| view! { <td data-testid="job-owner">{owner_label(job.owner_email.as_deref())}</td> })}
            <td data-testid="job-status">{job.status.as_str()}</td>
            <td>{progress}</td>
            <td>{job.created_at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
            <td>
                <JobControls id status=Signal::stored(status) owner on_changed batch />
            </td>
        </tr>
    }
    .into_any()
}

/// Replaces the job with the same id when the update is newer, or puts a new job first.
fn apply_update(rows: &mut Vec<JobView>, update: JobView) {
    match rows.iter_mut().find(|row| row.id == update.id) {
        Some(row) if update.version > row.version => *row = update,
        Some(_) => {}
        None => rows.insert(0, update),
    }
}
