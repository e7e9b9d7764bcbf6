//! karpenter-rs: a node autoscaler for Kubernetes on AWS, serving Karpenter's
//! karpenter.sh/v1alpha5 Provisioner and karpenter.k8s.aws/v1alpha1 AWSNodeTemplate APIs.
#![forbid(unsafe_code)]

pub mod apis;
pub mod certs;
pub mod coexistence;
pub mod cpu;
pub mod cloudprovider;
pub mod config;
pub mod controllers;
pub mod convert;
pub mod crds;
pub mod explain;
pub mod failpoint;
#[cfg(test)]
mod hostile_values;
pub mod kube_client;
pub mod metrics;
pub mod probes;
pub mod ratelimit;
pub mod retry;
pub mod scheduling;
pub mod settings;
pub mod simulate;
pub mod telemetry;
pub mod viewer;
pub mod webhook;
