//! [`Shared`]: a value an agent is handed together with the worker that
//! runs it, copied only when the agent changes it.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value the agent shares with its worker (a [`crate::Task`]'s envelope):
/// reading it copies nothing, and the first change makes the agent its own
/// copy (copy on write), so what the worker holds never changes under it.
/// It reads as the value itself (`task.envelope.context`), changes in
/// place (`task.envelope.context.variables.insert(..)`), and serializes as
/// the value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// Shares `value`.
    #[must_use]
    pub fn new(value: T) -> Self {
        Self(Arc::new(value))
    }
}

impl<T: Clone> Shared<T> {
    /// The value itself: moved out when nothing else shares it, else a
    /// copy.
    #[must_use]
    pub fn into_inner(self) -> T {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> AsRef<T> for Shared<T> {
    fn as_ref(&self) -> &T {
        &self.0
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_copies_nothing_and_a_change_copies_once() {
        let held = Shared::new(vec![1, 2]);
        let mut handed = held.clone();
        assert!(Arc::ptr_eq(&held.0, &handed.0));
        assert_eq!(handed.len(), 2);
        handed.push(3);
        assert!(!Arc::ptr_eq(&held.0, &handed.0));
        assert_eq!((*held).clone(), [1, 2]);
        assert_eq!((*handed).clone(), [1, 2, 3]);
        // Once the agent let go, the worker takes it back without a copy.
        drop(handed);
        let address = held.as_ref().as_ptr();
        let back = held.into_inner();
        assert_eq!(back.as_ptr(), address);
        assert_eq!(
            serde_json::to_string(&Shared::new(7)).ok().as_deref(),
            Some("7")
        );
    }
}
