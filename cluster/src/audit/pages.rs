//! The objects a cluster holds, listed a page at a time with continue tokens, so that only one
//! page is ever held.

use serde::Deserialize;
use serde_json::value::RawValue;
use volume_health_validation::HealthResource;

use super::AuditError;
use crate::apiserver::{Apiserver, RequestError};

/// Where the pages come from: the apiserver, or a test's pages.
pub(crate) trait PageSource {
    /// The page of `path` (a list path with its `limit` and `continue`): the HTTP code and the
    /// body.
    async fn get(&self, path: &str) -> Result<(u16, String), RequestError>;
}

impl PageSource for Apiserver {
    async fn get(&self, path: &str) -> Result<(u16, String), RequestError> {
        // Bounded as every answer of `Apiserver` is: a page is never read past that size.
        self.get_text(path).await
    }
}

/// The path of a list of `resource` in every namespace: at most `limit` objects, from `token`.
pub(crate) fn list_path(resource: HealthResource, limit: u32, token: Option<&str>) -> String {
    let mut path = match resource.group() {
        "" => format!("/api/v1/{}", resource.resource()),
        group => format!("/apis/{group}/v1/{}", resource.resource()),
    };
    path.push_str(&format!("?limit={limit}"));
    if let Some(token) = token {
        path.push_str("&continue=");
        query_escape(token, &mut path);
    }
    path
}

/// Appends `text` percent-encoded for a query value: a continue token is base64, whose `+`, `/`
/// and `=` would otherwise be read as other characters.
fn query_escape(text: &str, out: &mut String) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// One page of a list: its items, unparsed, and the token of the next.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Default, Deserialize)]
struct ListMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// The `metav1.Status` of a refused list: its message and, for an expired token (410), the
/// token the apiserver offers to go on with.
#[derive(Default, Deserialize)]
struct Status {
    #[serde(default)]
    message: String,
    #[serde(default)]
    metadata: ListMeta,
}

