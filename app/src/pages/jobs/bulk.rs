//! The selection bar: cancel or retry the selected jobs, or every job the filter selects. Each
//! asks the server first how many jobs the action applies to (a dry run) and shows that count
//! to confirm; the rows then change live as the action goes through them. Disabled, saying why,
//! for viewers.

use std::collections::HashSet;

use leptos::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    api,
    bulk::{BulkAction, BulkOutcome},
    job_list::{ListQuery, PageAt},
    model::{count_of, thousands},
    session::use_session,
};

/// Which jobs an action is for.
#[derive(Clone, Debug, PartialEq)]
enum Scope {
    Selected(Vec<Uuid>),
    Matching,
}

/// An action waiting for its confirmation, with the count it applies to.
#[derive(Clone, Debug, PartialEq)]
struct Pending {
    action: BulkAction,
    scope: Scope,
    matched: i64,
}

#[component]
pub fn BulkBar(query: ListQuery, selected: RwSignal<HashSet<Uuid>>) -> impl IntoView {
    let session = use_session();
    let me = untrack(|| session.me());
    let Some(me) = me else {
        // A visitor has no jobs to act on.
        return ().into_any();
    };
    let refused = (!me.role.may_change()).then_some("Viewers can see jobs but not change them");
    // The filter as `POST /api/jobs/bulk` takes it: the list's query string without its page.
    let filter = query.at(PageAt::Newest).to_query_string();
    let pending = RwSignal::new(None::<Pending>);
    let busy = RwSignal::new(false);
    let said = RwSignal::new(None::<Result<String, String>>);

    let filter = StoredValue::new(filter);
    let ask = move |action: BulkAction, matching: bool| {
        move |_| {
            let scope = if matching {
                Scope::Matching
            } else {
                Scope::Selected(selected.read_untracked().iter().copied().collect())
            };
            let request = filter.with_value(|filter| request(action, &scope, filter, true));
            busy.set(true);
            said.set(None);
            leptos::task::spawn_local(async move {
                match send(request).await {
                    Ok(outcome) => pending.set(Some(Pending {
                        action,
                        scope,
                        matched: outcome.matched,
                    })),
                    Err(message) => said.set(Some(Err(message))),
                }
                busy.set(false);
            });
        }
    };
    let confirm = move |_| {
        let Some(Pending { action, scope, .. }) = pending.get_untracked() else {
            return;
        };
        let request = filter.with_value(|filter| request(action, &scope, filter, false));
        busy.set(true);
        leptos::task::spawn_local(async move {
            match send(request).await {
                Ok(outcome) => {
                    said.set(Some(Ok(report(&outcome))));
                    selected.set(HashSet::new());
                }
                Err(message) => said.set(Some(Err(message))),
            }
            pending.set(None);
            busy.set(false);
        });
    };
    let none_selected = move || selected.read().is_empty();
    let disabled = move || busy.get() || refused.is_some();
    let selected_count = move || selected.read().len();
    view! {
        <div class="bulk" data-testid="bulk-bar">
            {move || match pending.get() {
                Some(Pending { action, scope, matched }) => {
                    let question = match (matched, &scope) {
                        (0, _) => format!("No job here can be {}.", past(action)),
                        (n, Scope::Selected(ids)) => format!(
                            "{} {} of the {} selected?",
                            action.verb(),
                            count_of(n, "job"),
                            thousands(ids.len() as i64),
                        ),
                        (n, Scope::Matching) => format!(
                            "{} all {} this filter selects?",
                            action.verb(),
                            count_of(n, "job"),
                        ),
                    };
                    view! {
                        <p role="alert" data-testid="bulk-confirm">
                            {question} " "
                            <button on:click=confirm disabled=move || busy.get() || matched == 0
                                data-testid="bulk-go">
                                {format!("{} {}", action.verb(), count_of(matched, "job"))}
                            </button>
                            " "
                            <button class="secondary" on:click=move |_| pending.set(None)>"Back"</button>
                        </p>
                    }
                    .into_any()
                }
                None => view! {
                    <span class="bulk-actions">
                        <button class="secondary" data-testid="cancel-selected" title=refused
                            disabled=move || disabled() || none_selected()
                            on:click=ask(BulkAction::Cancel, false)>
                            "Cancel selected (" {selected_count} ")"
                        </button>
                        <button class="secondary" data-testid="retry-selected" title=refused
                            disabled=move || disabled() || none_selected()
                            on:click=ask(BulkAction::Retry, false)>
                            "Retry selected (" {selected_count} ")"
                        </button>
                        <button class="secondary" data-testid="cancel-matching" title=refused
                            disabled=disabled on:click=ask(BulkAction::Cancel, true)>
                            "Cancel all matching…"
                        </button>
                        <button class="secondary" data-testid="retry-matching" title=refused
                            disabled=disabled on:click=ask(BulkAction::Retry, true)>
                            "Retry all matching…"
                        </button>
                    </span>
                }
                .into_any(),
            }}
            {move || said.get().map(|said| match said {
                Ok(text) => view! { <p class="ok" role="status" data-testid="bulk-done">{text}</p> }.into_any(),
                Err(text) => view! { <p class="error" role="alert">{text}</p> }.into_any(),
            })}
        </div>
    }
    .into_any()
}

/// The body of `POST /api/jobs/bulk`.
fn request(action: BulkAction, scope: &Scope, filter: &str, dry_run: bool) -> Value {
    match scope {
        Scope::Selected(ids) => json!({ "action": action, "ids": ids, "dryRun": dry_run }),
        Scope::Matching => json!({ "action": action, "filter": filter, "dryRun": dry_run }),
    }
}

async fn send(body: Value) -> Result<BulkOutcome, String> {
    let answer = api::call("POST", "/api/jobs/bulk", Some(body)).await?;
    serde_json::from_value(answer).map_err(|e| e.to_string())
}

fn past(action: BulkAction) -> &'static str {
    match action {
        BulkAction::Cancel => "cancelled",
        BulkAction::Retry => "retried",
    }
}

/// "Retried 3,210 jobs; 4 had moved on." and where it stopped.
fn report(outcome: &BulkOutcome) -> String {
    let verb = match outcome.action {
        BulkAction::Cancel => "Cancelled",
        BulkAction::Retry => "Retried",
    };
    let mut text = format!("{verb} {}.", count_of(outcome.changed, "job"));
    let left = outcome.matched - outcome.changed;
    if let Some(limit) = outcome.stopped_at_limit {
        text.push_str(&format!(
            " Stopped at your limit of {} live jobs; retry the rest once some have ended.",
            thousands(limit)
        ));
    } else if left > 0 {
        text.push_str(&format!(
            " {} had moved on or could not be {}.",
            thousands(left),
            past(outcome.action)
        ));
    }
    text
}
