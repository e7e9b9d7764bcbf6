//! Kubernetes keys karpenter-rs reads or writes that are not `karpenter.sh` concepts: the taints
//! the node lifecycle and `kubectl cordon` put on nodes, annotations of the kubelet, kubectl and
//! the ReplicaSet controller, the recommended app label, and the EBS CSI driver's zone key.
//! The `karpenter.sh` and `karpenter.k8s.aws` keys live in `v1alpha5::labels`. No I/O here.

/// `node.kubernetes.io/not-ready`, present on a node until its kubelet reports Ready.
pub const NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`, present while the node controller cannot reach the kubelet.
pub const UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
/// `node.kubernetes.io/unschedulable`, the taint a cordoned node carries.
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// `node.cloudprovider.kubernetes.io/uninitialized`, present until the cloud controller manager
/// has initialised the node.
pub const UNINITIALIZED_TAINT_KEY: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The kubelet's annotation on the API mirror of a static pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// kubectl's record of the last applied object (`kubectl apply`), often as large as the object.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The ReplicaSet controller's hint of which pods to remove first (lower cost goes first).
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The recommended label naming the application an object belongs to.
pub const APP_NAME_LABEL: &str = "app.kubernetes.io/name";

/// The AWS EBS CSI driver's zone key, which means the same as `topology.kubernetes.io/zone`.
pub const EBS_CSI_ZONE_LABEL: &str = "topology.ebs.csi.aws.com/zone";
