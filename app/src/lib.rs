//! Conveyor's web front end: the pages, rendered on the server and hydrated in the browser.
//!
//! Layout:
//! - [`model`]: the job types shared with the server (API JSON, SSE events, page data).
//! - [`bulk`]: bulk actions on jobs and their audit log.
//! - [`history`]: a job's history for operators (runs, changes of status, chunks, waiting).
//! - [`job_list`]: the job list's filter, paging and counts (URLs, the API, the list page).
//! - [`queue_health`]: the queue health page's figures (workers, backlog, throughput).
//! - [`auth`]: who is asking (roles, the signed-in person), shared with the server.
//! - [`api`]: the browser's calls to the JSON API.
//! - [`data`]: server functions the pages load their first state with, over [`data::PageData`].
//! - [`live`]: the browser side of the server-sent event streams.
//! - [`session`]: who is signed in, as every page reads it.
//! - [`zone`]: times in the reader's time zone.
//! - [`pages`]: one module per page.

pub mod api;
pub mod auth;
pub mod bulk;
pub mod data;
pub mod focus;
pub mod history;
pub mod job_list;
pub mod job_types;
pub mod live;
pub mod model;
pub mod pages;
pub mod preview;
pub mod queue_health;
pub mod session;
pub mod zone;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode, StaticSegment,
    components::{A, Route, Router, Routes},
    path,
};

/// The HTML document around the app, rendered by the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The routes and the frame around every page.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let session = session::Session::provide();
    let zone = zone::Zone::provide();
    // Effects run only in the browser, after hydration: tests and people can tell the page is live.
    Effect::new(move |_| {
        zone.learn();
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    let is_admin = move || session.me().is_some_and(|me| me.role == auth::Role::Admin);
    let is_operator = move || session.me().is_some_and(|me| me.role.sees_everything());
    view! {
        <Stylesheet id="leptos" href="/pkg/conveyor.css" />
        <Title text="Conveyor" />
        <Router>
            <focus::FocusOnNavigate />
            <header class="topbar">
                <A href="/">"Conveyor"</A>
                <nav>
                    <A href="/">"Import"</A>
                    <A href="/jobs">"Jobs"</A>
                    <A href="/datasets">"Datasets"</A>
                    <Transition>
                        <Show when=is_operator>
                            <A href="/admin">"Queue"</A>
                        </Show>
                        <Show when=is_admin>
                            <A href="/users">"Users"</A>
                        </Show>
                    </Transition>
                </nav>
                <Transition>
                    <pages::account::SessionBadge />
                </Transition>
            </header>
            <main>
                <Routes fallback=|| view! { <pages::NotFound /> }>
                    <Route path=StaticSegment("") view=pages::upload::UploadPage />
                    <Route path=path!("/uploads/:id") view=pages::review::ReviewPage />
                    // Async rendering: the whole page, with its status code, once the job is read.
                    <Route path=path!("/jobs") view=pages::jobs::JobsPage ssr=SsrMode::Async />
                    <Route path=path!("/jobs/:id") view=pages::job::JobPage ssr=SsrMode::Async />
                    <Route
                        path=path!("/datasets")
                        view=pages::datasets::DatasetsPage
                        ssr=SsrMode::Async
                    />
                    <Route
                        path=path!("/datasets/:name")
                        view=pages::datasets::DatasetPage
                        ssr=SsrMode::Async
                    />
                    <Route path=path!("/login") view=pages::sign_in::SignInPage />
                    <Route path=path!("/signup") view=pages::sign_in::SignUpPage />
                    <Route
                        path=path!("/account")
                        view=pages::account::AccountPage
                        ssr=SsrMode::Async
                    />
                    <Route path=path!("/users") view=pages::users::UsersPage ssr=SsrMode::Async />
                    <Route path=path!("/admin") view=pages::queue::QueuePage ssr=SsrMode::Async />
                </Routes>
            </main>
        </Router>
    }
}

/// The wasm entry point: attaches the app to the server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
