//! What the controllers of the current term hold, for read-only callers: `explain` answers from
//! the cluster view and provisioning's snapshot of the term that runs (and leads). `run_all` sets
//! the slot while it runs and clears it when it ends.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::provisioning::Provisioning;
use super::state::Cluster;

/// The current term's view and provisioning, with the deprovisioning settings explain needs.
#[derive(Clone)]
pub struct Term {
    /// The cluster view.
    pub state: Arc<Cluster>,
    /// Provisioning, for its snapshot.
    pub provisioning: Arc<dyn Provisioning>,
    /// Deprovisioning's nomination period.
    pub nomination: Duration,
    /// Whether drift is on.
    pub drift_enabled: bool,
    /// Whether this replica leads: only the leader's view and snapshot are the decisions'.
    pub leading: watch::Receiver<bool>,
}

/// The term that runs, if any: the metrics port's `/explain` answers from it, and says so when
/// there is none.
#[derive(Clone, Default)]
pub struct TermSlot(Arc<RwLock<Option<Term>>>);

impl TermSlot {
    /// Sets (a term starts) or clears (it ends) the term.
    pub fn set(&self, term: Option<Term>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = term;
    }

    /// The current term.
    pub fn get(&self) -> Option<Term> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
