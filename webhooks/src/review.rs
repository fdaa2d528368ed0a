//! AdmissionReview `admission.k8s.io/v1` in and out.
//!
//! The request is decoded borrowed: `object` and `oldObject` stay raw JSON slices of the body,
//! for the validation library to read only what its rules need. kube's typed `AdmissionReview`
//! would decode both whole objects, and its `AdmissionResponse::with_patch` serializes the patch
//! as a number array where the apiserver wants base64, so the envelope is written here.

use std::borrow::Cow;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use volume_health_validation::UserInfo;

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// A body that is not an AdmissionReview this server can answer: HTTP 400, since without a
/// `uid` no response could be matched to the request.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
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
#[serde(rename_all = "camelCase")]
struct AdmissionReview<'a> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    request: Option<Request<'a>>,
}

/// The parts of `request` this server reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    /// `uid`, echoed in the response.
    #[serde(borrow, default)]
    pub uid: Cow<'a, str>,
    /// `resource`.
    #[serde(borrow, default)]
    pub resource: GroupVersionResource<'a>,
    /// `subResource`.
    #[serde(borrow, default)]
    pub sub_resource: Option<Cow<'a, str>>,
    /// `name`.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// `namespace`.
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    /// `operation`.
    #[serde(borrow, default)]
    pub operation: Cow<'a, str>,
    /// `userInfo`.
    #[serde(borrow, default)]
    pub user_info: UserInfo<'a>,
    /// `object`, raw.
    #[serde(borrow, default)]
    pub object: Option<&'a RawValue>,
    /// `oldObject`, raw.
    #[serde(borrow, default)]
    pub old_object: Option<&'a RawValue>,
    /// `dryRun`.
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// `request.resource`.
#[derive(Deserialize, Default)]
pub struct GroupVersionResource<'a> {
    /// API group, `""` for core.
    #[serde(borrow, default)]
    pub group: Cow<'a, str>,
    /// Version.
    #[serde(borrow, default)]
    pub version: Cow<'a, str>,
    /// Plural resource.
    #[serde(borrow, default)]
    pub resource: Cow<'a, str>,
}

impl Request<'_> {
    /// `subResource`, `""` when absent.
    pub fn subresource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or_default()
    }

    /// `name`, `""` when absent.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// `object`, with JSON `null` read as absent.
    pub fn object(&self) -> Option<&RawValue> {
        self.object.filter(|raw| raw.get() != "null")
    }

    /// `oldObject`, with JSON `null` read as absent.
    pub fn old_object(&self) -> Option<&RawValue> {
        self.old_object.filter(|raw| raw.get() != "null")
    }
}

/// Decodes and checks an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<Request<'_>, BadReview> {
    let review: AdmissionReview<'_> = serde_json::from_slice(body).map_err(BadReview::Decode)?;
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
