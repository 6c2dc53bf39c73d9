//! `baton manifests`: Kubernetes resources for a Baton deployment, from
//! spec files.
//!
//! Per agent type: a ConfigMap with the spec (and the files its exec
//! command names), a Deployment of `baton worker --spec` with probes on the
//! metrics port, and a KEDA `ScaledObject` with the `nats-jetstream` scaler
//! on the type's consumer (`BATON_TASKS` / `agent-<type>`), whose lag
//! threshold is the spec's concurrency. Then the router, two registry
//! replicas, the namespace and a kustomization.

use std::collections::BTreeMap;
use std::path::Path;

use baton_agents::{AgentSpec, Kind};
use baton_proto::{AgentName, Subjects};
use serde_json::{Value, json};

use crate::{Error, ErrorKind};

/// What the manifests are made for.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    /// The agent types' spec files.
    pub specs: Vec<std::path::PathBuf>,
    /// The container image; the published one when `None`.
    pub image: Option<String>,
    /// The Kubernetes namespace.
    pub namespace: String,
    /// The NATS URL the pods use.
    pub pod_nats_url: String,
    /// The NATS monitoring endpoint KEDA reads consumer lag from.
    pub nats_monitoring: String,
    /// The NATS account of the streams, for KEDA.
    pub nats_account: String,
    /// Replicas of the streams the pods create.
    pub stream_replicas: u8,
    /// The fewest pods KEDA keeps per agent type.
    pub min_pods: u32,
    /// The most pods KEDA starts per agent type.
    pub max_pods: u32,
    /// The router's `--default-agent`.
    pub default_agent: Option<AgentName>,
    /// The router's `--fallback`.
    pub fallback: Option<AgentName>,
}

/// Where every pod serves metrics and probes.
const METRICS_PORT: u16 = 9464;
/// How long a worker finishes its in-flight work on SIGTERM, in seconds.
const SHUTDOWN_GRACE_SECS: u64 = 20;
/// Where a pod finds its agent type's files.
const SPEC_DIR: &str = "/etc/baton/agent";

/// The files, by name, each with its documents.
///
/// # Errors
///
/// Bad options, or a spec file that cannot be read or has problems.
pub fn generate(
    args: &ManifestOptions,
    subjects: &Subjects,
) -> Result<BTreeMap<String, Vec<Value>>, Error> {
    if args.min_pods > args.max_pods {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "--min-pods {} is above --max-pods {}",
                args.min_pods, args.max_pods
            ),
        ));
    }
    let mut files = BTreeMap::new();
    let mut names = BTreeMap::new();
    for path in &args.specs {
        let spec = baton_agents::load(path).map_err(|errors| {
            Error::new(
                ErrorKind::Spec,
                format!(
                    "{} has problems (`baton check {}` lists them):\n{errors}",
                    path.display(),
                    path.display()
                ),
            )
        })?;
        let name = resource_name(spec.name.as_str());
        if let Some(other) = names.insert(name.clone(), path.clone()) {
            return Err(Error::new(
                ErrorKind::Spec,
                format!(
                    "{} and {} both become {name} in Kubernetes (names there use - for _): rename one agent type",
                    other.display(),
                    path.display()
                ),
            ));
        }
        files.insert(
            format!("agent-{}.yaml", &name["baton-".len()..]),
            agent(args, subjects, &spec, &name)?,
        );
    }
    files.insert("router.yaml".to_owned(), vec![router(args)]);
    files.insert("registry.yaml".to_owned(), vec![registry(args)]);
    files.insert(
        "namespace.yaml".to_owned(),
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args.namespace}}),
        ],
    );
    let resources: Vec<&String> = files.keys().collect();
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": args.namespace,
        "resources": resources,
    });
    files.insert("kustomization.yaml".to_owned(), vec![kustomization]);
    Ok(files)
}

/// `baton-<agent>`, as Kubernetes names must be: lower case, `-` for `_`.
fn resource_name(agent: &str) -> String {
    format!("baton-{}", agent.to_ascii_lowercase().replace('_', "-"))
}

