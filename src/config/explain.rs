//! `karpenter-rs explain`'s flags: what to explain, the output, the controller to ask, and `run`'s
//! settings for a view of its own (`explain::cli` runs it).

use clap::{Args, Subcommand};

use std::sync::Arc;

use crate::explain::cli::{Request, RunSettings, Settings};
use crate::explain::render::Format;
use crate::explain::Question;
use crate::settings::GlobalSettings;

/// `karpenter-rs explain`.
#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// What to explain.
    #[command(subcommand)]
    pub what: What,
    /// Output: a table (text), json or yaml.
    #[arg(short = 'o', long = "output", env = "EXPLAIN_OUTPUT", value_enum, default_value = "text", global = true)]
    pub output: Format,
    /// The running controller's metrics address (`http://HOST:PORT`, e.g. through
    /// `kubectl port-forward`), asked first; when it does not answer (or does not lead), explain
    /// builds its own view of the cluster.
    #[arg(long, env = "EXPLAIN_CONTROLLER", global = true)]
    pub controller: Option<String>,
    /// `run`'s settings, for a view of explain's own: the same flags and variables.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// The object explained.
#[derive(Subcommand, Debug, Clone)]
pub enum What {
    /// Why a pod is pending, or why it runs on its node's type.
    Pod {
        /// `NAMESPACE/NAME` (or `NAME` in `default`).
        target: String,
    },
    /// Which deprovisioning methods apply to a node and why it stays; what removing it would do.
    Node {
        /// The node's name.
        name: String,
    },
}

impl What {
    /// The question, or why `target` is not one.
    pub fn question(&self) -> Result<Question, String> {
        match self {
            What::Node { name } if name.is_empty() => Err("node: a name is needed".to_string()),
            What::Node { name } => Ok(Question::Node(name.clone())),
            What::Pod { target } => {
                let (namespace, name) = target.split_once('/').unwrap_or(("default", target.as_str()));
                if namespace.is_empty() || name.is_empty() || name.contains('/') {
                    return Err(format!("pod: {target:?} is not NAMESPACE/NAME"));
                }
                Ok(Question::Pod {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            }
        }
    }
}

impl ExplainArgs {
    /// The request `explain::cli::run` answers, or why the target is not one.
    pub fn request(&self) -> Result<Request, String> {
        Ok(Request {
            question: self.what.question()?,
            output: self.output,
            controller: self.controller.clone(),
            settings: Arc::new(self.run.clone()),
        })
    }
}

impl RunSettings for super::RunArgs {
    fn system_namespace(&self) -> String {
        self.system_namespace.clone()
    }

    /// `run`'s settings with the ConfigMap's under the explicit flags, as `run` applies them. The
    /// notes `apply_settings` returns (an `aws.clusterName` the flag overrides) are `run`'s to
    /// log; the answer does not depend on them.
    fn resolve(&self, global: &GlobalSettings) -> Settings {
        let mut run = self.clone();
        let _notes = run.apply_settings(global);
        Settings {
            cloud: run.cloud(),
            provisioning: run.provisioning(),
            deprovisioning: run.deprovisioning(),
        }
    }
}

/// `run`'s settings from their environment variables alone (for `nodes`, which has no `run`
/// flags), or why they are incomplete.
pub fn settings_from_env() -> Result<Arc<dyn RunSettings>, String> {
    #[derive(clap::Parser)]
    #[command(name = "run")]
    struct FromEnv {
        #[command(flatten)]
        run: super::RunArgs,
    }
    let parsed = <FromEnv as clap::Parser>::try_parse_from(["run"]).map_err(|e| {
        // clap's message without its usage lines, on one line.
        let text = e.to_string();
        let message: Vec<&str> = text
            .lines()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        format!(
            "run's settings from the environment: {}",
            message.join(" ").trim_start_matches("error: ")
        )
    })?;
    Ok(Arc::new(parsed.run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_named_namespace_slash_name_or_by_name_in_default() {
        let pod = |target: &str| What::Pod { target: target.into() }.question();
        let question = |namespace: &str, name: &str| Question::Pod {
            namespace: namespace.into(),
            name: name.into(),
        };
        assert_eq!(pod("web/nginx-1"), Ok(question("web", "nginx-1")));
        assert_eq!(pod("nginx-1"), Ok(question("default", "nginx-1")));
        for bad in ["/x", "web/", "a/b/c"] {
            assert_eq!(pod(bad), Err(format!("pod: {bad:?} is not NAMESPACE/NAME")));
        }
        assert_eq!(What::Node { name: String::new() }.question(), Err("node: a name is needed".to_string()));
    }
}
