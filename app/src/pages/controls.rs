//! Cancel and Retry buttons for a job, on its page and in the job list: Cancel while it waits
//! or runs, Retry once it failed or was cancelled (the server re-runs only what was not done).
//! Shown disabled to those who may not change the job (viewers). A failure that would fail the
//! same way again offers what fixes it instead of Retry: a link to the job page's [`Fix`].

use leptos::prelude::*;
use uuid::Uuid;

use crate::{
    api,
    model::{JobKind, JobStatus, JobView, Remedy},
    session::use_session,
};

#[component]
pub fn JobControls(
    id: Uuid,
    #[prop(into)] status: Signal<JobStatus>,
    /// Who owns the job: only they (and admins) may change it.
    owner: Uuid,
    /// Batches are not retried (their children are), nor yet jobs of registered types;
    /// deletions are not cancelled (their dataset is gone already).
    kind: JobKind,
    /// What the job is ("Import of people.csv"): in a list of jobs, each button is named for
    /// its job.
    #[prop(optional, into)]
    name: Option<String>,
    /// What fixes the job's failure, when retrying cannot.
    #[prop(optional, into)]
    remedy: MaybeProp<Remedy>,
    /// Its dataset has been deleted: an import or export of it is not retried.
    #[prop(optional, into)]
    dataset_deleted: Signal<bool>,
    /// Called with the job as the server answered.
    on_changed: Callback<JobView>,
) -> impl IntoView {
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let act = move |action: &'static str| {
        move |_| {
            busy.set(true);
            error.set(None);
            leptos::task::spawn_local(async move {
                match api::job_action(id, action).await {
                    Ok(job) => on_changed.run(job),
                    Err(message) => error.set(Some(message)),
                }
                busy.set(false);
            });
        }
    };
    let session = use_session();
    let refused = move || !session.may_change(owner);
    let disabled = move || busy.get() || refused();
    let why = move || {
        refused().then_some(match session.me() {
            Some(me) if !me.role.may_change() => "Viewers can see jobs but not change them",
            _ => "Only the job's owner (or an admin) can change it",
        })
    };
    let live = move || matches!(status.get(), JobStatus::Waiting | JobStatus::Running);
    let label = move |verb: &str| name.as_ref().map(|name| format!("{verb} {name}"));
    let (cancel_label, retry_label, fix_label) = (label("Cancel"), label("Retry"), label("Fix"));
    let finished_badly = move || matches!(status.get(), JobStatus::Failed | JobStatus::Cancelled);
    let retryable = move || {
        let gone = dataset_deleted.get() && kind != JobKind::Delete;
        let retried = kind != JobKind::Batch;
        retried && !gone && finished_badly() && remedy.read().is_none()
    };
    let cancellable = move || kind != JobKind::Delete && live();
    let fix = move || {
        remedy.get().filter(|_| finished_badly()).map(|remedy| {
            view! {
                <a class="button secondary" data-testid="fix-job" href=format!("/jobs/{id}#fix")
                    aria-label=fix_label.clone()>
                    {remedy.action()}
                </a>
            }
        })
    };
    view! {
        <span class="controls">
            <Show when=cancellable>
                <button class="secondary" data-testid="cancel-job" disabled=disabled title=why
                    aria-label=cancel_label.clone() on:click=act("cancel")>
                    "Cancel"
                </button>
            </Show>
            <Show when=retryable>
                <button class="secondary" data-testid="retry-job" disabled=disabled title=why
                    aria-label=retry_label.clone() on:click=act("retry")>
                    "Retry"
                </button>
            </Show>
            {fix}
            {move || error.get().map(|message| view! { <span class="error" role="alert">" " {message}</span> })}
        </span>
    }
    // A plain view type: the job list nests this in deep generic types.
    .into_any()
}

/// What fixes a failure another attempt would repeat, on the job page (`#fix`): import another
/// sheet of the same workbook, or export the dataset as CSV. Only the job's owner can (the
/// upload and the dataset name are theirs); others are told so.
#[component]
pub fn Fix(#[prop(into)] job: Signal<JobView>) -> impl IntoView {
    let session = use_session();
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = leptos_router::hooks::use_navigate();
    let start = move |body: serde_json::Value| {
        let navigate = navigate.clone();
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::create_job(body).await {
                Ok(job_id) => navigate(&format!("/jobs/{job_id}"), Default::default()),
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };
    let sheet = RwSignal::new(String::new());
    move || {
        let job = job.get();
        let remedy = job
            .remedy
            .clone()
            .filter(|_| job.status == JobStatus::Failed)?;
        let owner = session.me().is_some_and(|me| me.id == job.owner);
        let dataset = job.dataset.clone().unwrap_or_default();
        let start = start.clone();
        let action = if !owner {
            view! {
                <p class="muted">"Only the job's owner can do this: their file and dataset."</p>
            }
            .into_any()
        } else {
            match remedy.clone() {
                Remedy::OtherSheet { sheets, file_guid } => {
                    if sheet.get_untracked().is_empty() {
                        sheet.set(sheets.first().cloned().unwrap_or_default());
                    }
                    // Rebuilt whenever the job changes: the option chosen so far stays chosen.
                    let chosen = sheet.get_untracked();
                    let options = sheets
                        .into_iter()
                        .map(|name| {
                            let selected = name == chosen;
                            view! { <option value=name.clone() selected=selected>{name.clone()}</option> }
                        })
                        .collect_view();
                    let submit = move |ev: leptos::ev::SubmitEvent| {
                        ev.prevent_default();
                        start(serde_json::json!({
                            "jobType": "import", "fileGuid": file_guid,
                            "dataset": dataset.clone(), "sheet": sheet.get_untracked(),
                        }));
                    };
                    view! {
                        <form on:submit=submit>
                            <label>
                                "Sheet "
                                <select data-testid="fix-sheet"
                                    on:change=move |ev| sheet.set(event_target_value(&ev))>
                                    {options}
                                </select>
                            </label>
                            " "
                            <button type="submit" data-testid="fix-submit" disabled=move || busy.get()>
                                "Import this sheet"
                            </button>
                        </form>
                    }
                    .into_any()
                }
                Remedy::ExportCsv => {
                    let click = move |_| {
                        start(serde_json::json!({
                            "jobType": "export", "dataset": dataset.clone(), "format": "csv",
                        }));
                    };
                    view! {
                        <button data-testid="fix-submit" disabled=move || busy.get() on:click=click>
                            "Export as CSV"
                        </button>
                    }
                    .into_any()
                }
            }
        };
        Some(view! {
            <div id="fix" class="fix" data-testid="job-fix">
                <p>
                    <strong>{remedy.action()}</strong>
                    ": retrying would fail the same way."
                </p>
                {action}
                {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
            </div>
        })
    }
}
