//! The load benchmark's requests are what kube-apiserver sends, and take the server's usual
//! path: every one is read (members in the apiserver's order, `resource` before the objects,
//! objects of their kind), and is allowed.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use volume_health_tests::bench_requests;
use volume_health_validation::{AdmissionReview, HealthResource, Operation, Settings, Verdict};

#[test]
fn admission_requests_are_read_in_one_pass_and_allowed() {
    let policy = Settings::with_gate(true);
    for (body, resource, size) in [
        (
            bench_requests::pod_status_update(),
            HealthResource::Pods,
            20_000..30_000,
        ),
        (
            bench_requests::pvc_status_update(),
            HealthResource::PersistentVolumeClaims,
            5_000..8_000,
        ),
        (
            bench_requests::csinode_status_update(),
            HealthResource::CsiNodes,
            4_000..8_000,
        ),
    ] {
        assert!(size.contains(&body.len()), "{}", body.len());
        let body = std::str::from_utf8(&body).unwrap();
        assert!(body.find("\"resource\"") < body.find("\"object\""));
        let request = AdmissionReview::parse(body).unwrap().request;
        assert_eq!(request.health_resource(), Some(resource));
        assert_eq!(request.operation, Operation::Update);
        assert!(request.has_object());
        assert_eq!(request.validate(&policy).unwrap(), Verdict::Allowed);
    }
}
