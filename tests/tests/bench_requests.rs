//! The load benchmark's requests are what kube-apiserver sends, and take the server's usual
//! path: every one is read in one pass (members in the apiserver's order, objects of their
//! kind), and is allowed.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use serde::Deserialize;
use volume_health_tests::bench_requests;
use volume_health_validation::{
    AdmissionRequest, HealthResource, Operation, RestrictionPolicy, Verdict,
};

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: AdmissionRequest<'a>,
}

#[test]
fn admission_requests_are_read_in_one_pass_and_allowed() {
    let policy = RestrictionPolicy {
        gate_enabled: true,
        pvc_health_writers: None,
    };
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
        let review: Review<'_> = serde_json::from_slice(&body).unwrap();
        let request = review.request;
        assert_eq!(request.health_resource(), Some(resource));
        assert!(request.has_object());
        assert_eq!(
            request.validate(Operation::Update, &policy).unwrap(),
            Verdict::Allowed
        );
    }
}
