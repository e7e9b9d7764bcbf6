//! karpenter.sh/v1alpha5: the Provisioner kind, its label rules, defaults and validation.
//! No I/O here.

pub mod defaults;
pub mod labels;
mod provisioner;
pub mod requirements;
pub mod validation;

pub use provisioner::*;
