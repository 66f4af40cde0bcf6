//! What an import's page adds from its review: the mapping it used, the import it fixes, and
//! the next step after it — import the rows a dry run checked, or fix the rows in error and
//! import them again (`/?fixes=<job>&dataset=<name>`, whose review links the new import back).

use leptos::prelude::*;

use crate::{
    api,
    model::{JobKind, JobStatus, JobView, count_of},
    session::use_session,
};

/// The mapping the import used, the import it fixes.
#[component]
pub fn ImportReview(#[prop(into)] job: Signal<JobView>) -> impl IntoView {
    move || {
        let job = job.get();
        let fixes = job.fixes.map(|fixed| {
            view! {
                <p class="muted" data-testid="job-fixes">
                    "Fixes the rows in error of " <a href=format!("/jobs/{fixed}")>"an earlier import"</a> "."
                </p>
            }
        });
        let mapping = job.mapping.map(|mapping| {
            let rows = mapping
                .into_iter()
                .map(|(file, column)| {
                    let to = column.unwrap_or_else(|| "(ignored)".to_owned());
                    view! { <tr><td>{file}</td><td>{to}</td></tr> }
                })
                .collect_view();
            view! {
                <details class="mapping" data-testid="job-mapping">
                    <summary>"Where the file's columns went"</summary>
                    <table class="jobs">
                        <thead><tr><th>"File column"</th><th>"Dataset column"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </details>
            }
        });
        view! { {fixes} {mapping} }
    }
}

/// After a dry run: import its rows. After an import with rows in error: fix them. Only the
/// job's owner can (the upload and the dataset are theirs).
#[component]
pub fn NextStep(#[prop(into)] job: Signal<JobView>) -> impl IntoView {
    let session = use_session();
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = leptos_router::hooks::use_navigate();
    let import = move |id| {
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::call("POST", &format!("/api/jobs/{id}/import"), None).await {
                Ok(created) => {
                    let id = created["id"].as_str().unwrap_or_default().to_owned();
                    navigate(&format!("/jobs/{id}"), Default::default());
                }
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };
    move || {
        let job = job.get();
        let own = session.me().is_some_and(|me| me.id == job.owner) && session.may_create();
        if !own || job.job_type != JobKind::Import || job.status != JobStatus::Completed {
            return None;
        }
        let import = import.clone();
        let dry_run = job.dry_run.then(|| {
            let label = if job.rows_failed > 0 {
                format!("Import the {} without errors", count_of(job.rows_ok, "row"))
            } else {
                "Import these rows".to_owned()
            };
            view! {
                <button
                    data-testid="import-dry-run"
                    disabled=move || busy.get()
                    on:click=move |_| import(job.id)
                >
                    {label}
                </button>
            }
        });
        // A dry run's rows in error are fixed by importing its good rows first, then these.
        let fix = (job.rows_failed > 0 && !job.dry_run).then(|| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("fixes", &job.id.to_string());
            if let Some(dataset) = &job.dataset {
                query.append_pair("dataset", dataset);
            }
            view! {
                <a class="button secondary" data-testid="fix-and-reimport" href=format!("/?{}", query.finish())>
                    "Fix the rows in error and import them"
                </a>
            }
        });
        Some(view! {
            <p class="actions next-step">
                {dry_run}
                {fix}
            </p>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
        })
    }
}
