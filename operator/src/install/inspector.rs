//! The image inspector: the only operand that reads Secrets (the pods' pull secrets).

use std::path::Path;

use multiarch_flags::{
    FlagsError, InspectorArgs, InspectorCallerFlags, InspectorServiceArgs, InspectorTlsArgs,
    defaults,
};
use serde_json::{Value, json};

use super::{
    INSPECTOR, Settings, rbac_pair, service_account,
    workload::{
        OPS_PORT, Workload, all_interfaces, deployment, disruption_budget, downward_env,
        network_policy, open_port, push, role_args, service,
    },
};

/// The gRPC port the scheduler, the webhook, the gate controller and the handler call.
pub const INSPECTOR_PORT: u16 = 9443;
/// The inspector's serving certificate (`tls.crt`, `tls.key`) and the CAs its clients'
/// certificates must chain to (`ca.crt`).
pub const INSPECTOR_TLS_SECRET: &str = "multiarch-inspector-tls";
/// The client certificate of the roles that call the inspector, and the CAs of its
/// serving certificate: only pods that mount it are answered.
pub const INSPECTOR_CLIENT_SECRET: &str = "multiarch-inspector-client";
/// Where the inspector's pods see [`INSPECTOR_TLS_SECRET`].
const SERVING_DIR: &str = "/etc/multiarch/inspector-tls";
/// Where its clients' pods see [`INSPECTOR_CLIENT_SECRET`].
pub const CLIENT_DIR: &str = "/etc/multiarch/inspector-client";
/// The ConfigMap (in multiarch's namespace) an admin creates for the inspector's registry
/// settings (key [`REGISTRIES_KEY`]: CA bundles, plain-HTTP registries, mirrors, blocked);
/// optional, followed live.
pub const REGISTRIES_CONFIG_MAP: &str = "multiarch-registries";
pub const REGISTRIES_KEY: &str = "registries.yaml";
/// Where the inspector's pods see it (a CA file it names lives there too).
pub const REGISTRIES_DIR: &str = "/etc/multiarch/registries";

/// What the inspector calls: the pull secrets a pod names, read one by one (`get` only:
/// a `list` or `watch` grant would read every Secret's data in the cluster); service
/// accounts read and watched (metadata only), which drops a cached keyring when one
/// changes.
pub fn inspector_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch"]},
    ])
}

/// Its ServiceAccount and cluster-wide read access.
pub fn inspector_access(settings: &Settings) -> Vec<Value> {
    let mut objects = vec![service_account(settings, INSPECTOR)];
    objects.extend(rbac_pair(
        settings,
        INSPECTOR,
        "ClusterRole",
        INSPECTOR,
        inspector_rules(),
    ));
    objects
}

/// Its Deployment, Service, disruption budget and network policy: only multiarch's own
/// pods reach the gRPC port. `read_binaries`: the `binaryInspection` plugin is on (a
/// change rolls the inspector's pods, the disruption budget keeping one serving).
pub fn inspector_workload(
    settings: &Settings,
    read_binaries: bool,
) -> Result<Vec<Value>, FlagsError> {
    let component = "inspector";
    let args = role_args(
        defaults::<InspectorArgs>()?,
        &["listen", "metrics_addr"],
        |flags| {
            flags.listen = all_interfaces(INSPECTOR_PORT);
            flags.ops.metrics_addr = all_interfaces(OPS_PORT);
            flags.registries_config = Some(Path::new(REGISTRIES_DIR).join(REGISTRIES_KEY));
            // The ConfigMap is optional: the inspector starts without it and follows it.
            flags.registries_config_optional = true;
            flags.tls_dir = Some(SERVING_DIR.into());
            flags.read_binaries = read_binaries;
        },
    )?;
    let workload = Workload {
        name: INSPECTOR,
        component,
        args,
        ports: json!([{"name": "grpc", "containerPort": INSPECTOR_PORT}, {"name": "metrics", "containerPort": OPS_PORT}]),
        probe_port: "metrics",
        env: json!([]),
    };
    let own_pods = json!({"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "multiarch"}}}],
                          "ports": [{"protocol": "TCP", "port": INSPECTOR_PORT}]});
    let mut inspector = deployment(settings, &workload);
    let pod = &mut inspector["spec"]["template"]["spec"];
    pod["volumes"] = json!([
        {"name": "registries", "configMap": {"name": REGISTRIES_CONFIG_MAP, "optional": true}},
        {"name": "tls", "secret": {"secretName": INSPECTOR_TLS_SECRET}},
    ]);
    pod["containers"][0]["volumeMounts"] = json!([
        {"name": "registries", "mountPath": REGISTRIES_DIR, "readOnly": true},
        {"name": "tls", "mountPath": SERVING_DIR, "readOnly": true},
    ]);
    Ok(vec![
        inspector,
        service(
            settings,
            INSPECTOR,
            component,
            json!([{"name": "grpc", "port": INSPECTOR_PORT, "targetPort": "grpc", "appProtocol": "grpc"}, {"name": "metrics", "port": OPS_PORT, "targetPort": "metrics"}]),
        ),
        disruption_budget(settings, INSPECTOR, component),
        network_policy(
            settings,
            INSPECTOR,
            component,
            json!([own_pods, open_port(OPS_PORT)]),
        ),
    ])
}

