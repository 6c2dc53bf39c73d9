//! `error_type!`: the one shape of a Baton library crate's error.
//!
//! Each library crate has one error type: a kind to branch on, a message
//! for people that names the fix, and the cause underneath. Its message
//! ends with the cause, so a log line that shows the error shows why; the
//! cause is also its `source()`, so a caller can downcast it. A reporter
//! that walks the chain ([`error_chain`]) says each cause once.

/// `err` and its causes as one line, each said once: for an error kept as
/// text (an event's detail, an agent's error, a log field), so that the
/// cause a library keeps apart (reqwest's, say) is not lost.
#[must_use]
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let said = next.to_string();
        // Many errors show their cause in their own message too.
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// Declares a crate's error type in the one shape: `new(kind, message)`,
/// `with_source(kind, message, cause)`, `transparent(kind, cause)` (a
/// lower crate's error passed on as it is), `kind()`, `message()`, a
/// `Display` of the message and the cause, and the cause as `source()`.
///
/// ```
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// pub enum ErrorKind {
///     Store,
/// }
///
/// baton_proto::error_type! {
///     /// Why it failed.
///     pub struct Error(ErrorKind);
/// }
///
/// let cause = std::io::Error::other("connection refused");
/// let err = Error::with_source(ErrorKind::Store, "cannot read", cause);
/// assert_eq!(err.to_string(), "cannot read: connection refused");
/// assert_eq!(err.kind(), ErrorKind::Store);
/// assert_eq!(err.message(), "cannot read");
/// assert!(std::error::Error::source(&err).is_some());
/// ```
#[macro_export]
macro_rules! error_type {
    ($(#[$meta:meta])* $vis:vis struct $name:ident($kind:ty);) => {
        $(#[$meta])*
        #[derive(Debug)]
        $vis struct $name {
            kind: $kind,
            message: ::std::string::String,
            source: ::std::option::Option<
                ::std::boxed::Box<dyn ::std::error::Error + Send + Sync>,
            >,
        }

        #[allow(dead_code)]
        impl $name {
            /// An error of `kind` saying `message`.
            #[doc(hidden)]
            pub fn new(kind: $kind, message: impl ::std::convert::Into<::std::string::String>) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    source: None,
                }
            }

            /// An error of `kind` saying `message`, caused by `source`.
            #[doc(hidden)]
            pub fn with_source(
                kind: $kind,
                message: impl ::std::convert::Into<::std::string::String>,
                source: impl ::std::convert::Into<
                    ::std::boxed::Box<dyn ::std::error::Error + Send + Sync>,
                >,
            ) -> Self {
                Self {
                    kind,
                    message: message.into(),
                    source: Some(source.into()),
                }
            }

            /// An error of `kind` that is `source`, said as it is: for a
            /// lower crate's error passed on.
            #[doc(hidden)]
            pub fn transparent(
                kind: $kind,
                source: impl ::std::convert::Into<
                    ::std::boxed::Box<dyn ::std::error::Error + Send + Sync>,
                >,
            ) -> Self {
                Self::with_source(kind, ::std::string::String::new(), source)
            }

            /// What failed, for callers that branch on it.
            #[must_use]
            pub fn kind(&self) -> $kind {
                self.kind
            }

            /// What failed, without its cause.
            #[must_use]
            pub fn message(&self) -> &str {
                &self.message
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match &self.source {
                    Some(source) if self.message.is_empty() => write!(f, "{source}"),
                    Some(source) => write!(f, "{}: {source}", self.message),
                    None => f.write_str(&self.message),
                }
            }
        }

        impl ::std::error::Error for $name {
            fn source(&self) -> ::std::option::Option<&(dyn ::std::error::Error + 'static)> {
                self.source
                    .as_deref()
                    .map(|source| source as &(dyn ::std::error::Error + 'static))
            }
        }
    };
}
