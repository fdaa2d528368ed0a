//! Errors as one line of text, the way the webhooks and `check` print them.

/// An error and its sources as one line, `err: source: source`, skipping a source whose text
/// the message already contains (serde and io errors often repeat their cause). The message of
/// a 400 for an object that does not decode, as the webhooks and `check` give it.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
