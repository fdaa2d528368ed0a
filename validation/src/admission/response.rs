//! `response` of an AdmissionReview, and the whole body that carries it, as the apiserver reads
//! them. It is data: a webhook adds HTTP.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;

use super::{API_VERSION, KIND};

/// `response` of an AdmissionReview `admission.k8s.io/v1`.
///
/// ```
/// use volume_health_validation::admission::Response;
///
/// let body = Response::allow("705ab4f5").into_body();
/// assert_eq!(
///     String::from_utf8(body)?,
///     r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5","allowed":true}}"#
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    ///
    /// ```
    /// use volume_health_validation::admission::Response;
    ///
    /// let response = Response::allow("705ab4f5");
    /// assert!(response.allowed);
    /// // Nothing else is said: no status, no patch, no warning.
    /// assert!(response.status.is_none() && response.patch.is_none());
    /// assert!(response.warnings.is_empty());
    /// ```
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
    ///
    /// ```
    /// use volume_health_validation::admission::Response;
    /// use volume_health_validation::status::bad_request_status;
    ///
    /// let status = bad_request_status("request body is not an AdmissionReview".into());
    /// let response = Response::deny("705ab4f5", status);
    /// assert!(!response.allowed);
    /// assert_eq!(response.status.and_then(|s| s.code), Some(400));
    /// ```
    pub fn deny(uid: &'a str, status: Status) -> Self {
        Response {
            allowed: false,
            status: Some(status),
            ..Response::allow(uid)
        }
    }

    /// Allowed with `patch` (a JSON Patch: [`DropOnSave::patch`](super::DropOnSave::patch), or
    /// any list of operations that serializes as one) applied, encoded as the apiserver expects:
    /// standard base64 of the JSON array.
    ///
    /// ```
    /// use volume_health_validation::admission::Response;
    ///
    /// // Any list of operations that serializes as a JSON Patch.
    /// let patch = serde_json::json!([{"op": "remove", "path": "/status/volumeHealth"}]);
    /// let response = Response::allow_patching("705ab4f5", &patch);
    /// assert!(response.allowed);
    /// assert_eq!(response.patch_type, Some("JSONPatch"));
    /// assert_eq!(
    ///     response.patch.as_deref(),
    ///     Some("W3sib3AiOiJyZW1vdmUiLCJwYXRoIjoiL3N0YXR1cy92b2x1bWVIZWFsdGgifV0=")
    /// );
    /// ```
    pub fn allow_patching<P: Serialize + ?Sized>(uid: &'a str, patch: &P) -> Self {
        // Encoded as it is written: a large patch is never held as JSON and as base64 at once.
        let mut encoder = Base64::default();
        serde_json::to_writer(&mut encoder, patch).expect("plain JSON serializes");
        Response {
            patch: Some(encoder.finish()),
            patch_type: Some("JSONPatch"),
            ..Response::allow(uid)
        }
    }

    /// The whole AdmissionReview body.
    ///
    /// ```
    /// use volume_health_validation::admission::Response;
    ///
    /// let mut response = Response::allow("705ab4f5");
    /// response.warnings.push("status.volumeHealth was dropped".into());
    /// let body: serde_json::Value = serde_json::from_slice(&response.into_body())?;
    /// // The envelope an apiserver reads: the review's type around the response.
    /// assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    /// assert_eq!(body["kind"], "AdmissionReview");
    /// assert_eq!(body["response"]["uid"], "705ab4f5");
    /// assert_eq!(body["response"]["warnings"][0], "status.volumeHealth was dropped");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn into_body(self) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: Response<'a>,
        }
        plain_json(&Out {
            api_version: API_VERSION,
            kind: KIND,
            response: self,
        })
    }
}

/// JSON of strings, numbers, bools, and maps with string keys, which `serde_json` always
/// serializes.
fn plain_json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("plain JSON serializes")
}

/// Standard base64 with padding, written as bytes come: whole groups of three at once, the rest
/// kept for the next write.
#[derive(Default)]
struct Base64 {
    out: String,
    pending: Vec<u8>,
}

impl std::io::Write for Base64 {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        let whole = self.pending.len() / 3 * 3;
        self.out.push_str(&base64(&self.pending[..whole]));
        self.pending.drain(..whole);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Base64 {
    fn finish(mut self) -> String {
        self.out.push_str(&base64(&self.pending));
        self.out
    }
}

/// Standard base64 with padding (RFC 4648, section 4), as the apiserver reads `patch`. A few
/// lines here spare every program that uses the library a dependency that only a webhook needs.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        // Three bytes are four sextets; a short last chunk writes one more sextet than it has
        // bytes, then padding.
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(group >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn base64_as_rfc_4648_encodes() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (text, want) in vectors {
            assert_eq!(base64(text.as_bytes()), want, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn base64_is_the_standard_engine(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            prop_assert_eq!(
                base64(&bytes),
                ::base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
        }
    }

    proptest! {
        #[test]
        fn base64_written_in_pieces_is_base64_of_the_whole(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            cuts in proptest::collection::vec(0usize..256, 0..8),
        ) {
            use std::io::Write as _;
            let mut encoder = Base64::default();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                encoder.write_all(&bytes[at..cut]).unwrap();
                at = cut;
            }
            prop_assert_eq!(encoder.finish(), base64(&bytes));
        }
    }

    #[test]
    fn a_patch_is_base64_of_its_json() {
        let drop = super::super::DropOnSave::new(crate::HealthResource::Pods);
        let response = Response::allow_patching("u", &drop.patch());
        let patch = response.patch.as_deref().unwrap();
        let json = ::base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        assert_eq!(json, br#"[{"op":"remove","path":"/status/volumeHealth"}]"#);
        assert_eq!(response.patch_type, Some("JSONPatch"));
    }
}
