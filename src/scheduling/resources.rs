//! Resource amounts the simulation adds and compares: what a pod requests (containers, init
//! containers, overhead), what a node or instance type can hold, what a Provisioner's limits
//! leave. Amounts are integers (millicores, bytes, counts), so sums are exact and plans are the
//! same on every run. No I/O here.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::apis::quantity::parse_quantity;

/// `cpu`, counted in millicores.
pub const CPU: &str = "cpu";
/// `memory`, counted in bytes.
pub const MEMORY: &str = "memory";
/// `pods`: how many pods a node takes; every pod requests one.
pub const PODS: &str = "pods";
/// `ephemeral-storage`, counted in bytes.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// NVIDIA GPUs.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const AMD_GPU: &str = "amd.com/gpu";
/// AWS Inferentia/Trainium devices.
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
/// Branch network interfaces for pods with their own security groups.
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
/// Habana Gaudi accelerators.
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";

/// An amount of every resource. CPU is in millicores, memory and ephemeral storage in bytes,
/// everything else in its base unit rounded up. An absent resource is zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in millicores (`1500m` = 1500).
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
    /// Number of pods.
    pub pods: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: i64,
    /// Every other resource (`nvidia.com/gpu`, `hugepages-2Mi`, ...) by name, never zero-valued.
    pub extended: BTreeMap<String, i64>,
}

impl Resources {
    /// Nothing at all.
    pub fn zero() -> Self {
        Resources::default()
    }

    /// The amount of the named resource (zero when absent).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_millis,
            MEMORY => self.memory_bytes,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_storage_bytes,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets the named resource; setting an extended resource to zero removes it.
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.cpu_millis = amount,
            MEMORY => self.memory_bytes = amount,
            PODS => self.pods = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage_bytes = amount,
            other if amount == 0 => {
                self.extended.remove(other);
            }
            other => {
                self.extended.insert(other.to_string(), amount);
            }
        }
    }

    /// Builder form of `set`.
    pub fn with(mut self, name: &str, amount: i64) -> Self {
        self.set(name, amount);
        self
    }

    /// Every resource with a non-zero amount, in a fixed order (cpu, memory, pods,
    /// ephemeral-storage, then extended resources by name).
    pub fn entries(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        [
            (CPU, self.cpu_millis),
            (MEMORY, self.memory_bytes),
            (PODS, self.pods),
            (EPHEMERAL_STORAGE, self.ephemeral_storage_bytes),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(k, v)| (k.as_str(), *v)))
        .filter(|(_, v)| *v != 0)
    }

    /// True when every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.entries().next().is_none()
    }

    /// Adds `other` to `self`. Sums saturate at `i64::MAX` (a pod requesting `8Ei` of memory,
    /// which the API server admits, then fits nowhere instead of wrapping to a negative request
    /// that fits everywhere).
    pub fn add(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
        self.pods = self.pods.saturating_add(other.pods);
        self.ephemeral_storage_bytes = self.ephemeral_storage_bytes.saturating_add(other.ephemeral_storage_bytes);
        for (k, v) in &other.extended {
            let sum = self.get(k).saturating_add(*v);
            self.set(k, sum);
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut sum = self.clone();
        sum.add(other);
        sum
    }

    /// `self - other`; amounts may go negative, and saturate at the ends of `i64`.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.cpu_millis = out.cpu_millis.saturating_sub(other.cpu_millis);
        out.memory_bytes = out.memory_bytes.saturating_sub(other.memory_bytes);
        out.pods = out.pods.saturating_sub(other.pods);
        out.ephemeral_storage_bytes = out.ephemeral_storage_bytes.saturating_sub(other.ephemeral_storage_bytes);
        for (k, v) in &other.extended {
            let diff = out.get(k).saturating_sub(*v);
            out.set(k, diff);
        }
        out
    }

    /// Every negative amount raised to zero.
    pub fn clamp_non_negative(mut self) -> Resources {
        self.cpu_millis = self.cpu_millis.max(0);
        self.memory_bytes = self.memory_bytes.max(0);
        self.pods = self.pods.max(0);
        self.ephemeral_storage_bytes = self.ephemeral_storage_bytes.max(0);
        self.extended.retain(|_, v| *v > 0);
        self
    }

    /// The larger amount of each resource.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut out = Resources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            pods: self.pods.max(other.pods),
            ephemeral_storage_bytes: self.ephemeral_storage_bytes.max(other.ephemeral_storage_bytes),
            extended: self.extended.clone(),
        };
        for (k, v) in &other.extended {
            let m = out.get(k).max(*v);
            out.set(k, m);
        }
        out
    }

    /// True when every requested amount is at most what `available` holds (a resource absent from
    /// `available` holds nothing, so any positive request of it does not fit).
    pub fn fits(&self, available: &Resources) -> bool {
        self.cpu_millis <= available.cpu_millis
            && self.memory_bytes <= available.memory_bytes
            && self.pods <= available.pods
            && self.ephemeral_storage_bytes <= available.ephemeral_storage_bytes
            && self.extended.iter().all(|(k, v)| *v <= available.get(k))
    }

    /// How far from fitting in `available`: the largest ratio of a requested amount to what
    /// `available` holds of it (at most 1 when it fits; infinite for a resource it lacks).
    pub fn overshoot(&self, available: &Resources) -> f64 {
        self.entries()
            .map(|(k, v)| match available.get(k) {
                0 => f64::INFINITY,
                held => v as f64 / held as f64,
            })
            .fold(0.0, f64::max)
    }

    /// Every resource that does not fit, as `name (requested X, available Y)`.
    pub fn excesses(&self, available: &Resources) -> Vec<String> {
        self.excess_entries(available).collect()
    }

    /// The first resource that does not fit, as `name (requested X, available Y)`.
    pub fn first_excess(&self, available: &Resources) -> Option<String> {
        self.excess_entries(available).next()
    }

    /// The resources that do not fit in `available`, in `entries` order, each as
    /// `name (requested X, available Y)`.
    fn excess_entries<'a>(&'a self, available: &'a Resources) -> impl Iterator<Item = String> + 'a {
        self.entries().filter(|(k, v)| *v > available.get(k)).map(|(k, v)| {
            format!(
                "{k} (requested {}, available {})",
                format_amount(k, v),
                format_amount(k, available.get(k))
            )
        })
    }

    /// Parses a Kubernetes resource list (`{cpu: 500m, memory: 1Gi}`). Unparsable quantities are
    /// reported with their resource name.
    pub fn from_quantities(list: &BTreeMap<String, Quantity>) -> Result<Resources, String> {
        let mut out = Resources::zero();
        for (name, q) in list {
            let value = parse_quantity(&q.0).ok_or_else(|| format!("{name}: {:?} is not a quantity", q.0))?;
            out.set(name, to_units(name, value));
        }
        Ok(out)
    }

    /// The resource list Kubernetes objects use (`{cpu: 1500m, memory: 2Gi}`), zero amounts left out.
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.entries()
            .map(|(k, v)| (k.to_string(), Quantity(format_amount(k, v))))
            .collect()
    }
}

