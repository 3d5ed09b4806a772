//! SIGTERM (what the kubelet sends) and SIGINT (Ctrl-C) as a cancellation token that every
//! task of a role watches, so that a role drains instead of dying mid-write.

use tokio_util::sync::CancellationToken;

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signalled() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            // Without a SIGTERM handler only Ctrl-C stops the role.
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// A token cancelled on the first SIGTERM or SIGINT.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        signalled().await;
        tracing::info!("shutting down");
        cancel.cancel();
    });
    token
}
