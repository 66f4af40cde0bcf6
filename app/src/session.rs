//! The session as the pages read it: fetched once per page load by [`App`](crate::App) and
//! shared through context, so the header, buttons and forms agree on who is signed in. It only
//! decides what the page shows; the server checks every request itself.

use leptos::prelude::*;
use uuid::Uuid;

use crate::{
    auth::{Me, SessionView},
    data::get_session,
};

/// The session resource.
#[derive(Clone, Copy)]
pub struct Session(Resource<Result<SessionView, ServerFnError>>);

impl Session {
    /// Starts loading the session and provides it to every page.
    pub fn provide() -> Self {
        let session = Self(Resource::new(|| (), |_| get_session()));
        provide_context(session);
        session
    }

    /// Waits until the session has loaded: a `Suspend` that awaits this before building its
    /// children lets them read the session once, untracked, on the server and in the browser.
    pub async fn ready(self) {
        let _ = self.0.await;
    }

    /// Loads the session again: a visitor's first upload made them a guest.
    pub fn reload(self) {
        self.0.refetch();
    }

    /// The session, once loaded (tracked: read it inside a `Suspense`).
    pub fn view(self) -> Option<SessionView> {
        self.0.get().and_then(Result::ok)
    }

    /// The person signed in (or the guest), once loaded.
    pub fn me(self) -> Option<Me> {
        self.view().and_then(|session| session.me)
    }

    /// Whether the reader may change what `owner` owns.
    pub fn may_change(self, owner: Uuid) -> bool {
        self.me().is_some_and(|me| me.may_change(owner))
    }

    /// Whether the reader may create things (a visitor may: they become a guest).
    pub fn may_create(self) -> bool {
        self.view().is_none_or(|session| session.may_change())
    }

    /// Whether the reader sees everyone's things (admins and viewers).
    pub fn sees_everything(self) -> bool {
        self.me().is_some_and(|me| me.role.sees_everything())
    }
}

/// The session the app provided.
pub fn use_session() -> Session {
    expect_context::<Session>()
}
