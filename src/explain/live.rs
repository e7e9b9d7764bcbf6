//! The `World` of a running controller (or of the CLI's own view): the cluster view's nodes and
//! pods, and the cluster as a provisioning pass would simulate it now (`Provisioning::snapshot`:
//! the same snapshot consolidation decides on). Read-only.

use super::{Explanation, Question, World};
use crate::controllers::term::Term;
use crate::cpu;
use crate::telemetry;

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

/// `Term` answers `Question`s from its live cluster view.
impl Term {
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
