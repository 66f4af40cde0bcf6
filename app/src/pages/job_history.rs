//! The job page's history (`app::history`): what it waits for, its changes of status, its
//! parts, and every run of its steps and parts, with the worker, duration and outcome. Read
//! with the page, and again as the job moves on: at each change of status or failed part and
//! every twentieth of its parts (not per part, so a long job costs a few reads, not thousands).

use leptos::prelude::*;
use uuid::Uuid;

use crate::{
    data::get_job_history,
    history::{Chunks, JobHistory, Run, Waiting},
    model::{JobView, duration, thousands},
    zone::LocalTime,
};

#[component]
pub fn History(id: Uuid, state: RwSignal<JobView>) -> impl IntoView {
    let stage = move || {
        let job = state.read();
        let twentieths = i64::from(job.chunks_done) * 20 / i64::from(job.chunks_total.max(1));
        (job.status, job.failed_parts.len(), twentieths)
    };
    let history = Resource::new(stage, move |_| get_job_history(id));
    let created = state.read_untracked().created_at;
    view! {
        <section class="card history" data-testid="job-history">
            <h2>"History"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading the history..."</p> }>
                {move || Suspend::new(async move {
                    match history.await {
                        Ok(Some(history)) => view! { <Body history created /> }.into_any(),
                        Ok(None) => ().into_any(),
                        Err(err) => {
                            view! {
                                <p class="error">"Cannot load the history: " {err.to_string()}</p>
                            }
                                .into_any()
                        }
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn Body(history: JobHistory, created: chrono::DateTime<chrono::Utc>) -> impl IntoView {
    let JobHistory {
        transitions,
        runs,
        chunks,
        waiting,
    } = history;
    let transitions = transitions
        .into_iter()
        .map(|t| {
            view! {
                <li>
                    <LocalTime at=t.at />
                    {format!(" {} → {}", t.from.as_str(), t.to.as_str())}
                </li>
            }
        })
        .collect_view();
    view! {
        {waiting.map(|waiting| view! { <WaitingFor waiting /> })}
        <h3>"Status"</h3>
        <ol class="timeline" data-testid="job-timeline">
            <li>
                <LocalTime at=created />
                " created, waiting"
            </li>
            {transitions}
        </ol>
        <Parts chunks />
        <Runs runs />
    }
    .into_any()
}

#[component]
fn WaitingFor(waiting: Waiting) -> impl IntoView {
    let behind = match &waiting {
        Waiting::BehindJob { id, .. } => Some(*id),
        _ => None,
    };
    view! {
        <p class="waiting" data-testid="job-waiting">
            {waiting.sentence()}
            {behind
                .map(|id| {
                    view! {
                        " "
                        <a href=format!("/jobs/{id}")>"See that job"</a>
                    }
                })}
        </p>
    }
}

/// How many parts in each state, and those worth a look.
#[component]
fn Parts(chunks: Chunks) -> impl IntoView {
    let total = chunks.pending + chunks.done + chunks.failed;
    (total > 0).then(|| {
        let rows = chunks
            .notable
            .into_iter()
            .map(|chunk| {
                let last = chunk.first_row + i64::from(chunk.row_count) - 1;
                view! {
                    <tr data-testid="history-part">
                        <td>{chunk.part}</td>
                        <td>{format!("{} to {}", thousands(chunk.first_row), thousands(last))}</td>
                        <td>{chunk.state}</td>
                        <td>{chunk.attempts}</td>
                        <td>{chunk.leased_by.unwrap_or_default()}</td>
                        <td>{chunk.last_error.unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>"Parts"</h3>
            <p data-testid="history-parts">
                {format!(
                    "{} done, {} to do, {} failed.",
                    thousands(chunks.done),
                    thousands(chunks.pending),
                    thousands(chunks.failed),
                )}
            </p>
            <table class="jobs history-parts">
                <caption class="muted">"Parts not done, or tried more than once"</caption>
                <thead>
                    <tr>
                        <th>"Part"</th>
                        <th>"Rows"</th>
                        <th>"State"</th>
                        <th>"Attempts"</th>
                        <th>"Held by"</th>
                        <th>"Last error"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        }
    })
}

/// Every run, oldest first.
#[component]
fn Runs(runs: Vec<Run>) -> impl IntoView {
    (!runs.is_empty()).then(|| {
        let rows = runs
            .into_iter()
            .map(|run| {
                let took = run.duration_seconds().map(duration);
                let outcome = run.outcome.map_or("running", |outcome| outcome.label());
                view! {
                    <tr data-testid="history-run" data-outcome=outcome>
                        <td>{run.item()}</td>
                        <td>{run.attempt}</td>
                        <td>
                            <code>{run.worker.clone().unwrap_or_default()}</code>
                        </td>
                        <td class="when">
                            <LocalTime at=run.started_at />
                        </td>
                        <td>{took.unwrap_or_default()}</td>
                        <td>{outcome}</td>
                        <td>{run.error.unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>"Runs"</h3>
            <table class="jobs history-runs">
                <thead>
                    <tr>
                        <th>"Of"</th>
                        <th>"Attempt"</th>
                        <th>"Worker"</th>
                        <th>"Started"</th>
                        <th>"Took"</th>
                        <th>"Outcome"</th>
                        <th>"Error"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        }
    })
}