/// Lists every object of `resource`, `limit` at a time, handing each to `visit`. A continue
/// token the apiserver no longer serves (410: the list took longer than etcd keeps its
/// snapshot) is replaced by the one it offers, which goes on from now: the list is then not one
/// snapshot, which `notes` says, and objects changed meanwhile may be seen twice or not at all.
pub(crate) async fn each_object<S: PageSource>(
    source: &S,
    resource: HealthResource,
    limit: u32,
    notes: &mut Vec<String>,
    mut visit: impl FnMut(&RawValue),
) -> Result<(), AuditError> {
    let mut token: Option<String> = None;
    loop {
        let path = list_path(resource, limit, token.as_deref());
        let (code, body) = source.get(&path).await.map_err(|source| AuditError::List {
            resource: resource.resource(),
            source,
        })?;
        let next = match code {
            200 => {
                let page: Page<'_> =
                    serde_json::from_str(&body).map_err(|source| AuditError::Page {
                        resource: resource.resource(),
                        source,
                    })?;
                for item in page.items.iter().flatten() {
                    visit(item);
                }
                page.metadata.next
            }
            410 if token.is_some() => {
                let status: Status = serde_json::from_str(&body).unwrap_or_default();
                match status.metadata.next {
                    Some(next) if !next.is_empty() => {
                        notes.push(format!(
                            "{}: the list outlived the apiserver's snapshot; went on from a newer one, so objects changed meanwhile may be missed",
                            resource.resource()
                        ));
                        Some(next)
                    }
                    _ => {
                        return Err(AuditError::Expired {
                            resource: resource.resource(),
                        });
                    }
                }
            }
            code => {
                let status: Status = serde_json::from_str(&body).unwrap_or_default();
                return Err(AuditError::Refused {
                    resource: resource.resource(),
                    code,
                    message: error_line::cut(&status.message, error_line::MAX_MESSAGE_BYTES)
                        .into_owned(),
                });
            }
        };
        match next {
            Some(next) if !next.is_empty() => {
                // A server that hands back the token it was given would be listed for ever.
                if token.as_deref() == Some(next.as_str()) {
                    return Err(AuditError::Stuck {
                        resource: resource.resource(),
                    });
                }
                token = Some(next);
            }
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use super::*;

    /// Pages answered in order, and the paths asked for.
    #[derive(Default)]
    struct Fake {
        answers: RefCell<VecDeque<(u16, String)>>,
        asked: RefCell<Vec<String>>,
    }

    impl Fake {
        fn new(answers: &[(u16, &str)]) -> Self {
            Fake {
                answers: RefCell::new(answers.iter().map(|(c, b)| (*c, (*b).to_owned())).collect()),
                asked: RefCell::default(),
            }
        }
    }

    impl PageSource for Fake {
        async fn get(&self, path: &str) -> Result<(u16, String), RequestError> {
            self.asked.borrow_mut().push(path.to_owned());
            Ok(self
                .answers
                .borrow_mut()
                .pop_front()
                .unwrap_or((500, String::new())))
        }
    }

    fn names(source: &Fake, limit: u32) -> (Result<(), AuditError>, Vec<String>, Vec<String>) {
        let mut seen = Vec::new();
        let mut notes = Vec::new();
        let result = block_on(each_object(
            source,
            HealthResource::Pods,
            limit,
            &mut notes,
            |item| {
                let value: serde_json::Value = serde_json::from_str(item.get()).unwrap();
                seen.push(value["metadata"]["name"].as_str().unwrap().to_owned());
            },
        ));
        (result, seen, notes)
    }

    /// Runs a future that never waits (the fake answers at once) to its end.
    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn every_page_is_read_in_turn_with_its_token() {
        let source = Fake::new(&[
            (
                200,
                r#"{"kind":"PodList","metadata":{"continue":"a+b/c="},"items":[{"metadata":{"name":"one"}},{"metadata":{"name":"two"}}]}"#,
            ),
            (
                200,
                r#"{"metadata":{"continue":""},"items":[{"metadata":{"name":"three"}}]}"#,
            ),
        ]);
        let (result, seen, notes) = names(&source, 2);
        result.unwrap();
        assert_eq!(seen, ["one", "two", "three"]);
        assert!(notes.is_empty());
        assert_eq!(
            *source.asked.borrow(),
            [
                "/api/v1/pods?limit=2",
                "/api/v1/pods?limit=2&continue=a%2Bb%2Fc%3D"
            ]
        );
    }

    #[test]
    fn an_empty_list_and_null_items_end_at_once() {
        for body in [r#"{"items":[]}"#, r#"{"items":null}"#, r#"{"metadata":{}}"#] {
            let source = Fake::new(&[(200, body)]);
            let (result, seen, _) = names(&source, 500);
            result.unwrap();
            assert!(seen.is_empty());
            assert_eq!(source.asked.borrow().len(), 1);
        }
    }

    #[test]
    fn an_expired_token_goes_on_with_the_offered_one_and_says_so() {
        let source = Fake::new(&[
            (
                200,
                r#"{"metadata":{"continue":"old"},"items":[{"metadata":{"name":"one"}}]}"#,
            ),
            (
                410,
                r#"{"kind":"Status","code":410,"reason":"Expired","message":"too old","metadata":{"continue":"newer"}}"#,
            ),
            (200, r#"{"items":[{"metadata":{"name":"two"}}]}"#),
        ]);
        let (result, seen, notes) = names(&source, 1);
        result.unwrap();
        assert_eq!(seen, ["one", "two"]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(source.asked.borrow()[2].ends_with("continue=newer"));
    }

    #[test]
    fn an_expired_token_without_another_fails() {
        let source = Fake::new(&[
            (200, r#"{"metadata":{"continue":"old"},"items":[]}"#),
            (410, r#"{"kind":"Status","code":410,"message":"too old"}"#),
        ]);
        let (result, _, _) = names(&source, 1);
        assert!(
            matches!(result, Err(AuditError::Expired { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn a_refusal_carries_the_apiservers_message_bounded() {
        let message = format!("pods is forbidden: {}", "x".repeat(5000));
        let body = serde_json::json!({"kind": "Status", "code": 403, "message": message});
        let source = Fake::new(&[(403, &body.to_string())]);
        let (result, _, _) = names(&source, 1);
        match result {
            Err(AuditError::Refused { code, message, .. }) => {
                assert_eq!(code, 403);
                assert!(message.starts_with("pods is forbidden"));
                assert!(message.len() <= error_line::MAX_MESSAGE_BYTES);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_page_that_is_not_a_list_fails_and_a_repeated_token_stops() {
        let source = Fake::new(&[(200, "<html>")]);
        assert!(matches!(names(&source, 1).0, Err(AuditError::Page { .. })));
        let page = r#"{"metadata":{"continue":"same"},"items":[]}"#;
        let source = Fake::new(&[(200, page), (200, page)]);
        assert!(matches!(names(&source, 1).0, Err(AuditError::Stuck { .. })));
    }

    #[test]
    fn paths_name_each_resource_in_every_namespace() {
        assert_eq!(
            list_path(HealthResource::CsiNodes, 500, None),
            "/apis/storage.k8s.io/v1/csinodes?limit=500"
        );
        assert_eq!(
            list_path(HealthResource::PersistentVolumeClaims, 7, Some("t")),
            "/api/v1/persistentvolumeclaims?limit=7&continue=t"
        );
    }
}
