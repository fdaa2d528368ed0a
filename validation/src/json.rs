//! JSON read as Kubernetes reads it, for the readers beside a review's (a SubjectAccessReview,
//! a dump of objects): the strict reading every review of this library gets, and the string
//! helpers its readers share. The decoding of reviews and objects itself is private.

pub use crate::decode::json::{Borrowed, from_str, message_without_position, optional_text};
