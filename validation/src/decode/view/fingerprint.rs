//! Keyed hashes of what a review holds: a list's fingerprint, to compare lists kept as their
//! text, and the 128-bit hash of one value, for sets of names.

use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::LazyLock;

/// Keyed SipHash over the items: equal items give equal fingerprints, and with a key drawn per
/// process nobody can make two different lists collide on purpose. A fingerprint is only ever
/// compared with one other (a list with the old object's), so 64 bits leave a chance of 2^-64
/// per comparison; sets of many names use [`hash128`]. Short lists, held, compare their items
/// and are never hashed on the request path.
pub(super) struct Fingerprint(std::hash::DefaultHasher);

static KEYS: LazyLock<(RandomState, RandomState)> =
    LazyLock::new(|| (RandomState::new(), RandomState::new()));

impl Fingerprint {
    pub(super) fn new() -> Self {
        Fingerprint(KEYS.0.build_hasher())
    }

    pub(super) fn add<T: Fingerprinted>(&mut self, item: &T) {
        item.feed(&mut self.0);
    }

    pub(super) fn finish(mut self, len: usize) -> u64 {
        self.0.write_usize(len);
        self.0.finish()
    }
}

/// The 128-bit keyed hash of one value, for sets of names that need not keep the names.
pub(crate) fn hash128<T: Hash + ?Sized>(value: &T) -> u128 {
    (u128::from(KEYS.0.hash_one(value)) << 64) | u128::from(KEYS.1.hash_one(value))
}

/// What goes into a list's fingerprint: every field that equality compares.
pub(crate) trait Fingerprinted {
    /// Feeds the fields to `state`, as `Hash` would.
    fn feed<H: Hasher>(&self, state: &mut H);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Item(&'static str);

    impl Fingerprinted for Item {
        fn feed<H: Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }

    fn fingerprint(items: &[&'static str]) -> u64 {
        let mut fingerprint = Fingerprint::new();
        for item in items {
            fingerprint.add(&Item(item));
        }
        fingerprint.finish(items.len())
    }

    #[test]
    fn equal_items_in_order_give_equal_fingerprints() {
        assert_eq!(fingerprint(&["a", "b"]), fingerprint(&["a", "b"]));
        assert_ne!(fingerprint(&["a", "b"]), fingerprint(&["b", "a"]));
        assert_ne!(fingerprint(&["ab"]), fingerprint(&["a", "b"]));
        assert_eq!(hash128("name"), hash128("name"));
        assert_ne!(hash128("name"), hash128("other"));
    }
}
