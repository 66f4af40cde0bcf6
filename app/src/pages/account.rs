//! Who is signed in: the header's badge (with Sign out), and `/account`: the password and the
//! personal API tokens scripts use (`Authorization: Bearer …`), each shown once when created.

use leptos::prelude::*;
use serde_json::json;

use crate::{
    api,
    auth::{NewToken, TokenView},
    data::list_tokens,
    session::use_session,
};

/// "ada@example.com · admin · Sign out", or a guest's "Sign in · Sign up".
#[component]
pub fn SessionBadge() -> impl IntoView {
    let session = use_session();
    let sign_out = move |_| {
        leptos::task::spawn_local(async move {
            let _ = api::call("DELETE", "/api/session", None).await;
            api::reload_at("/");
        });
    };
    move || {
        let view = session.view()?;
        let guest = view.me.is_some();
        Some(match view.me.filter(|me| me.email.is_some()) {
            Some(me) => view! {
                <span class="who">
                    <a href="/account" data-testid="signed-in-as">{me.label()}</a>
                    " " <span class="muted" data-testid="role">{me.role.as_str()}</span> " "
                    <button class="link" data-testid="sign-out" on:click=sign_out>"Sign out"</button>
                </span>
            }
            .into_any(),
            None => {
                view! {
                    <span class="who">
                        {guest.then_some(view! { <span class="muted" data-testid="guest">"Guest"</span> " " })}
                        <a href="/login" data-testid="sign-in-link">"Sign in"</a>
                        {view.sign_up.then_some(view! { " " <a href="/signup">"Sign up"</a> })}
                    </span>
                }
                .into_any()
            }
        })
    }
}

#[component]
pub fn AccountPage() -> impl IntoView {
    let session = use_session();
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading..."</p> }>
            {move || match session.me().filter(|me| me.email.is_some()) {
                Some(me) => view! {
                    <section class="card narrow">
                        <h1>"Your account"</h1>
                        <p>
                            <strong>{me.label()}</strong>
                            ", " {me.role.as_str()}
                        </p>
                        <PasswordForm />
                    </section>
                    <Tokens />
                }
                .into_any(),
                None => view! {
                    <section class="card narrow">
                        <h1>"Your account"</h1>
                        <p>
                            "You are not signed in. " <a href="/login">"Sign in"</a>
                            " or " <a href="/signup">"sign up"</a>
                            " (a guest keeps what they made)."
                        </p>
                    </section>
                }
                .into_any(),
            }}
        </Suspense>
    }
}

/// Changing the password signs out every other session.
#[component]
fn PasswordForm() -> impl IntoView {
    let current = RwSignal::new(String::new());
    let new = RwSignal::new(String::new());
    let outcome = RwSignal::new(None::<Result<(), String>>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let body = json!({ "current": current.get_untracked(), "new": new.get_untracked() });
        leptos::task::spawn_local(async move {
            let done = api::call("POST", "/api/account/password", Some(body)).await;
            if done.is_ok() {
                current.set(String::new());
                new.set(String::new());
            }
            outcome.set(Some(done.map(drop)));
        });
    };
    view! {
        <h2>"Change password"</h2>
        <form method="post" action="/api/account/password" on:submit=submit>
            <label class="field">
                "Current password"
                <input type="password" required autocomplete="current-password"
                    data-testid="current-password"
                    prop:value=move || current.get()
                    on:input=move |ev| current.set(event_target_value(&ev)) />
            </label>
            <label class="field">
                "New password"
                <input type="password" required minlength="8" autocomplete="new-password"
                    data-testid="new-password"
                    prop:value=move || new.get()
                    on:input=move |ev| new.set(event_target_value(&ev)) />
            </label>
            <button type="submit" data-testid="change-password">"Change password"</button>
        </form>
        {move || outcome.get().map(|done| match done {
            Ok(()) => view! {
                <p data-testid="password-changed">"Password changed. Your other sessions were signed out."</p>
            }.into_any(),
            Err(message) => view! { <p class="error" role="alert">{message}</p> }.into_any(),
        })}
    }
}

/// The account's API tokens: create (the secret shown once), list, revoke.
#[component]
fn Tokens() -> impl IntoView {
    let tokens = Resource::new(|| (), |_| list_tokens());
    view! {
        <section class="card">
            <h2>"API tokens"</h2>
            <p class="muted">
                "Scripts use the same API as this site with "
                <code>"Authorization: Bearer <token>"</code>
                ". A token acts as you until you revoke it."
            </p>
            <Suspense fallback=|| view! { <p class="muted">"Loading tokens..."</p> }>
                {move || Suspend::new(async move {
                    match tokens.await {
                        Ok(tokens) => view! { <TokenTable tokens /> }.into_any(),
                        Err(err) => view! { <p class="error">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn TokenTable(tokens: Vec<TokenView>) -> impl IntoView {
    let list = RwSignal::new(tokens);
    let name = RwSignal::new(String::new());
    let created = RwSignal::new(None::<NewToken>);
    let error = RwSignal::new(None::<String>);
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let body = json!({ "name": name.get_untracked() });
        leptos::task::spawn_local(async move {
            match api::call("POST", "/api/account/tokens", Some(body)).await {
                Ok(value) => match serde_json::from_value::<NewToken>(value) {
                    Ok(token) => {
                        list.update(|list| list.push(token.token.clone()));
                        created.set(Some(token));
                        name.set(String::new());
                        error.set(None);
                    }
                    Err(err) => error.set(Some(err.to_string())),
                },
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let revoke = move |id: uuid::Uuid| {
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &format!("/api/account/tokens/{id}"), None).await {
                Ok(_) => list.update(|list| list.retain(|token| token.id != id)),
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let when = |at: chrono::DateTime<chrono::Utc>| at.format("%Y-%m-%d %H:%M").to_string();
    view! {
        {move || created.get().map(|token| view! {
            <p class="notice">
                "Your new token (copy it now, it is not shown again): "
                <code data-testid="new-token">{token.secret}</code>
            </p>
        })}
        <table class="jobs" data-testid="tokens">
            <thead>
                <tr><th>"Name"</th><th>"Created"</th><th>"Last used"</th><th></th></tr>
            </thead>
            <tbody>
                <For each=move || list.get() key=|token| token.id let:token>
                    <tr data-testid="token-row">
                        <td>{token.name.clone()}</td>
                        <td class="nowrap">{when(token.created_at)}</td>
                        <td class="nowrap">
                            {token.last_used_at.map_or_else(|| "never".to_owned(), when)}
                        </td>
                        <td>
                            <button class="secondary" data-testid="revoke-token"
                                on:click=move |_| revoke(token.id)>"Revoke"</button>
                        </td>
                    </tr>
                </For>
            </tbody>
        </table>
        <form class="inline" on:submit=create>
            <label class="field">
                "New token's name"
                <input type="text" required maxlength="100" placeholder="e.g. nightly import"
                    data-testid="token-name"
                    prop:value=move || name.get()
                    on:input=move |ev| name.set(event_target_value(&ev)) />
            </label>
            <button type="submit" data-testid="create-token">"Create token"</button>
        </form>
        {move || error.get().map(|message| view! { <p class="error" role="alert">{message}</p> })}
    }
}