/// `documents` as one YAML file.
///
/// # Errors
///
/// A document YAML cannot hold.
pub fn yaml(documents: &[Value]) -> Result<String, Error> {
    let mut text = String::new();
    for document in documents {
        text.push_str("---\n");
        let document = serde_yaml_ng::to_string(document)
            .map_err(|err| Error::new(ErrorKind::Spec, format!("cannot write YAML: {err}")))?;
        text.push_str(&document);
    }
    Ok(text)
}

/// The ConfigMap, Deployment and ScaledObject of one agent type.
fn agent(
    args: &ManifestOptions,
    subjects: &Subjects,
    spec: &AgentSpec,
    name: &str,
) -> Result<Vec<Value>, Error> {
    let agent = spec.name.as_str();
    let (file_name, data) = files(spec)?;
    let labels = labels("worker", Some(agent));
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    });
    let mut env = vec![];
    if let Kind::Llm(llm) = &spec.kind {
        if let Some(key) = &llm.api_key_env {
            env.push(json!({
                "name": key,
                "valueFrom": {"secretKeyRef": {"name": "baton-llm", "key": key}},
            }));
        }
    }
    let spec_path = format!("{SPEC_DIR}/{file_name}");
    let command = [
        "worker",
        "--spec",
        &spec_path,
        "--shutdown-grace-secs",
        &SHUTDOWN_GRACE_SECS.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut pod = pod(args, command, env);
    pod["volumes"] = json!([
        {"name": "agent", "configMap": {"name": name}},
        {"name": "tmp", "emptyDir": {}},
    ]);
    pod["containers"][0]["volumeMounts"] = json!([
        {"name": "agent", "mountPath": SPEC_DIR, "readOnly": true},
        {"name": "tmp", "mountPath": "/tmp"},
    ]);
    let deployment = deployment(name, &labels, 1, pod);
    let scaled = json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": args.min_pods,
            "maxReplicaCount": args.max_pods,
            "triggers": [{
                "type": "nats-jetstream",
                "metadata": {
                    "natsServerMonitoringEndpoint": args.nats_monitoring,
                    "account": args.nats_account,
                    "stream": subjects.tasks_stream(),
                    "consumer": Subjects::agent_consumer(&spec.name),
                    // One pod per `concurrency` waiting or running tasks.
                    "lagThreshold": spec.concurrency.to_string(),
                    "activationLagThreshold": "0",
                },
            }],
        },
    });
    Ok(vec![config_map, deployment, scaled])
}

/// The name of `spec`'s file, and the files its ConfigMap holds: the spec,
/// and the files its exec command names beside it (`sh triage.sh`).
fn files(spec: &AgentSpec) -> Result<(String, BTreeMap<String, String>), Error> {
    let file_name = spec
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::new(ErrorKind::Spec, "a spec path names no file".to_owned()))?;
    let mut data = BTreeMap::new();
    data.insert(file_name.clone(), read(&spec.file)?);
    if let Kind::Exec(exec) = &spec.kind {
        for part in exec.command.iter().skip(1).chain(exec.command.first()) {
            let beside = spec.dir().join(part);
            if !part.contains('/') && beside.is_file() {
                data.insert(part.clone(), read(&beside)?);
            }
        }
    }
    Ok((file_name, data))
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|err| {
        Error::new(
            ErrorKind::Spec,
            format!("cannot read {}: {err}", path.display()),
        )
    })
}

fn router(args: &ManifestOptions) -> Value {
    let mut command = vec!["router".to_owned()];
    if let Some(agent) = &args.default_agent {
        command.extend(["--default-agent".to_owned(), agent.to_string()]);
    }
    if let Some(agent) = &args.fallback {
        command.extend(["--fallback".to_owned(), agent.to_string()]);
    }
    deployment(
        "baton-router",
        &labels("router", None),
        1,
        pod(args, command, vec![]),
    )
}

fn registry(args: &ManifestOptions) -> Value {
    let command = vec!["registry".to_owned()];
    deployment(
        "baton-registry",
        &labels("registry", None),
        2,
        pod(args, command, vec![]),
    )
}

fn labels(component: &str, agent: Option<&str>) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/name": "baton",
        "app.kubernetes.io/component": component,
    });
    if let Some(agent) = agent {
        labels["baton/agent"] = json!(resource_name(agent)["baton-".len()..]);
    }
    labels
}

