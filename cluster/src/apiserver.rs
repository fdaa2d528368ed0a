//! Raw requests to the apiserver, for what typed clients hide: the `Warning` headers of an
//! answer, its `metav1.Status`, and `/metrics` as text.

use http::{Method, Request};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use kube::client::Body;
use serde_json::Value;

/// Most bytes of an answer read. The apiserver is the operator's own, but `/metrics` of a busy
/// one is large, and a status answer holds an object: this bounds both.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Why a request got no answer at all.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request could not be sent, or its answer read.
    #[error("{method} {path}: {source}")]
    Transport {
        /// The method.
        method: Method,
        /// The path.
        path: String,
        /// What failed.
        #[source]
        source: kube::Error,
    },
    /// The answer's body could not be read.
    #[error("{method} {path}: reading the answer: {source}")]
    Body {
        /// The method.
        method: Method,
        /// The path.
        path: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The answer was larger than [`MAX_BODY_BYTES`].
    #[error("{method} {path}: the answer is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge {
        /// The method.
        method: Method,
        /// The path.
        path: String,
    },
    /// The request itself could not be built (a path that is not a URI).
    #[error("{path}: {source}")]
    Build {
        /// The path.
        path: String,
        /// What failed.
        #[source]
        source: http::Error,
    },
}

/// An answer: its status code, its `Warning` headers' texts, and its body.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Answer {
    /// The HTTP status code.
    pub(crate) code: u16,
    /// The warnings, as the apiserver's `299 - "text"` headers carry them, unquoted.
    pub(crate) warnings: Vec<String>,
    /// The body, as JSON (`Null` when it is not JSON).
    pub(crate) body: Value,
}

impl Answer {
    /// True for a 2xx answer.
    pub(crate) fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The `message` of a `metav1.Status` answer, or "".
    pub(crate) fn message(&self) -> &str {
        self.body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// The apiserver a client talks to.
#[derive(Clone)]
pub(crate) struct Apiserver {
    client: kube::Client,
}

impl Apiserver {
    /// Requests through `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Apiserver { client }
    }

    /// A GET of a JSON object: `None` when it is not found (404).
    pub(crate) async fn get(&self, path: &str) -> Result<Option<Value>, RequestError> {
        let answer = self.send(Method::GET, path, None, None).await?;
        Ok(match answer.code {
            404 => None,
            _ => Some(answer.body),
        })
    }

    /// A GET of text (`/metrics`): the code and the text.
    pub(crate) async fn get_text(&self, path: &str) -> Result<(u16, String), RequestError> {
        let (code, _, bytes) = self.exchange(Method::GET, path, None, None).await?;
        Ok((code, String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// A request with a JSON body (`content_type` names the patch type of a PATCH).
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<Answer, RequestError> {
        let (code, warnings, bytes) = self.exchange(method, path, body, content_type).await?;
        Ok(Answer {
            code,
            warnings,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
    ) -> Result<(u16, Vec<String>, Vec<u8>), RequestError> {
        let mut request = Request::builder().method(method.clone()).uri(path);
        if body.is_some() {
            request = request.header(
                http::header::CONTENT_TYPE,
                content_type.unwrap_or("application/json"),
            );
        }
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = request
            .body(Body::from(bytes))
            .map_err(|source| RequestError::Build {
                path: path.to_owned(),
                source,
            })?;
        let transport = |source| RequestError::Transport {
            method: method.clone(),
            path: path.to_owned(),
            source,
        };
        let response = self.client.send(request).await.map_err(transport)?;
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all(http::header::WARNING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(warning_text)
            .collect();
        let body = match Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => {
                return Err(RequestError::TooLarge {
                    method,
                    path: path.to_owned(),
                });
            }
            Err(source) => {
                return Err(RequestError::Body {
                    method,
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Ok((code, warnings, body.to_vec()))
    }
}

/// The text of a `Warning` header as the apiserver writes it: `299 - "text"`, with `\"` and
/// `\\` escaped inside the quotes.
pub fn warning_text(header: &str) -> String {
    let Some(quoted) = header
        .strip_prefix("299 - \"")
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return header.to_owned();
    };
    let mut text = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.extend(chars.next()),
            c => text.push(c),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::warning_text;

    #[test]
    fn warnings_are_unquoted_as_the_apiserver_quotes_them() {
        let cases = [
            (r#"299 - "plain""#, "plain"),
            (r#"299 - "a \"quoted\" word""#, r#"a "quoted" word"#),
            (r#"299 - "back\\slash""#, r"back\slash"),
            ("not a warning header", "not a warning header"),
        ];
        for (header, text) in cases {
            assert_eq!(warning_text(header), text, "{header}");
        }
    }
}
