//! Cancel and Retry buttons for a job, on its page and in the job list: Cancel while it waits
//! or runs, Retry once it failed or was cancelled (the server re-runs only what was not done).
//! Shown disabled to those who may not change the job (viewers).

use leptos::prelude::*;
use uuid::Uuid;

use crate::{
    api,
    model::{JobStatus, JobView},
    session::use_session,
};

#[component]
pub fn JobControls(
    id: Uuid,
    #[prop(into)] status: Signal<JobStatus>,
    /// Who owns the job: only they (and admins) may change it.
    owner: Uuid,
    /// Batches are not retried (their children are).
    #[prop(optional)]
    batch: bool,
    /// What the job is ("Import of people.csv"): in a list of jobs, each button is named for
    /// its job.
    #[prop(optional, into)]
    name: Option<String>,
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
    let (cancel_label, retry_label) = (label("Cancel"), label("Retry"));
    let retryable =
        move || !batch && matches!(status.get(), JobStatus::Failed | JobStatus::Cancelled);
    view! {
        <span class="controls">
            <Show when=live>
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
            {move || error.get().map(|message| view! { <span class="error" role="alert">" " {message}</span> })}
        </span>
    }
    // A plain view type: the job list nests this in deep generic types.
    .into_any()
}
