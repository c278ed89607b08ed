//! A value replaced whole while its readers keep the version they took: the reloadable configuration of the server
//! and the routing of the stores. A reader takes the value once (an `Arc`) and runs under it to its end; a reload
//! puts a new one in force for whoever takes it next. Nothing is ever changed in place.

use std::sync::{Arc, PoisonError, RwLock};

/// The version of a `T` in force now.
#[derive(Debug)]
pub struct Current<T>(RwLock<Arc<T>>);

impl<T> Current<T> {
    /// `value` in force.
    pub fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The version in force now; it stays whole for its holder whatever is put in force meanwhile.
    pub fn current(&self) -> Arc<T> {
        // A poisoned lock still holds a whole value: replacing it is one assignment.
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `value` in force for whoever takes it from now on.
    pub fn replace(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }

    /// Puts in force what `next` makes of the version in force, with no other replacement in between.
    pub fn update(&self, next: impl FnOnce(&T) -> T) {
        let mut slot = self.0.write().unwrap_or_else(PoisonError::into_inner);
        *slot = Arc::new(next(&slot));
    }
}

#[cfg(test)]
mod tests {
    use super::Current;

    #[test]
    fn a_holder_keeps_its_version_and_the_next_taker_gets_the_new_one() {
        let value = Current::new(1);
        let held = value.current();
        value.replace(2);
        value.update(|v| v * 10);
        assert_eq!((*held, *value.current()), (1, 20));
    }
}
