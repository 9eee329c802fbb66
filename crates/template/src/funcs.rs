//! The function table templates call, registered here and only here: Go's built-ins, then
//! Sprig's hermetic text functions, then Tinkerbell's own, in the order Tinkerbell gives them to
//! `text/template` (`template.New(..).Funcs(sprig).Funcs(tinkFuncs)`). A later name replaces an
//! earlier one, as a function given to a Go template replaces a built-in: Sprig's `slice`, not
//! Go's, is the one a Tinkerbell template calls.
//!
//! The families depend only on `funcdef` (the signature types), never on each other or on this
//! table.

use std::sync::LazyLock;

use crate::funcdef::{FuncDef, Table};
use crate::{builtins, sprig, tink};

static TABLE: LazyLock<Table> = LazyLock::new(|| {
    let mut t = Table::new();
    builtins::register(&mut t);
    sprig::register(&mut t);
    tink::register(&mut t);
    t
});

/// The function of that name, if templates can call it.
pub fn lookup(name: &str) -> Option<&'static FuncDef> {
    TABLE.get(name)
}

/// Every function name templates can call, sorted.
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = TABLE.keys().copied().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_families_replace_earlier_names() {
        // Go's built-ins are registered first, so Sprig's `slice` (registered after them) is the
        // one templates call, as in Tinkerbell's Go code.
        assert!(!lookup("slice").expect("slice").builtin);
        assert!(lookup("index").expect("index").builtin);
        assert!(lookup("formatPartition").is_some());
        assert!(names().windows(2).all(|w| w[0] < w[1]));
    }
}
