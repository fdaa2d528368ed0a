//! scratch
use volume_health_validation::{Operation, RestrictionPolicy};
use volume_health_webhooks::review::{self, Objects};
fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap();
    let which = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let body = match which.as_str() {
        "csinode" => volume_health_tests::bench_requests::csinode_status_update(),
        "pod" => volume_health_tests::bench_requests::pod_status_update(),
        "pvc" => volume_health_tests::bench_requests::pvc_status_update(),
        _ => panic!(),
    };
    let policy = RestrictionPolicy {
        gate_enabled: true,
        pvc_health_writers: None,
    };
    for _ in 0..n {
        match mode.as_str() {
            "strict" => {
                let t = std::str::from_utf8(&body).unwrap();
                std::hint::black_box(serde_json::from_str::<serde::de::IgnoredAny>(t).unwrap());
            }
            "parse" => {
                let r = review::parse(&body, Objects::Read).unwrap();
                std::hint::black_box(&r);
            }
            "validate" => {
                let r = review::parse(&body, Objects::Read).unwrap();
                std::hint::black_box(r.validate(Operation::Update, &policy).unwrap());
            }
            _ => panic!(),
        }
    }
}
