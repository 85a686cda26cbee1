//! Kubernetes label selectors (full syntax) and the `metadata.name` / `metadata.namespace`
//! field selectors. Owned by the API work; this is the agreed public surface.

use crate::inventory::Labels;

/// A parsed label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {}

/// A selector that did not parse; the message is shown to the user in a 400 Status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

impl LabelSelector {
    /// Parses `labelSelector` syntax (`a=b,c!=d,e in (f,g),!h,i`). Empty selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let _ = s;
        Ok(LabelSelector {})
    }

    /// Whether the labels match.
    pub fn matches(&self, labels: &Labels) -> bool {
        let _ = labels;
        true
    }

    /// Selects everything.
    pub fn is_empty(&self) -> bool {
        true
    }
}
