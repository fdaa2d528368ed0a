//! AdmissionReview `admission.k8s.io/v1` in and out.
//!
//! The review is read by the validation library's [`AdmissionReview::parse`], which reads of
//! `object` and `oldObject` only what its rules need, in the same pass as the envelope. kube's
//! typed `AdmissionReview` would decode both whole objects, and its
//! `AdmissionResponse::with_patch` serializes the patch as a number array where the apiserver
//! wants base64, so the envelope is written here.

use std::collections::BTreeMap;

use base64::Engine;
use json_patch::Patch;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;
use volume_health_validation::admission::ReviewError;
use volume_health_validation::{AdmissionRequest, AdmissionReview};

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

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
impl PlainJson for Patch {}

/// `response` of an AdmissionReview.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Response<'a> {
    /// The request's uid.
    pub uid: &'a str,
    /// The decision.
    pub allowed: bool,
    /// Why it was denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Base64 of the RFC 6902 patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Always `JSONPatch` when `patch` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// Shown to the client as `Warning` headers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Recorded in the apiserver's audit log, each key prefixed with the webhook's name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<&'static str, String>,
}

impl<'a> Response<'a> {
    /// Allowed, unchanged.
    pub fn allow(uid: &'a str) -> Self {
        Response {
            uid,
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    /// Denied with `status`.
    pub fn deny(uid: &'a str, status: Status) -> Self {
        Response {
            allowed: false,
            status: Some(status),
            ..Response::allow(uid)
        }
    }

    /// Allowed with `patch` applied, the patch encoded as the apiserver expects: standard
    /// base64 of the JSON array.
    pub fn allow_patching(uid: &'a str, patch: &Patch) -> Self {
        Response {
            patch: Some(base64::engine::general_purpose::STANDARD.encode(patch.to_json())),
            patch_type: Some("JSONPatch"),
            ..Response::allow(uid)
        }
    }

    /// The whole AdmissionReview body.
    pub fn into_body(self) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: Response<'a>,
        }
        impl PlainJson for Out<'_> {}
        Out {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        }
        .to_json()
    }
}

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