/// Where the inspector's clients reach it: its Service, over mutual TLS.
pub fn inspector_endpoint(settings: &Settings) -> String {
    format!(
        "https://{}:{INSPECTOR_PORT}",
        inspector_dns_names(settings)[0]
    )
}

/// The names in the inspector's serving certificate: its Service.
pub fn inspector_dns_names(settings: &Settings) -> Vec<String> {
    super::operator::dns_names(INSPECTOR, &settings.namespace)
}

/// How a role that always calls the inspector reaches it: its Service, with the client
/// certificate [`mount_inspector_client`] mounts.
fn inspector_service(settings: &Settings) -> InspectorServiceArgs {
    InspectorServiceArgs {
        endpoint: inspector_endpoint(settings),
        tls: InspectorTlsArgs {
            inspector_tls_dir: Some(CLIENT_DIR.into()),
        },
    }
}

/// A leader-elected controller that calls the inspector (the gate controller, the
/// ENoExec handler; the container named after its subcommand), named `name`: its
/// Deployment with the inspector's client certificate mounted, its metrics Service,
/// disruption budget and network policy.
pub fn inspector_client_controller<T: InspectorCallerFlags>(
    settings: &Settings,
    name: &str,
) -> Result<Vec<Value>, FlagsError> {
    let component = T::SUBCOMMAND;
    let args = role_args(defaults::<T>()?, &["metrics_addr"], |flags| {
        let (inspector, ops) = flags.inspector_and_ops();
        *inspector = inspector_service(settings);
        ops.metrics_addr = all_interfaces(OPS_PORT);
    })?;
    let workload = Workload {
        name,
        component,
        args,
        ports: json!([{"name": "metrics", "containerPort": OPS_PORT}]),
        probe_port: "metrics",
        env: downward_env(),
    };
    let mut deployment = deployment(settings, &workload);
    mount_inspector_client(&mut deployment);
    Ok(vec![
        deployment,
        service(
            settings,
            name,
            component,
            json!([{"name": "metrics", "port": OPS_PORT, "targetPort": "metrics"}]),
        ),
        disruption_budget(settings, name, component),
        network_policy(settings, name, component, json!([open_port(OPS_PORT)])),
    ])
}

/// Gives a client's Deployment the certificate it presents to the inspector, mounted
/// where its `--inspector-tls-dir` (see [`CLIENT_DIR`]) reads it.
pub fn mount_inspector_client(deployment: &mut Value) {
    let pod = &mut deployment["spec"]["template"]["spec"];
    push(
        &mut pod["volumes"],
        json!({"name": "inspector-client", "secret": {"secretName": INSPECTOR_CLIENT_SECRET}}),
    );
    push(
        &mut pod["containers"][0]["volumeMounts"],
        json!({"name": "inspector-client", "mountPath": CLIENT_DIR, "readOnly": true}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::labels;

    #[test]
    fn the_registry_settings_come_from_an_optional_config_map() {
        let objects = inspector_workload(&Settings::default(), false).unwrap();
        let pod = &objects[0]["spec"]["template"]["spec"];
        assert_eq!(
            pod["volumes"][0]["configMap"],
            json!({"name": "multiarch-registries", "optional": true})
        );
        let container = &pod["containers"][0];
        assert_eq!(
            container["volumeMounts"][0]["mountPath"],
            "/etc/multiarch/registries"
        );
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--registries-config=/etc/multiarch/registries/registries.yaml"));
        assert!(args.contains(&"--registries-config-optional"));
    }

    #[test]
    fn binary_inspection_is_the_inspectors_read_binaries_flag() {
        let args = |read_binaries: bool| {
            inspector_workload(&Settings::default(), read_binaries).unwrap()[0]["spec"]["template"]
                ["spec"]["containers"][0]["args"]
                .clone()
        };
        assert!(
            args(true)
                .as_array()
                .unwrap()
                .contains(&json!("--read-binaries"))
        );
        assert!(
            !args(false)
                .as_array()
                .unwrap()
                .contains(&json!("--read-binaries"))
        );
    }

    #[test]
    fn only_multiarch_pods_reach_the_grpc_port() {
        let objects = inspector_workload(&Settings::default(), false).unwrap();
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .unwrap_or_else(|| panic!("no policy"));
        assert_eq!(
            policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "multiarch"})
        );
        assert_eq!(
            policy["spec"]["podSelector"]["matchLabels"],
            labels("inspector")
        );
    }
}
