//! `tinkctl migrate`: move Tinkerbell v1alpha1 objects to v1alpha2.
//!
//! - Offline (`tinkctl migrate FILE|DIR... [--out FILE]`): every v1alpha1 Hardware, Template and
//!   Workflow of the YAML files is converted with the API's conversion (the webhook's), and
//!   written as v1alpha2 objects. What a per-object conversion cannot do is done here:
//!   per-interface OSIE settings (`netboot.osie.{baseURL,kernel,initrd}`) become OSIE objects
//!   (one per distinct kernel and initrd, shared by the Hardware that use them) referenced by
//!   `spec.osie.osieRef`; multi-task Templates are split into one Template per task
//!   (`<name>-<task>`); Workflows that name their machine only by MAC (`hardwareMap.device_1`)
//!   get the `hardwareRef` of the Hardware with that MAC. A report on stderr says, per object,
//!   what moved, what was kept in the conversion annotation (or dropped, with
//!   `--drop-unmapped`) and every warning. Other documents pass through unchanged.
//! - In-cluster (`tinkctl migrate --in-cluster`): every stored Hardware, Template and Workflow is
//!   read as v1alpha2 and written back once, so the API server stores it in the storage
//!   version; each write adds the annotation [`MIGRATED_ANNOTATION`], so a second run skips what
//!   is done (resumable after an interruption). Then `status.storedVersions` of each CRD is set
//!   to `[v1alpha2]`, so v1alpha1 can later stop being served (seeds/001).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tink_api::conversion::{conversion_data_paths, convert_with_warnings};
use tink_api::{CONVERSION_DATA_ANNOTATION, GROUP, v1alpha1, v1alpha2};

/// Set on every object `--in-cluster` has rewritten in the storage version.
pub const MIGRATED_ANNOTATION: &str = "tinkerbell.org/storage-version";

/// Arguments of `tinkctl migrate`.
#[derive(Args, Debug, Clone)]
pub struct MigrateArgs {
    /// v1alpha1 YAML files, or directories whose `*.yaml`/`*.yml` files are read (offline mode).
    #[arg(env = "TINKCTL_MIGRATE_INPUTS", value_delimiter = ',')]
    pub inputs: Vec<PathBuf>,

    /// Write the v1alpha2 objects to this file (one multi-document YAML) instead of stdout.
    #[arg(long, short, env = "TINKCTL_MIGRATE_OUT")]
    pub out: Option<PathBuf>,

    /// Drop the fields v1alpha2 has no home for, instead of keeping them in the
    /// `tinkerbell.org/conversion-data` annotation (they cannot come back to v1alpha1 then).
    #[arg(long, env = "TINKCTL_MIGRATE_DROP_UNMAPPED")]
    pub drop_unmapped: bool,

    /// Rewrite every stored object of the cluster (kubeconfig from KUBECONFIG or the default
    /// locations) in v1alpha2, then set the CRDs' `status.storedVersions`.
    #[arg(long, env = "TINKCTL_MIGRATE_IN_CLUSTER", conflicts_with_all = ["inputs", "out"])]
    pub in_cluster: bool,
}

/// Runs the command.
pub fn run(args: &MigrateArgs) -> anyhow::Result<()> {
    if args.in_cluster {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        return rt.block_on(async {
            let client = kube::Client::try_default()
                .await
                .context("connecting to the cluster (KUBECONFIG)")?;
            let report = migrate_cluster(&client).await?;
            eprint!("{report}");
            Ok(())
        });
    }
    anyhow::ensure!(
        !args.inputs.is_empty(),
        "give v1alpha1 YAML files or directories to convert, or --in-cluster"
    );
    let docs = read_inputs(&args.inputs)?;
    let migration = migrate_documents(docs, args.drop_unmapped);
    let mut yaml = String::new();
    for obj in &migration.objects {
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml::to_string(obj).context("writing YAML")?);
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{yaml}"),
    }
    for line in &migration.report {
        eprintln!("{line}");
    }
    Ok(())
}

/// Every YAML document of the inputs (directories: their `*.yaml` and `*.yml` files, sorted).
pub fn read_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("reading {}", input.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(input.clone());
        }
    }
    let mut docs = Vec::new();
    for file in files {
        docs.extend(read_file(&file)?);
    }
    Ok(docs)
}

