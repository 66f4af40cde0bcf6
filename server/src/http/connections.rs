//! Serving HTTP/1.1 connections: hyper's, set up here rather than by `axum::serve`, for a
//! process that holds thousands of long-lived event streams.
//!
//! - **No sniffing for HTTP/2.** `axum::serve` reads each connection's first bytes to tell
//!   HTTP/2 from HTTP/1 and hands them back; hyper's read buffer, already holding them, then
//!   doubles to 16 KB for the rest of the connection's life. Counted with uprobes on the
//!   allocator over 2,000 open event streams (docs/architecture.md, "Progress to the
//!   browser", says how): 30.7 KB held per connection, 16 KB of it that buffer and 8 KB
//!   hyper's write buffer; 22.7 KB without the sniffing. `make bench ONLY=fanout` gave a peak
//!   of 214 MB at 10,000 streams without it, 324 MB with it. HTTP/2 is the business of the TLS-terminating proxy in front
//!   (browsers speak it only over TLS).
//! - **A deadline for a request's head** (`CONVEYOR_HEADER_TIMEOUT_SECS`, hyper's timer): a
//!   client that trickles a head byte by byte (slowloris), or leaves a kept-alive connection
//!   idle that long, loses the connection. `axum::serve` sets no timer, so had none.
//! - **`TCP_NODELAY`**: an event pushed right after another is not held back until the client
//!   acknowledges the first.
//!
//! On shutdown it stops accepting, asks every connection to close once its response is done
//! (event streams end with the shutdown themselves), and returns when all have closed.

use std::{io, pin::pin, time::Duration};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// Serves `app` on `listener` until `shutdown` fires and every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    // Every handler made into a route once, as `into_make_service` does: called as it is, a
    // router makes them anew for each request.
    let app = app.with_state(());
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                connections.spawn(connection(
                    stream,
                    http.clone(),
                    app.clone(),
                    shutdown.clone(),
                ));
            }
            Err(err) => tokio::select! {
                () = shutdown.cancelled() => break,
                () = accept_failed(err) => {}
            },
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

async fn connection(
    stream: TcpStream,
    http: http1::Builder,
    app: Router,
    shutdown: CancellationToken,
) {
    if let Err(err) = stream.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY: {err}");
    }
    let mut served =
        pin!(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app)));
    let ended = tokio::select! {
        ended = served.as_mut() => ended,
        () = shutdown.cancelled() => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    // A client that goes away, or a head that missed its deadline: nothing to act on.
    if let Err(err) = ended {
        tracing::debug!("connection ended: {err}");
    }
}

/// What `accept` failing means: a connection that died while queued is skipped; anything else
/// (out of file descriptors, most often) is logged, and accepting waits a second, as
/// retrying at once would spin.
async fn accept_failed(err: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        err.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!("accepting a connection failed: {err}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
