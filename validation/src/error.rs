//! Errors as one line of text, the way the webhooks and `check` print them, and the bound on
//! how much of a request such a line may quote. The line itself is `error-line`'s, which the
//! node doctor shares.

pub use error_line::{Bounded, MAX_MESSAGE_BYTES, chain, cut, prefix};

/// Most bytes of one value of a request that an error message quotes (an `apiVersion`, a
/// `kind`, an operation).
pub const MAX_QUOTED_BYTES: usize = 128;
