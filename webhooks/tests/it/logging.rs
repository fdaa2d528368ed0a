//! Log levels of the reviews, through a subscriber installed for the test's thread.

use std::time::Duration;

use crate::support;

use axum::Router;
use axum::http::StatusCode;
use support::{Captured, case_body, wire};
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

fn settings(deny_on_mismatch: bool) -> Settings {
    Settings {
        gates: FeatureGates {
            csi_volume_health: true,
        },
        authz_deny_on_mismatch: deny_on_mismatch,
        pvc_health_writers: None,
        storage_condition_identity: Default::default(),
        enforcement_action: EnforcementAction::Deny,
        repair: false,
        max_request_bytes: 7 * 1024 * 1024,
        max_in_flight_bytes: 64 * 1024 * 1024,
        request_timeout: Duration::from_secs(10),
    }
}

fn app(deny_on_mismatch: bool) -> Router {
    router(&settings(deny_on_mismatch), Metrics::new())
}

async fn post(app: &Router, path: &str, id: &str) {
    let (status, _) = support::router_call::call(app, path, wire(&case_body(id))).await;
    assert_eq!(status, StatusCode::OK, "{id}");
}

/// Reviews that are simply allowed (and no-opinion authorizations) are logged at debug level;
/// denials, bad objects and authorization denies at info, with the same fields.
#[tokio::test]
async fn allowed_reviews_are_logged_at_debug_and_the_rest_at_info() {
    let logs = Captured::default();
    let (app, deny) = (app(false), app(true));
    let ordinary = async |app: &Router| {
        post(app, "/validate", "pod-valid").await;
        post(app, "/mutate", "pod-valid").await;
        post(app, "/authorize", "authz-status-update-own").await;
        post(app, "/authorize", "authz-non-node-user").await;
    };

    let guard = logs.install(tracing::Level::INFO);
    ordinary(&app).await;
    assert_eq!(logs.take(), "", "allowed reviews at info");
    post(&app, "/validate", "pod-name-required").await;
    post(&deny, "/authorize", "authz-status-update-other").await;
    let text = logs.take();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains(" INFO "), "{text}");
    assert!(lines[0].contains("admission review"), "{text}");
    assert!(lines[0].contains(r#"decision="invalid""#), "{text}");
    assert!(lines[1].contains(" INFO "), "{text}");
    assert!(lines[1].contains("authorization review"), "{text}");
    assert!(lines[1].contains(r#"decision="deny""#), "{text}");
    drop(guard);

    let _guard = logs.install(tracing::Level::DEBUG);
    ordinary(&app).await;
    let text = logs.take();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines.iter().all(|l| l.contains(" DEBUG ")), "{text}");
    for (line, decision) in lines
        .iter()
        .zip(["allowed", "allowed", "allow", "no-opinion"])
    {
        assert!(
            line.contains(&format!(r#"decision="{decision}""#)),
            "{text}"
        );
        assert!(line.contains("latency_us="), "{text}");
    }
    for field in ["uid=", "resource=", "operation=", "user=", "dry_run="] {
        assert!(lines[0].contains(field), "{field} in {text}");
    }
    for field in [
        "verb=",
        "group=",
        "subresource=",
        "non_resource=",
        "reason=",
    ] {
        assert!(lines[2].contains(field), "{field} in {text}");
    }
}

/// In `warn` and `dryrun` the answer allows, so the would-be denial is logged whole at info,
/// next to the review's line.
#[tokio::test]
async fn warn_and_dryrun_log_the_would_be_denial_at_info() {
    let logs = Captured::default();
    let _guard = logs.install(tracing::Level::INFO);
    for (action, decision) in [
        (EnforcementAction::Warn, "warned"),
        (EnforcementAction::Dryrun, "dryrun"),
    ] {
        let mut settings = settings(false);
        settings.enforcement_action = action;
        let app = router(&settings, Metrics::new());
        post(&app, "/validate", "pod-valid").await;
        assert_eq!(logs.take(), "", "{action:?}: a valid write at info");
        post(&app, "/validate", "pod-name-required").await;
        let text = logs.take();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines.iter().all(|l| l.contains(" INFO ")), "{text}");
        assert!(lines[0].contains("field validation would deny"), "{text}");
        assert!(
            lines[0].contains(&format!(r#"action="{}""#, action.as_str())),
            "{text}"
        );
        assert!(
            lines[0].contains(
                r#"denial="Pod \"foo\" is invalid: status.volumeHealth[0].name: Required value""#
            ),
            "{text}"
        );
        assert!(lines[1].contains("admission review"), "{text}");
        assert!(
            lines[1].contains(&format!(r#"decision="{decision}""#)),
            "{text}"
        );
    }
}
