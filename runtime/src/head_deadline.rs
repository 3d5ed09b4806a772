//! The deadline on an HTTP request's head, timed from its first byte (as Go's
//! `ReadHeaderTimeout` is), so that a kept-alive connection may wait idle for its next
//! request as long as the idle timeout allows, while a head sent a byte at a time holds
//! the connection only the header timeout.
//!
//! hyper's own `header_read_timeout` cannot do this: it starts when hyper begins to wait
//! for a head, idle wait included (hyper 1.12, `poll_read_head`), so set to the header
//! timeout it closed every kept-alive HTTP/1 connection 10 s after its last response,
//! abruptly, and kube-apiserver (which keeps its webhook connections 90 s) wrote requests
//! on connections being closed ("broken pipe"). hyper-util's protocol detection has no
//! timer at all.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Sleep,
};

use crate::connection_activity::Activity;

/// The HTTP/2 connection preface: a connection that opens with it is HTTP/2.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the connection's first bytes said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// This many bytes of the HTTP/2 preface have matched so far.
    Detecting(usize),
    Http1,
    /// HTTP/2 frames its requests itself: its idle connections are closed by the idle
    /// timeout and keep-alive pings, and nothing here applies after the preface.
    Http2,
}

impl Protocol {
    fn after(self, bytes: &[u8]) -> Self {
        let Protocol::Detecting(mut matched) = self else {
            return self;
        };
        for &byte in bytes {
            if H2_PREFACE.get(matched) != Some(&byte) {
                return Protocol::Http1;
            }
            matched += 1;
            if matched == H2_PREFACE.len() {
                return Protocol::Http2;
            }
        }
        Protocol::Detecting(matched)
    }
}

/// A running deadline, and the requests begun when it was set: one begun since means
/// the head it timed has come.
struct Running {
    sleep: Pin<Box<Sleep>>,
    begun: u64,
}

/// A stream whose reads fail with `TimedOut` once a request head has been awaited longer
/// than the header timeout since its first byte (since the connection opened, for the
/// first). Between requests (none in flight, no byte of the next yet) no deadline runs.
pub(crate) struct HeadDeadline<S> {
    inner: S,
    timeout: Duration,
    activity: Arc<Activity>,
    protocol: Protocol,
    running: Option<Running>,
}

impl<S> HeadDeadline<S> {
    pub(crate) fn new(inner: S, timeout: Duration, activity: Arc<Activity>) -> Self {
        let running = Some(Running {
            sleep: Box::pin(tokio::time::sleep(timeout)),
            begun: activity.begun(),
        });
        HeadDeadline {
            inner,
            timeout,
            activity,
            protocol: Protocol::Detecting(0),
            running,
        }
    }

    fn timed_out() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no complete request head within the deadline",
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Some(running) = &this.running {
            if this.activity.begun() != running.begun {
                this.running = None;
            } else if running.sleep.is_elapsed() {
                return Poll::Ready(Err(Self::timed_out()));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) => {
                let received = &buf.filled()[before..];
                this.protocol = this.protocol.after(received);
                if this.protocol == Protocol::Http2 {
                    this.running = None;
                } else if !received.is_empty()
                    && this.running.is_none()
                    && this.activity.in_flight() == 0
                {
                    // The first bytes of the next head: from now on it has the timeout.
                    this.running = Some(Running {
                        sleep: Box::pin(tokio::time::sleep(this.timeout)),
                        begun: this.activity.begun(),
                    });
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let expired = this
                    .running
                    .as_mut()
                    .is_some_and(|running| running.sleep.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(Self::timed_out()))
                } else {
                    Poll::Pending
                }
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preface_says_http2_and_anything_else_http1() {
        let start = Protocol::Detecting(0);
        assert_eq!(start.after(H2_PREFACE), Protocol::Http2);
        assert_eq!(start.after(b"PRI * HT"), Protocol::Detecting(8));
        assert_eq!(
            start.after(b"PRI * HT").after(&H2_PREFACE[8..]),
            Protocol::Http2
        );
        assert_eq!(start.after(b"GET / HTTP/1.1\r\n"), Protocol::Http1);
        assert_eq!(start.after(b"PRI * HTTP/1.1"), Protocol::Http1);
        assert_eq!(start.after(b""), Protocol::Detecting(0));
        // Once known, later bytes do not change it.
        assert_eq!(Protocol::Http1.after(H2_PREFACE), Protocol::Http1);
        assert_eq!(Protocol::Http2.after(b"GET"), Protocol::Http2);
    }
}
