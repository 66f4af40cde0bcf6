//! One module per page.

pub mod account;
pub mod controls;
pub mod datasets;
pub mod job;
pub mod job_errors;
pub mod job_history;
pub mod job_items;
pub mod job_review;
pub mod jobs;
pub mod pager;
pub mod queue;
pub mod review;
pub mod sign_in;
pub mod upload;
pub mod users;

use leptos::prelude::*;

/// Shown for any unknown path or id.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <section class="card">
            <h1>"Not found"</h1>
            <p>"There is nothing here. " <a href="/jobs">"See all jobs"</a></p>
        </section>
    }
}
