//! AdmissionReview `admission.k8s.io/v1` in and out.
//!
//! The request is decoded borrowed, as the validation library's [`AdmissionRequest`], which reads
//! of `object` and `oldObject` only what its rules need, in the same pass as the envelope. kube's typed `AdmissionReview`
//! would decode both whole objects, and its `AdmissionResponse::with_patch` serializes the patch
//! as a number array where the apiserver wants base64, so the envelope is written here.

use std::borrow::Cow;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::{Deserialize, Serialize};
use volume_health_validation::{AdmissionRequest, RawObjects, json};

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// A body that is not an AdmissionReview this server can answer: HTTP 400, since without a
/// `uid` no response could be matched to the request.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// Not text.
    #[error("request body is not an AdmissionReview: not UTF-8: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    /// Not JSON of the AdmissionReview shape.
    #[error("request body is not an AdmissionReview: {0}")]
    Decode(#[source] serde_json::Error),
    /// Another apiVersion or kind.
    #[error(
        "expected kind AdmissionReview in admission.k8s.io/v1, got {kind:?} in {api_version:?}"
    )]
    Type {
        /// The body's `apiVersion`.
        api_version: String,
        /// The body's `kind`.
        kind: String,
    },
    /// No `request`.
    #[error("AdmissionReview has no request")]
    MissingRequest,
    /// A request without `uid`.
    #[error("AdmissionReview request has no uid")]
    MissingUid,
    /// An operation that is not CREATE, UPDATE, DELETE or CONNECT.
    #[error("AdmissionReview request has unknown operation {0:?}")]
    Operation(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound = "R: Deserialize<'de>")]
struct AdmissionReview<'a, R> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(default)]
    request: Option<R>,
}

/// How much of the objects to read with the review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objects {
    /// The views the rules read, in the same pass as the rest of the body.
    Read,
    /// Nothing: checked to be JSON and skipped.
    Skip,
}

/// Decodes and checks an AdmissionReview body.
pub fn parse(body: &[u8], objects: Objects) -> Result<AdmissionRequest<'_>, BadReview> {
    // Checked once here, the text is not checked again string by string as serde reads it.
    let body = std::str::from_utf8(body).map_err(BadReview::Utf8)?;
    let review = match objects {
        Objects::Read => {
            match json::from_str::<AdmissionReview<'_, AdmissionRequest<'_>>>(body) {
                Ok(review) => review,
                // An object that does not decode as its kind fails the one-pass read as a whole.
                // Reading again with the objects kept raw gives the review, and the object's error
                // when a rule reads it, or the body's own error.
                Err(_) => read_raw(body)?,
            }
        }
        Objects::Skip => read_raw(body)?,
    };
    if review.api_version != API_VERSION || review.kind != KIND {
        return Err(BadReview::Type {
            api_version: review.api_version.into_owned(),
            kind: review.kind.into_owned(),
        });
    }
    let request = review.request.ok_or(BadReview::MissingRequest)?;
    if request.uid.is_empty() {
        return Err(BadReview::MissingUid);
    }
    Ok(request)
}

fn read_raw(body: &str) -> Result<AdmissionReview<'_, AdmissionRequest<'_>>, BadReview> {
    let review: AdmissionReview<'_, RawObjects<'_>> =
        json::from_str(body).map_err(BadReview::Decode)?;
    Ok(AdmissionReview {
        api_version: review.api_version,
        kind: review.kind,
        request: review.request.map(|raw| raw.0),
    })
}

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

    /// Allowed with `patch`, encoded as the apiserver expects: standard base64 of the JSON array.
    pub fn allow_with_patch(uid: &'a str, patch: &json_patch::Patch) -> Self {
        let json = serde_json::to_vec(patch).unwrap_or_else(|_| b"[]".to_vec());
        Response {
            patch: Some(base64::engine::general_purpose::STANDARD.encode(json)),
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
        // Serializing plain strings, bools and a Status cannot fail.
        serde_json::to_vec(&Out {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        })
        .unwrap_or_default()
    }
}
