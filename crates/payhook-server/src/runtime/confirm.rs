//! `confirm = "api"`: a verified delivery of a provider that does not sign its body is confirmed by asking the
//! provider's API about the resource the signature names, and the effect is read from that answer.
//!
//! One `GET {base_url}{path}` with the source's access token, bounded three ways: at most `max_in_flight` at once
//! per source (beyond it 503 at once, never a queue), at most `timeout_ms` each, and an answer of at most the body
//! limit. Nothing is recorded before the answer: a failed confirmation is a 503 and the provider delivers again,
//! so a delivery payhook acknowledged is always one whose effect came from the provider's own answer.

use crate::base::metrics::{Confirmed, SourceMetrics};
use crate::base::settings::ConfirmSettings;
use payhook_core::confirm::ConfirmError;
use payhook_core::event::Event;
use payhook_core::signature::Headers;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The provider's API could not confirm a delivery: answered 503, nothing recorded, the provider delivers again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unconfirmed(pub(crate) String);

/// A source's confirmations: its settings, an HTTP client and its slots.
#[derive(Debug)]
pub(crate) struct Confirmer {
    settings: ConfirmSettings,
    client: reqwest::Client,
    slots: Semaphore,
}

/// What the provider's API said about a delivery's resource.
pub(crate) enum Answer {
    /// The resource's events, read from `answer`, the bytes to store in place of the unsigned notification.
    Events { answer: Vec<u8>, events: Vec<Event> },
    /// The API has no such resource, or an answer that cannot be read: kept as a dead letter with `reason`.
    Unreadable { answer: Vec<u8>, reason: String },
}

impl Confirmer {
    pub(crate) fn new(settings: ConfirmSettings) -> Self {
        // No redirects: the token goes to the configured API only.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(settings.timeout_ms))
            .build()
            .unwrap_or_default();
        let slots = Semaphore::new(settings.max_in_flight);
        Self { settings, client, slots }
    }

    /// Asks the API about the resource a verified `request` names. `Err` is a 503: nothing is recorded and the
    /// provider delivers again.
    pub(crate) async fn confirm(
        &self,
        request: &(impl Headers + ?Sized),
        answer_limit: usize,
        metrics: &SourceMetrics,
    ) -> Result<Answer, Unconfirmed> {
        let unavailable = |why: &str| {
            metrics.confirmed(Confirmed::Unavailable);
            Unconfirmed(format!("the provider's API could not confirm the delivery ({why}); retry later"))
        };
        let path = self.settings.confirm.path_for(request).map_err(|e| {
            metrics.confirmed(Confirmed::Unavailable);
            Unconfirmed(e.to_string())
        })?;
        let Ok(_slot) = self.slots.try_acquire() else {
            metrics.confirmed(Confirmed::Busy);
            return Err(Unconfirmed(format!(
                "every one of this source's {} confirmations is waiting for the provider's API; retry later",
                self.settings.max_in_flight
            )));
        };
        metrics.confirming(true);
        let sent = self
            .client
            .get(format!("{}{path}", self.settings.base_url))
            .bearer_auth(self.settings.token.expose())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await;
        let read = match sent {
            Ok(response) => {
                let status = response.status();
                read_limited(response, answer_limit).await.map(|body| (status, body))
            }
            Err(e) => Err(if e.is_timeout() { "timed out" } else { "unreachable" }),
        };
        metrics.confirming(false);
        let (status, answer) = match read {
            Ok(read) => read,
            Err(why) => {
                tracing::warn!(reason = why, "confirmation failed");
                return Err(unavailable(why));
            }
        };
        if status == reqwest::StatusCode::NOT_FOUND {
            metrics.confirmed(Confirmed::Unreadable);
            let reason = "the provider's API has no such resource (is the access token of this account?)".into();
            return Ok(Answer::Unreadable { answer, reason });
        }
        if !status.is_success() {
            tracing::warn!(status = status.as_u16(), "the provider's API refused a confirmation");
            return Err(unavailable(&format!("it answered {}", status.as_u16())));
        }
        match self.settings.confirm.events(request, &answer) {
            Ok(events) => {
                metrics.confirmed(Confirmed::Answered);
                Ok(Answer::Events { answer, events })
            }
            Err(e @ ConfirmError::Answer(_)) => {
                metrics.confirmed(Confirmed::Unreadable);
                Ok(Answer::Unreadable { answer, reason: e.to_string() })
            }
            // An answer about another resource (or missing the signed part) is not stored: replaying it could not
            // check it again.
            Err(e) => {
                tracing::warn!(error = %e, "the provider's API answered about another resource");
                Err(unavailable("it answered about another resource"))
            }
        }
    }

    /// The confirmation's description for the stored delivery: where its effect came from.
    pub(crate) fn describe(&self, request: &(impl Headers + ?Sized)) -> String {
        let path = self.settings.confirm.path_for(request).unwrap_or_default();
        format!("confirmed by GET {}{path}", self.settings.base_url)
    }
}

/// The answer's bytes, at most `limit` of them.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, &'static str> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| "its answer broke off")? {
        if body.len() + chunk.len() > limit {
            return Err("its answer is over the body limit");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
