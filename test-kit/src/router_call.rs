//! One request through a router in-process (no TLS, no sockets), as the handler tests and the
//! handler benchmark send it.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// `body` POSTed to `path` as JSON; the answer's status and whole body.
pub async fn call(app: &Router, path: &str, body: impl Into<Body>) -> (StatusCode, Bytes) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the body is read")
        .to_bytes();
    (status, bytes)
}