fn read_file(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let v: Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("{}: document {}", path.display(), i + 1))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// The result of an offline migration.
#[derive(Debug, Default)]
pub struct Migration {
    /// The objects to apply, in input order (OSIE objects before the first Hardware using them).
    pub objects: Vec<Value>,
    /// One line per finding, naming the object.
    pub report: Vec<String>,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn id(v: &Value) -> String {
    let ns = str_at(v, "/metadata/namespace");
    let name = str_at(v, "/metadata/name");
    let kind = str_at(v, "/kind");
    if ns.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

/// A DNS-1123 label from free text (`Os Installation` -> `os-installation`).
fn label(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').chars().take(40).collect()
}

/// The OSIE of one interface's v1alpha1 `netboot.osie`: kernel and initrd URLs (Smee's defaults
/// `vmlinuz-<arch>` and `initramfs-<arch>` when only `baseURL` is given).
fn osie_urls(iface: &Value) -> Option<(String, String)> {
    let osie = iface.pointer("/netboot/osie")?;
    let base = str_at(osie, "/baseURL").trim_end_matches('/');
    if base.is_empty() {
        return None;
    }
    let arch = match str_at(iface, "/dhcp/arch") {
        "" => "x86_64",
        a => a,
    };
    let file = |key: &str, default: String| match str_at(osie, key) {
        "" => default,
        f => f.to_string(),
    };
    Some((
        format!("{base}/{}", file("/kernel", format!("vmlinuz-{arch}"))),
        format!("{base}/{}", file("/initrd", format!("initramfs-{arch}"))),
    ))
}

struct Offline {
    drop_unmapped: bool,
    out: Migration,
    /// (namespace, kernel, initrd) -> OSIE name.
    osies: BTreeMap<(String, String, String), String>,
    /// (namespace, lower-case MAC) -> Hardware name.
    macs: BTreeMap<(String, String), String>,
}

impl Offline {
    fn note(&mut self, what: &str, line: String) {
        self.out.report.push(format!("{what}: {line}"));
    }

    /// Converts one v1alpha1 object, reporting warnings and what the annotation keeps.
    fn convert(&mut self, v1: Value) -> Option<Value> {
        let what = id(&v1);
        let converted = match convert_with_warnings(v1, v1alpha2::API_VERSION) {
            Ok(c) => c,
            Err(e) => {
                self.note(&what, format!("not converted: {e}"));
                return None;
            }
        };
        for w in &converted.warnings {
            self.note(&what, format!("warning: {w}"));
        }
        let mut obj = converted.object;
        let paths = conversion_data_paths(&obj);
        if !paths.is_empty() {
            if self.drop_unmapped {
                if let Some(a) = obj
                    .pointer_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
                {
                    a.remove(CONVERSION_DATA_ANNOTATION);
                }
                self.note(
                    &what,
                    format!("dropped (no v1alpha2 home): {}", paths.join(", ")),
                );
            } else {
                self.note(
                    &what,
                    format!(
                        "kept in the {CONVERSION_DATA_ANNOTATION} annotation: {}",
                        paths.join(", ")
                    ),
                );
            }
        }
        Some(obj)
    }

    fn hardware(&mut self, v1: Value) {
        let what = id(&v1);
        let ns = str_at(&v1, "/metadata/namespace").to_string();
        let urls = v1
            .pointer("/spec/interfaces")
            .and_then(Value::as_array)
            .and_then(|ifaces| ifaces.iter().find_map(osie_urls));
        let has_osie = v1
            .pointer("/spec/interfaces")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|i| i.pointer("/netboot/osie").is_some()));
        let Some(mut v2) = self.convert(v1) else {
            return;
        };
        match urls {
            Some((kernel, initrd)) => {
                let key = (ns.clone(), kernel.clone(), initrd.clone());
                let name = match self.osies.get(&key) {
                    Some(n) => n.clone(),
                    None => {
                        let n = format!("osie-{}", self.osies.len() + 1);
                        self.osies.insert(key, n.clone());
                        let mut meta = json!({"name": n});
                        if !ns.is_empty() {
                            meta["namespace"] = json!(ns);
                        }
                        self.out.objects.push(json!({
                            "apiVersion": v1alpha2::API_VERSION, "kind": "OSIE", "metadata": meta,
                            "spec": {"kernelUrl": kernel, "initrdUrl": initrd},
                        }));
                        self.note(
                            &format!("OSIE {n}"),
                            format!("created from {what}'s netboot.osie: kernel {kernel}, initrd {initrd}"),
                        );
                        n
                    }
                };
                if let Some(spec) = v2.get_mut("spec").and_then(Value::as_object_mut) {
                    let osie = spec.entry("osie").or_insert_with(|| json!({}));
                    osie["osieRef"] = json!({"name": name});
                }
                self.note(&what, format!("spec.osie.osieRef: {name}"));
            }
            None if has_osie => self.note(
                &what,
                "netboot.osie has no baseURL: no OSIE object created (Smee's default OSIE applies)"
                    .into(),
            ),
            None => {}
        }
        self.out.objects.push(v2);
    }

