//! `/login` and `/signup`: an email and a password. On success the browser loads the next page
//! afresh, since the header and everything a person sees change with who they are.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use serde_json::json;

use crate::{api, session::use_session};

#[component]
pub fn SignInPage() -> impl IntoView {
    view! { <CredentialsForm sign_up=false /> }
}

#[component]
pub fn SignUpPage() -> impl IntoView {
    view! { <CredentialsForm sign_up=true /> }
}

/// Where to go after signing in: a path on this site, never another site's URL (a browser
/// drops tabs and newlines and reads a backslash as `/`, so `/<tab>/evil.example` would leave).
fn safe_next(next: Option<String>) -> String {
    next.filter(|path| {
        path.starts_with('/')
            && !path.starts_with("//")
            && !path
                .chars()
                .any(|c| c == '\\' || c.is_whitespace() || c.is_control())
    })
    .unwrap_or_else(|| "/".to_owned())
}

#[component]
fn CredentialsForm(sign_up: bool) -> impl IntoView {
    let session = use_session();
    let email = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let query = use_query_map();
    let (title, endpoint, button, test_id) = if sign_up {
        (
            "Sign up",
            "/api/account",
            "Create account",
            "sign-up-button",
        )
    } else {
        ("Sign in", "/api/session", "Sign in", "sign-in-button")
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let next = safe_next(query.read_untracked().get("next"));
        let body = json!({ "email": email.get_untracked(), "password": password.get_untracked() });
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::call("POST", endpoint, Some(body)).await {
                Ok(_) => api::reload_at(&next),
                Err(message) => {
                    error.set(Some(message));
                    busy.set(false);
                }
            }
        });
    };
    let closed = move || sign_up && session.view().is_some_and(|s| !s.sign_up);
    let guest = move || session.me().is_some_and(|me| me.email.is_none());
    view! {
        <section class="card narrow">
            <h1>{title}</h1>
            <Transition>
                <Show when=move || sign_up && guest()>
                    <p class="muted">"You keep the jobs and datasets you made as a guest."</p>
                </Show>
                <Show when=closed>
                    <p class="warning" data-testid="sign-up-closed">
                        "Sign-up is switched off here: ask an admin for an account."
                    </p>
                </Show>
            </Transition>
            // method/action: a press before the page is live posts to the API, never puts the
            // password in the address.
            <form method="post" action=endpoint on:submit=submit>
                <label class="field">
                    "Email"
                    <input
                        type="email"
                        required
                        autocomplete="username"
                        data-testid="email-input"
                        prop:value=move || email.get()
                        on:input=move |ev| email.set(event_target_value(&ev))
                    />
                </label>
                <label class="field">
                    "Password"
                    <input
                        type="password"
                        required
                        minlength=if sign_up { "8" } else { "1" }
                        autocomplete=if sign_up { "new-password" } else { "current-password" }
                        data-testid="password-input"
                        prop:value=move || password.get()
                        on:input=move |ev| password.set(event_target_value(&ev))
                    />
                </label>
                <button type="submit" data-testid=test_id disabled=move || busy.get()>
                    {button}
                </button>
            </form>
            {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
            <p class="muted">
                {if sign_up {
                    view! { "Have an account? " <a href="/login">"Sign in"</a> }.into_any()
                } else {
                    view! { "New here? " <a href="/signup">"Sign up"</a> }.into_any()
                }}
            </p>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn only_paths_on_this_site_are_followed() {
        assert_eq!(safe_next(Some("/jobs/1".into())), "/jobs/1");
        for bad in [
            "https://evil.com",
            "//evil.com",
            "/\\evil.com",
            "/\t/evil.com",
            "/\n/evil.com",
            "jobs",
        ] {
            assert_eq!(safe_next(Some(bad.into())), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
