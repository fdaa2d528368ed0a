//! A list is read as its text, its length and a fingerprint, so a review with millions of items
//! in a gated field costs no heap per item. The heap is counted by a global allocator that
//! counts only the measured thread.

// Test code unwraps: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

use volume_health_test_kit::alloc::{Counting, measure};
use volume_health_validation::AdmissionReview;
use volume_health_validation::admission::DropOnSave;

#[global_allocator]
static HEAP: Counting = Counting;

/// `items` empty entries, as a JSON array.
fn list(items: usize) -> String {
    format!("[{}{{}}]", "{},".repeat(items - 1))
}

/// A pod status write whose new object's `status.volumeHealth` is `list`.
fn review(list: &str) -> String {
    format!(
        concat!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"#,
            r#""uid":"u","resource":{{"group":"","version":"v1","resource":"pods"}},"#,
            r#""subResource":"status","operation":"UPDATE","userInfo":{{"username":"system:admin"}},"#,
            r#""object":{{"metadata":{{"name":"p"}},"status":{{"volumeHealth":{}}}}},"#,
            r#""oldObject":{{"metadata":{{"name":"p"}}}}}}}}"#
        ),
        list
    )
}

/// The peak heap of reading `body` and deciding drop on save (gate off) over it, which reads
/// the list's length.
fn peak_of_a_review(body: &str) -> usize {
    let (dropped, peak) = measure(|| {
        let review = AdmissionReview::parse(body).unwrap();
        review.request.gated_field_to_drop(false).unwrap()
    });
    assert_eq!(
        dropped.map(DropOnSave::pointer),
        Some("/status/volumeHealth"),
        "the list was read"
    );
    peak
}

#[test]
fn millions_of_items_take_no_memory_per_item() {
    let (million, two_million) = (review(&list(1_000_000)), review(&list(2_000_000)));
    let (one, two) = (peak_of_a_review(&million), peak_of_a_review(&two_million));
    eprintln!(
        "peak heap: {one} bytes for a {}-byte review, {two} for {} bytes",
        million.len(),
        two_million.len()
    );
    // The items decoded into a `Vec`, at a byte each, would be a third of the body.
    assert!(
        one < million.len() / 16,
        "{one} bytes for a {}-byte review",
        million.len()
    );
    // Twice the items, the same heap: nothing per item.
    assert!(
        one.abs_diff(two) < 16 * 1024,
        "{one} bytes for a million items, {two} for two million"
    );
}

/// The counter sees what a read holds per item: the same list decoded into a `Vec` of empty
/// maps takes at least their size for each item.
#[test]
fn a_vec_of_the_items_is_counted() {
    let items = 1_000_000;
    let text = list(items);
    type Item = std::collections::BTreeMap<String, u8>;
    let (decoded, peak) = measure(|| serde_json::from_str::<Vec<Item>>(&text).unwrap());
    assert_eq!(decoded.len(), items);
    assert!(
        peak >= items * size_of::<Item>(),
        "{peak} bytes for {items} items"
    );
}
