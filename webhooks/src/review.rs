//! An AdmissionReview body as HTTP brings it: bytes, checked to be text, handed to the
//! validation library.
//!
//! The library reads the review ([`AdmissionReview::parse`]), reading of `object` and
//! `oldObject` only what its rules need, in the same pass as the envelope, and writes the
//! answer ([`Response`](volume_health_validation::admission::Response)). kube's typed
//! `AdmissionReview` would decode both whole objects, and its `AdmissionResponse::with_patch`
//! serializes the patch as a number array where the apiserver wants base64.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;
use volume_health_validation::admission::ReviewError;
use volume_health_validation::{AdmissionRequest, AdmissionReview};

/// A body that is not an AdmissionReview this server can answer: HTTP 400, since without a
/// `uid` no response could be matched to the request. Each message says what is wrong at this
/// layer; the source, where there is one, says the rest.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// Not text.
    #[error("request body is not an AdmissionReview: not UTF-8")]
    Utf8(#[source] std::str::Utf8Error),
    /// Text, but no review with a request to decide.
    #[error(transparent)]
    Review(#[from] ReviewError),
}

/// Decodes and checks an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<'_>, BadReview> {
    // Checked once here, the text is not checked again string by string as serde reads it.
    let body = std::str::from_utf8(body).map_err(BadReview::Utf8)?;
    Ok(AdmissionReview::parse(body)?.request)
}

/// JSON this server writes: strings, numbers, bools, and maps with string keys, which
/// `serde_json` always serializes.
pub(crate) trait PlainJson: Serialize {
    fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain JSON serializes")
    }
}

impl PlainJson for Status {}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    /// Each error says its own layer once: the source is not repeated in the message, so a
    /// chain reporter prints it once, without de-duplicating.
    #[test]
    fn messages_do_not_repeat_their_source() {
        let utf8 = parse(b"\xff").unwrap_err();
        let decode = parse(b"[]").unwrap_err();
        for err in [utf8, decode] {
            let source = err.source().unwrap().to_string();
            assert!(!err.to_string().contains(&source), "{err}");
        }
    }
}
