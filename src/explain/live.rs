//! The `World` of a running controller (or of the CLI's own view): the cluster view's nodes and
//! pods, and the cluster as a provisioning pass would simulate it now (`Provisioning::snapshot`:
//! the same snapshot consolidation decides on). Read-only.

use std::sync::{Arc, RwLock};

use super::{Explanation, Question, World};
use crate::controllers::provisioning::Provisioning;
use crate::controllers::state::Cluster;
use crate::cpu;
use crate::telemetry;

/// What answers `Question`s from a live cluster view.
#[derive(Clone)]
pub struct Explainer {
    /// The cluster view.
    pub state: Arc<Cluster>,
    /// Provisioning, for its snapshot.
    pub provisioning: Arc<dyn Provisioning>,
    /// Deprovisioning's nomination period.
    pub nomination: std::time::Duration,
    /// Whether drift is on.
    pub drift_enabled: bool,
    /// Whether this replica leads: only the leader's view and snapshot are the decisions'.
    pub leading: tokio::sync::watch::Receiver<bool>,
}

/// Why there is no answer.
#[derive(Debug, thiserror::Error)]
pub enum NoAnswer {
    /// This replica does not lead (or no controllers run): ask the leader.
    #[error("this replica does not lead; the leader answers")]
    NotLeading,
    /// No such node or pod.
    #[error("{0}")]
    NotFound(String),
    /// The cluster view or the snapshot could not be read.
    #[error("{0}")]
    Unavailable(String),
}

impl Explainer {
    /// The answer to `question` now, or why there is none.
    pub async fn answer(&self, question: &Question) -> Result<Explanation, NoAnswer> {
        if !*self.leading.borrow() {
            return Err(NoAnswer::NotLeading);
        }
        self.state.ready().await.map_err(|e| NoAnswer::Unavailable(e.to_string()))?;
        let snapshot = self
            .provisioning
            .snapshot()
            .await
            .map_err(|e| NoAnswer::Unavailable(telemetry::chain(&e)))?;
        let nodes = self.state.nodes_view();
        let pods = self.state.pods.state();
        let provisioners = self.state.provisioners.state();
        let pdbs: Vec<_> = self.state.pdbs.state().iter().map(|b| (**b).clone()).collect();
        let nomination = jiff::SignedDuration::try_from(self.nomination).unwrap_or_default();
        let (drift_enabled, question) = (self.drift_enabled, question.clone());
        // The simulation is CPU work: on the blocking pool, as consolidation's.
        cpu::run(move |_| {
            let prepare = |pod: &k8s_openapi::api::core::v1::Pod| snapshot.prepare(pod);
            let world = World {
                nodes: &nodes,
                provisioners: &provisioners,
                pods: &pods,
                pdbs: &pdbs,
                input: &snapshot.input,
                unavailable: &snapshot.unavailable,
                prepare: &prepare,
                nomination,
                drift_enabled,
                now: jiff::Timestamp::now(),
            };
            question.answer(&world)
        })
        .await
        .map_err(NoAnswer::NotFound)
    }
}

/// The explainer of the current term, if this replica leads: the metrics port's `/explain`
/// answers from it, and says so when there is none.
#[derive(Clone, Default)]
pub struct ExplainSlot(Arc<RwLock<Option<Explainer>>>);

impl ExplainSlot {
    /// Sets (a term starts) or clears (it ends) the explainer.
    pub fn set(&self, explainer: Option<Explainer>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = explainer;
    }

    /// The current explainer.
    pub fn get(&self) -> Option<Explainer> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