    fn template(&mut self, v1: Value) {
        let what = id(&v1);
        let data = str_at(&v1, "/spec/data").to_string();
        let doc = v1alpha1::TemplateDoc::parse(&data).ok();
        match doc {
            Some(doc) if doc.tasks.len() > 1 => {
                let base = str_at(&v1, "/metadata/name").to_string();
                let mut names = Vec::new();
                for (i, task) in doc.tasks.iter().enumerate() {
                    let mut part = doc.clone();
                    part.tasks = vec![task.clone()];
                    let suffix = match label(&task.name) {
                        l if l.is_empty() => format!("task-{}", i + 1),
                        l => l,
                    };
                    let name = format!("{base}-{suffix}");
                    let mut t = v1.clone();
                    t["metadata"]["name"] = json!(name);
                    t["spec"]["data"] = json!(part.to_yaml());
                    if let Some(v2) = self.convert(t) {
                        self.out.objects.push(v2);
                    }
                    names.push(format!("{name} (worker {})", task.worker));
                }
                self.note(
                    &what,
                    format!(
                        "{} tasks split into one Template each: {}; a Workflow runs one of them on one Hardware",
                        doc.tasks.len(),
                        names.join(", ")
                    ),
                );
            }
            _ => {
                let Some(v2) = self.convert(v1) else {
                    return;
                };
                if v2.pointer("/spec/v1alpha1Data").is_some() {
                    self.note(
                        &what,
                        "its actions depend on the data ({{ if }}/{{ range }}) or do not fit v1alpha2: kept whole in spec.v1alpha1Data, rendered per Workflow as Tinkerbell does".into(),
                    );
                }
                self.out.objects.push(v2);
            }
        }
    }

    fn workflow(&mut self, v1: Value) {
        let what = id(&v1);
        let ns = str_at(&v1, "/metadata/namespace").to_string();
        let device = str_at(&v1, "/spec/hardwareMap/device_1").to_ascii_lowercase();
        let Some(mut v2) = self.convert(v1) else {
            return;
        };
        if v2.pointer("/spec/hardwareRef").is_none() {
            match self.macs.get(&(ns, device.clone())) {
                Some(hw) => {
                    v2["spec"]["hardwareRef"] = json!({"name": hw});
                    self.note(&what, format!("hardwareRef {hw}: the Hardware with device_1's MAC {device}"));
                }
                None => self.note(
                    &what,
                    format!("no hardwareRef, and no Hardware with device_1's MAC {device:?} in the input: it waits with HardwareNotFound"),
                ),
            }
        }
        if v2.pointer("/spec/templateRef").is_none() {
            self.note(
                &what,
                "no templateRef: it cannot run (Workflows are ephemeral: recreate it)".into(),
            );
        }
        self.out.objects.push(v2);
    }
}