fn deployment(name: &str, labels: &Value, replicas: u32, pod: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": METRICS_PORT.to_string(),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod,
            },
        },
    })
}

/// A pod running `baton ARGS`: non-root, read-only root filesystem, the
/// NATS settings from the environment (credentials from the optional
/// Secret `baton-nats`), metrics and probes on `METRICS_PORT`.
fn pod(args: &ManifestOptions, command: Vec<String>, extra_env: Vec<Value>) -> Value {
    let image = args
        .image
        .clone()
        .unwrap_or_else(|| format!("baton:{}", env!("CARGO_PKG_VERSION")));
    let mut env = vec![
        json!({"name": "NATS_URL", "value": args.pod_nats_url}),
        json!({"name": "BATON_REPLICAS", "value": args.stream_replicas.to_string()}),
        json!({"name": "BATON_METRICS_ADDR", "value": format!("0.0.0.0:{METRICS_PORT}")}),
        json!({"name": "OTEL_SERVICE_NAME", "value": format!("baton-{}", command[0])}),
    ];
    env.extend(extra_env);
    let probe = |path: &str, period: u32| json!({"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period, "failureThreshold": 3});
    json!({
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": SHUTDOWN_GRACE_SECS + 10,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "baton",
            "image": image,
            "args": command,
            "env": env,
            "envFrom": [{"secretRef": {"name": "baton-nats", "optional": true}}],
            "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
            "livenessProbe": probe("/healthz", 10),
            "readinessProbe": probe("/readyz", 5),
            "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"memory": "512Mi"},
            },
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dir: &Path) -> ManifestOptions {
        ManifestOptions {
            specs: vec![dir.join("triage.toml")],
            image: None,
            namespace: "support".to_owned(),
            pod_nats_url: "nats://nats:4222".to_owned(),
            nats_monitoring: "nats:8222".to_owned(),
            nats_account: "$G".to_owned(),
            stream_replicas: 3,
            min_pods: 1,
            max_pods: 4,
            default_agent: None,
            fallback: None,
        }
    }

    fn spec_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("triage.toml"),
            "name = \"triage_desk\"\nkind = \"exec\"\nconcurrency = 8\n\n[exec]\ncommand = [\"sh\", \"triage.sh\"]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("triage.sh"), "echo hi\n").unwrap();
        dir
    }

    #[test]
    fn an_agent_type_gets_its_files_a_deployment_and_a_scaler_on_its_consumer() {
        let dir = spec_dir();
        let subjects = Subjects::default();
        let files = generate(&options(dir.path()), &subjects).unwrap();
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "agent-triage-desk.yaml",
                "kustomization.yaml",
                "namespace.yaml",
                "registry.yaml",
                "router.yaml"
            ]
        );
        let agent = &files["agent-triage-desk.yaml"];
        assert_eq!(agent[0]["kind"], "ConfigMap");
        assert_eq!(
            agent[0]["data"]["triage.sh"], "echo hi\n",
            "the script beside the spec"
        );
        let trigger = &agent[2]["spec"]["triggers"][0]["metadata"];
        assert_eq!(trigger["consumer"], "agent-triage_desk");
        assert_eq!(trigger["lagThreshold"], "8", "one pod per concurrency");
        assert_eq!(agent[2]["spec"]["maxReplicaCount"], 4);
        let text = yaml(agent).unwrap();
        assert_eq!(text.matches("---\n").count(), 3, "{text}");
    }

    #[test]
    fn bad_options_and_clashing_names_are_errors_that_say_what_to_change() {
        let dir = spec_dir();
        let mut bad = options(dir.path());
        bad.min_pods = 5;
        let err = generate(&bad, &Subjects::default())
            .unwrap_err()
            .to_string();
        assert_eq!(err, "--min-pods 5 is above --max-pods 4");
        let other = dir.path().join("other.toml");
        std::fs::write(
            &other,
            "name = \"triage-desk\"\nkind = \"exec\"\n\n[exec]\ncommand = [\"true\"]\n",
        )
        .unwrap();
        let mut clash = options(dir.path());
        clash.specs.push(other);
        let err = generate(&clash, &Subjects::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("both become baton-triage-desk") && err.contains("rename one"),
            "{err}"
        );
    }
}