impl fmt::Display for Resources {
    /// `cpu=1500m, memory=2Gi, pods=3`; `{}` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.entries() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={}", format_amount(k, v))?;
        }
        if first {
            f.write_str("{}")?;
        }
        Ok(())
    }
}

/// A quantity's value in the integer unit `Resources` keeps for `name`: millicores for cpu,
/// otherwise the base unit. Values a float rounding error away from an integer are rounded; other
/// fractions round up (a request never shrinks).
pub fn to_units(name: &str, value: f64) -> i64 {
    let scaled = if name == CPU { value * 1000.0 } else { value };
    let nearest = scaled.round();
    if (scaled - nearest).abs() <= 1e-6 * nearest.abs().max(1.0) {
        nearest as i64
    } else {
        scaled.ceil() as i64
    }
}

/// An amount as a Kubernetes quantity: `1500m`/`2` for cpu, `2Gi`/`1536Mi`/`123` for byte
/// resources, the plain number otherwise.
pub fn format_amount(name: &str, amount: i64) -> String {
    if name == CPU {
        return if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    if name == MEMORY || name == EPHEMERAL_STORAGE || name.starts_with("hugepages-") {
        for (suffix, unit) in [("Ti", 1i64 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if amount != 0 && amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

/// What one container asks for: its requests, with limits standing in for requests it leaves out.
fn container_requests(c: &Container) -> Resources {
    let Some(r) = c.resources.as_ref() else {
        return Resources::zero();
    };
    let mut list = r.limits.clone().unwrap_or_default();
    list.extend(r.requests.clone().unwrap_or_default());
    resource_list_lenient(&list)
}

/// A resource list whose unparsable entries count as zero (the API server already rejected
/// malformed quantities, so this only guards against hand-made objects).
pub fn resource_list_lenient(list: &BTreeMap<String, Quantity>) -> Resources {
    let mut out = Resources::zero();
    for (name, q) in list {
        if let Some(v) = parse_quantity(&q.0) {
            out.set(name, to_units(name, v));
        }
    }
    out
}

/// What a pod needs from a node, as the kubelet and kube-scheduler count it
/// (`k8s.io/component-helpers/resource` `PodRequests`): the containers plus the native sidecars
/// (init containers with `restartPolicy: Always`, which keep running beside them), or, when
/// larger per resource, an init container's start (a regular one together with the sidecars
/// started before it; a sidecar together with itself and those before it); plus `spec.overhead`,
/// plus one `pods`.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = pod_total(pod, container_requests);
    total.pods = total.pods.saturating_add(1);
    total
}

/// A pod's limits, added up as `pod_requests` adds requests (without the one `pods`); a container
/// without a limit of a resource adds none of it.
pub fn pod_limits(pod: &Pod) -> Resources {
    pod_total(pod, |c| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .map(resource_list_lenient)
            .unwrap_or_default()
    })
}

/// `per_container` of the containers and native sidecars, or of an init container's start where
/// larger per resource, plus `spec.overhead`.
fn pod_total(pod: &Pod, per_container: impl Fn(&Container) -> Resources) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::zero();
    };
    let mut total = Resources::zero();
    for c in &spec.containers {
        total.add(&per_container(c));
    }
    let mut sidecars = Resources::zero();
    let mut init_peak = Resources::zero();
    for c in spec.init_containers.iter().flatten() {
        let own = per_container(c);
        let starting = if c.restart_policy.as_deref() == Some(SIDECAR_RESTART_POLICY) {
            total.add(&own);
            sidecars.add(&own);
            sidecars.clone()
        } else {
            own.plus(&sidecars)
        };
        init_peak = init_peak.max(&starting);
    }
    total = total.max(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&resource_list_lenient(overhead));
    }
    total
}

/// The init-container `restartPolicy` that makes it a native sidecar: started in order with the
/// init containers, then running for the pod's lifetime.
const SIDECAR_RESTART_POLICY: &str = "Always";

#[cfg(test)]
mod tests;