/// Converts v1alpha1 documents offline (see the module documentation).
pub fn migrate_documents(docs: Vec<Value>, drop_unmapped: bool) -> Migration {
    let mut m = Offline {
        drop_unmapped,
        out: Migration::default(),
        osies: BTreeMap::new(),
        macs: BTreeMap::new(),
    };
    for d in &docs {
        if str_at(d, "/apiVersion") == v1alpha1::API_VERSION && str_at(d, "/kind") == "Hardware" {
            let ns = str_at(d, "/metadata/namespace").to_string();
            let name = str_at(d, "/metadata/name").to_string();
            for i in d
                .pointer("/spec/interfaces")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mac = str_at(i, "/dhcp/mac").to_ascii_lowercase();
                if !mac.is_empty() {
                    m.macs.insert((ns.clone(), mac), name.clone());
                }
            }
        }
    }
    for d in docs {
        if str_at(&d, "/apiVersion") != v1alpha1::API_VERSION {
            m.note(
                &id(&d),
                format!("{} is not v1alpha1: unchanged", str_at(&d, "/apiVersion")),
            );
            m.out.objects.push(d);
            continue;
        }
        match str_at(&d, "/kind") {
            "Hardware" => m.hardware(d),
            "Template" => m.template(d),
            "Workflow" => m.workflow(d),
            other => {
                m.note(
                    &id(&d),
                    format!("kind {other:?} has no v1alpha2 form: unchanged"),
                );
                m.out.objects.push(d);
            }
        }
    }
    m.out
}

/// The kinds stored through the conversion webhook: (plural, kind).
const KINDS: [(&str, &str); 3] = [
    ("hardware", "Hardware"),
    ("templates", "Template"),
    ("workflows", "Workflow"),
];

/// Rewrites every stored object once in v1alpha2 and sets `status.storedVersions`; returns the
/// report. Objects already carrying [`MIGRATED_ANNOTATION`] are skipped, so it resumes.
pub async fn migrate_cluster(client: &kube::Client) -> anyhow::Result<String> {
    let mut report = String::new();
    for (plural, kind) in KINDS {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, v1alpha2::VERSION, kind),
            plural,
        );
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let (mut rewritten, mut skipped) = (0usize, 0usize);
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(200);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let list = all
                .list(&lp)
                .await
                .with_context(|| format!("listing {plural}.{GROUP}"))?;
            for obj in list.items {
                if rewrite_once(client, &ar, &obj).await? {
                    rewritten += 1;
                } else {
                    skipped += 1;
                }
            }
            token = list.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                break;
            }
        }
        report.push_str(&format!(
            "{plural}.{GROUP}: {rewritten} rewritten in {}, {skipped} already done\n",
            v1alpha2::VERSION
        ));
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (plural, _) in KINDS {
        let name = format!("{plural}.{GROUP}");
        crds.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"storedVersions": [v1alpha2::VERSION]}})),
        )
        .await
        .with_context(|| format!("setting status.storedVersions of {name}"))?;
        report.push_str(&format!(
            "{name}: status.storedVersions = [{}]\n",
            v1alpha2::VERSION
        ));
    }
    Ok(report)
}

/// Writes one object back with the marker; `false` when it already had it. Conflicts (someone
/// else wrote it meanwhile) are retried on the fresh object.
async fn rewrite_once(
    client: &kube::Client,
    ar: &ApiResource,
    listed: &DynamicObject,
) -> anyhow::Result<bool> {
    let done = |o: &DynamicObject| {
        o.annotations().get(MIGRATED_ANNOTATION).map(String::as_str) == Some(v1alpha2::VERSION)
    };
    if done(listed) {
        return Ok(false);
    }
    let name = listed.name_any();
    let api: Api<DynamicObject> = match listed.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    for _ in 0..5 {
        let Some(mut obj) = api.get_opt(&name).await.context("reading")? else {
            return Ok(false);
        };
        if done(&obj) {
            return Ok(false);
        }
        obj.meta_mut()
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MIGRATED_ANNOTATION.into(), v1alpha2::VERSION.into());
        match api.replace(&name, &PostParams::default(), &obj).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e).with_context(|| format!("rewriting {}", name)),
        }
    }
    anyhow::bail!("rewriting {name}: conflicts on five attempts in a row; run again to resume")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_dns_safe() {
        assert_eq!(label("Os Installation"), "os-installation");
        assert_eq!(label("__x__"), "x");
    }
}
