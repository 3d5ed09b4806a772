//! A deadline on every API request but watches: a hung API server turns a get, list,
//! create, bind or patch into an error the caller retries, instead of a task waiting
//! forever. The deadline is on the start of the answer (its status and headers); a body
//! that then streams is bounded by the connection's read timeout (`client`). Watches are
//! long-lived by design and exempt; kube's watcher bounds them itself (the server's
//! `timeoutSeconds` and its idle timeout).

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tower::{BoxError, Layer, Service};

/// The answer did not start within the deadline.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer {method} {path} within {deadline:?}")]
pub struct RequestTimedOut {
    pub method: String,
    pub path: String,
    pub deadline: Duration,
}

#[derive(Clone, Debug)]
pub struct RequestDeadlineLayer {
    deadline: Duration,
}

impl RequestDeadlineLayer {
    pub fn new(deadline: Duration) -> Self {
        RequestDeadlineLayer { deadline }
    }
}

impl<S> Layer<S> for RequestDeadlineLayer {
    type Service = RequestDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestDeadline {
            inner,
            deadline: self.deadline,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RequestDeadline<S> {
    inner: S,
    deadline: Duration,
}

fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, B> Service<http::Request<B>> for RequestDeadline<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let bounded = !is_watch(request.uri());
        // Cheap clones (a shared buffer); named as text only if the deadline passes.
        let method = request.method().clone();
        let uri = request.uri().clone();
        let deadline = self.deadline;
        let answer = self.inner.call(request);
        Box::pin(async move {
            if !bounded {
                return answer.await.map_err(Into::into);
            }
            match tokio::time::timeout(deadline, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(Box::new(RequestTimedOut {
                    method: method.to_string(),
                    path: uri.path().to_owned(),
                    deadline,
                }) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watches_are_unbounded() {
        let watch: http::Uri = "/api/v1/pods?watch=true&resourceVersion=5".parse().unwrap();
        let watch_1: http::Uri = "/api/v1/pods?resourceVersion=5&watch=1".parse().unwrap();
        let list: http::Uri = "/api/v1/pods?limit=500".parse().unwrap();
        let tricky: http::Uri = "/api/v1/pods?labelSelector=watch%3Dtrue".parse().unwrap();
        assert!(is_watch(&watch));
        assert!(is_watch(&watch_1));
        assert!(!is_watch(&list));
        assert!(!is_watch(&tricky));
        assert!(!is_watch(&"/api/v1/namespaces/a/pods/b".parse().unwrap()));
    }
}
