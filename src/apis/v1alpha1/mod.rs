//! karpenter.k8s.aws/v1alpha1: the AWSNodeTemplate kind and the AWS settings it shares with a
//! Provisioner's inline `spec.provider`. No I/O here.

mod aws_node_template;
pub mod defaults;
pub mod validation;

pub use aws_node_template::*;
