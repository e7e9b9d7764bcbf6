//! `karpenter_pods_state`, written from the cluster view at scrape time.

use std::sync::Arc;

use super::scrape::TextGauge;
use super::POD_STATE_LABELS;

/// Label values of one pod's `karpenter_pods_state` series, in `POD_STATE_LABELS` order.
pub type PodStateLabels<'a> = [std::borrow::Cow<'a, str>; 10];

/// Hands each pod's label values to the sink it is given.
type PodStateSource = Box<dyn Fn(&mut dyn FnMut(&PodStateLabels<'_>)) + Send + Sync>;

/// `karpenter_pods_state`, written straight from the cluster view at scrape time, a line per pod.
/// Kept as a gauge family it held a series per pod (a copy of the metric's description, ten label
/// pairs and the label values: 3 to 4 KiB a pod, more than the pod in the cache), refreshed every
/// 10 s; written at scrape time it holds nothing and is never stale.
#[derive(Clone, Default)]
pub struct PodStates {
    source: Arc<std::sync::OnceLock<PodStateSource>>,
}

impl PodStates {
    pub(super) const NAME: &'static str = "karpenter_pods_state";
    pub(super) const HELP: &'static str = "Pods by where they run and their phase; the value is 1.";

    /// Sets where the pods come from (the provisioning controller, which knows the cluster view
    /// and whether this replica leads). Only the first call counts.
    pub fn set_source(&self, source: impl Fn(&mut dyn FnMut(&PodStateLabels<'_>)) + Send + Sync + 'static) {
        let _ = self.source.set(Box::new(source));
    }

    /// Appends the family in the text format (nothing without pods).
    pub fn render(&self, out: &mut String) {
        let Some(source) = self.source.get() else { return };
        let mut family = TextGauge::new(out, Self::NAME, Self::HELP, &POD_STATE_LABELS);
        source(&mut |values| family.sample(&values.each_ref().map(|v| v.as_ref()), 1.0));
    }
}
