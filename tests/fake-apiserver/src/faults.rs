//! Injected faults: requests that match a rule (method and a piece of the path) fail with
//! a status, wait before being served, or hang until the rule is cleared, as a real API
//! server under load, behind a partition or restarting does.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::http::Method;

/// What happens to a matching request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Answered with this HTTP status and the API server's body for it.
    Status(u16),
    /// Served normally after this delay (a slow server; longer than a client's deadline:
    /// the write still lands, late, as on a real server).
    Delay(Duration),
    /// Never answered while the rule stands (a hung request).
    Hang,
}

/// A rule: which requests, what happens, how many times (`None`: until cleared).
#[derive(Clone, Debug)]
pub struct Fault {
    pub method: Option<Method>,
    pub path_contains: String,
    pub effect: Effect,
    pub times: Option<usize>,
}

impl Fault {
    pub fn new(method: Option<Method>, path_contains: &str, effect: Effect) -> Self {
        Fault {
            method,
            path_contains: path_contains.to_owned(),
            effect,
            times: None,
        }
    }

    /// Only the next `count` matching requests.
    #[must_use]
    pub fn times(mut self, count: usize) -> Self {
        self.times = Some(count);
        self
    }

    fn matches(&self, method: &Method, path: &str) -> bool {
        self.method.as_ref().is_none_or(|m| m == method) && path.contains(&self.path_contains)
    }
}

#[derive(Default)]
pub(crate) struct Faults {
    rules: Mutex<Vec<Fault>>,
    /// Bumped by `clear`: hung requests go on when it changes.
    cleared: AtomicU64,
}

impl Faults {
    pub(crate) fn add(&self, fault: Fault) {
        self.rules.lock().unwrap().push(fault);
    }

    pub(crate) fn clear(&self) {
        self.rules.lock().unwrap().clear();
        self.cleared.fetch_add(1, Ordering::SeqCst);
    }

    /// The first rule matching the request, counted down.
    fn take(&self, method: &Method, path: &str) -> Option<Effect> {
        let mut rules = self.rules.lock().unwrap();
        let index = rules.iter().position(|f| f.matches(method, path))?;
        let effect = rules[index].effect.clone();
        if let Some(times) = &mut rules[index].times {
            *times -= 1;
            if *times == 0 {
                rules.remove(index);
            }
        }
        Some(effect)
    }

    /// Applies the matching rule: `Some(code)` when the request is to be answered with
    /// that status; delays and hangs happen here.
    pub(crate) async fn apply(&self, method: &Method, path: &str) -> Option<u16> {
        let generation = self.cleared.load(Ordering::SeqCst);
        match self.take(method, path)? {
            Effect::Status(code) => Some(code),
            Effect::Delay(delay) => {
                tokio::time::sleep(delay).await;
                None
            }
            Effect::Hang => {
                while self.cleared.load(Ordering::SeqCst) == generation {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                None
            }
        }
    }
}

/// The API server's reason for a status code.
pub(crate) fn reason(code: u16) -> &'static str {
    match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// The API server's message for a status code (apimachinery's `errors.New*` texts).
pub(crate) fn message(code: u16, path: &str) -> String {
    match code {
        429 => "Too many requests, please try again later.".into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => format!("Timeout: request did not complete within the allotted timeout ({path})"),
        _ => format!("Internal error occurred: injected fault on {path}"),
    }
}
