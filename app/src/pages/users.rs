//! `/users`, for admins: every account and its role, changed in place.

use leptos::prelude::*;
use serde_json::json;

use crate::{
    api,
    auth::{Role, UserView},
    data::list_users,
};

#[component]
pub fn UsersPage() -> impl IntoView {
    let users = Resource::new(|| (), |_| list_users());
    view! {
        <section class="card">
            <h1>"Users"</h1>
            <p class="muted">
                "Admins see and change everything; viewers see everything and change nothing; "
                "members see and change their own. New admins: "
                <code>"server user add --email … --role admin"</code>
            </p>
            <Suspense fallback=|| view! { <p class="muted">"Loading users..."</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Ok(users) => view! { <UserTable users /> }.into_any(),
                        Err(err) => view! { <p class="error">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn UserTable(users: Vec<UserView>) -> impl IntoView {
    view! {
        <table class="jobs" data-testid="users">
            <thead>
                <tr><th>"Email"</th><th>"Role"</th><th>"Since"</th><th></th></tr>
            </thead>
            <tbody>
                {users.into_iter().map(|user| view! { <UserRow user /> }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn UserRow(user: UserView) -> impl IntoView {
    let role = RwSignal::new(user.role);
    let error = RwSignal::new(None::<String>);
    let id = user.id;
    let change = move |ev: leptos::ev::Event| {
        let Some(wanted) = Role::parse(&event_target_value(&ev)) else {
            return;
        };
        let before = role.get_untracked();
        role.set(wanted);
        leptos::task::spawn_local(async move {
            let body = json!({ "role": wanted.as_str() });
            match api::call("PATCH", &format!("/api/users/{id}"), Some(body)).await {
                Ok(_) => error.set(None),
                Err(message) => {
                    role.set(before);
                    error.set(Some(message));
                }
            }
        });
    };
    view! {
        <tr data-testid="user-row">
            <td>{user.email.clone()}</td>
            <td>
                <select data-testid="user-role" on:change=change prop:value=move || role.get().as_str()>
                    {[Role::Admin, Role::Viewer, Role::Member]
                        .into_iter()
                        .map(|option| view! {
                            <option value=option.as_str() selected=move || role.get() == option>
                                {option.as_str()}
                            </option>
                        })
                        .collect_view()}
                </select>
            </td>
            <td class="nowrap">{user.created_at.format("%Y-%m-%d").to_string()}</td>
            <td>{move || error.get().map(|message| view! { <span class="error" role="alert">{message}</span> })}</td>
        </tr>
    }
}
