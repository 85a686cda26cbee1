//! OpenAPI documents, built once at startup: `/openapi/v2` (Swagger 2.0), the `/openapi/v3`
//! index and `/openapi/v3/apis/metrics.k8s.io/{v}` (aggregation-contract.md §2.5).

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::accept;
use super::discovery::hash_hex;
use super::routes::Version;

/// A served document and its hash (upper-case hex SHA-512, as kube-openapi computes it).
#[derive(Clone, Debug)]
pub struct Doc {
    /// The JSON body.
    pub body: Bytes,
    /// The unquoted hash.
    pub hash: String,
}

impl Doc {
    fn new(value: &Value) -> Self {
        let body = serde_json::to_vec(value).unwrap_or_default();
        Doc {
            hash: hash_hex(&body),
            body: Bytes::from(body),
        }
    }

    /// `"<hash>"`, for the ETag header.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.hash)
    }
}

/// Every OpenAPI document.
#[derive(Clone, Debug)]
pub struct OpenApi {
    /// `/openapi/v2`
    pub v2: Doc,
    /// `/openapi/v3`
    pub v3_index: Doc,
    /// `/openapi/v3/apis/metrics.k8s.io/{v}`, indexed like [`Version::ALL`].
    pub v3: [Doc; 2],
}

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

fn model(v: Version, kind: &str) -> String {
    format!("io.k8s.metrics.pkg.apis.metrics.{}.{kind}", v.as_str())
}

fn gvk(v: Version, kind: &str) -> Value {
    json!([{"group": "metrics.k8s.io", "kind": kind, "version": v.as_str()}])
}

/// Schemas of one version's types, `$ref`s prefixed with `refs`.
fn schemas(v: Version, refs: &str, out: &mut Map<String, Value>) {
    let r = |name: &str| json!({"$ref": format!("{refs}{name}")});
    let type_meta = || {
        json!({
            "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"},
            "kind": {"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"},
        })
    };
    let usage = json!({
        "description": "The memory usage is the memory working set.",
        "type": "object",
        "additionalProperties": r(QUANTITY),
    });
    let with = |mut base: Value, extra: Value| {
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, val) in e {
                b.insert(k.clone(), val.clone());
            }
        }
        base
    };
    let time_window = json!({
        "timestamp": with(r(&format!("{META}.Time")), json!({"description": "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp]."})),
        "window": {"type": "string"},
    });
    let object = |kind: &str, description: &str, required: Value, fields: Value| {
        let mut props = with(
            type_meta(),
            json!({"metadata": with(r(&format!("{META}.ObjectMeta")), json!({"description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata", "default": {}}))}),
        );
        props = with(props, time_window.clone());
        props = with(props, fields);
        json!({
            "description": description,
            "type": "object",
            "required": required,
            "properties": props,
            "x-kubernetes-group-version-kind": gvk(v, kind),
        })
    };
    let list = |kind: &str, item: &str, description: &str| {
        let props = with(
            type_meta(),
            json!({
                "metadata": with(r(&format!("{META}.ListMeta")), json!({"description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "default": {}})),
                "items": {"description": format!("List of {item}."), "type": "array", "items": with(r(&model(v, item)), json!({"default": {}}))},
            }),
        );
        json!({
            "description": description,
            "type": "object",
            "required": ["items"],
            "properties": props,
            "x-kubernetes-group-version-kind": gvk(v, kind),
        })
    };
    out.insert(
        model(v, "NodeMetrics"),
        object(
            "NodeMetrics",
            "NodeMetrics sets resource usage metrics of a node.",
            json!(["timestamp", "window", "usage"]),
            json!({"usage": usage.clone()}),
        ),
    );
    out.insert(
        model(v, "NodeMetricsList"),
        list(
            "NodeMetricsList",
            "NodeMetrics",
            "NodeMetricsList is a list of NodeMetrics.",
        ),
    );
    out.insert(
        model(v, "PodMetrics"),
        object(
            "PodMetrics",
            "PodMetrics sets resource usage metrics of a pod.",
            json!(["timestamp", "window", "containers"]),
            json!({"containers": {
                "description": "Metrics for all containers are collected within the same time window.",
                "type": "array",
                "items": with(r(&model(v, "ContainerMetrics")), json!({"default": {}})),
                "x-kubernetes-list-type": "atomic",
            }}),
        ),
    );
    out.insert(
        model(v, "PodMetricsList"),
        list(
            "PodMetricsList",
            "PodMetrics",
            "PodMetricsList is a list of PodMetrics.",
        ),
    );
    out.insert(
        model(v, "ContainerMetrics"),
        json!({
            "description": "ContainerMetrics sets resource usage metrics of a container.",
            "type": "object",
            "required": ["name", "usage"],
            "properties": {
                "name": {"description": "Container name corresponding to the one from pod.spec.containers.", "type": "string", "default": ""},
                "usage": usage,
            },
        }),
    );
}

/// apimachinery schemas the metrics types refer to (minimal).
fn meta_schemas(refs: &str, out: &mut Map<String, Value>) {
    let time = format!("{refs}{META}.Time");
    out.insert(
        format!("{META}.ObjectMeta"),
        json!({
            "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "creationTimestamp": {"$ref": time},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
            },
        }),
    );
    out.insert(
        format!("{META}.ListMeta"),
        json!({
            "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
            "type": "object",
            "properties": {
                "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"},
                "resourceVersion": {"type": "string"},
                "selfLink": {"type": "string"},
            },
        }),
    );
    out.insert(
        format!("{META}.Time"),
        json!({"description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.", "type": "string", "format": "date-time"}),
    );
    out.insert(QUANTITY.to_owned(), quantity(refs));
}

/// `resource.Quantity`: a string in Swagger 2.0; in OpenAPI v3 a string or a number
/// (`OpenAPIV3OneOfTypes`), which is also what makes `kubectl explain` name the type
/// `Quantity` instead of `string`.
fn quantity(refs: &str) -> Value {
    let description = "Quantity is a fixed-point representation of a number. It provides convenient marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() accessors.";
    if refs.starts_with("#/components/") {
        json!({"description": description, "oneOf": [{"type": "string"}, {"type": "number"}]})
    } else {
        json!({"description": description, "type": "string"})
    }
}

/// Paths of one version. `response` wraps a `$ref` into the right response object.
fn paths(v: Version, refs: &str, v3: bool, out: &mut Map<String, Value>) {
    let tag = format!("metrics_{}", v.as_str());
    let cap = match v {
        Version::V1 => "V1",
        Version::V1beta1 => "V1beta1",
    };
    // What the installer declares (`MediaTypesForSerializer` of the `CodecFactory`): JSON,
    // YAML and protobuf; a list also the watch streams (none is served: there is no watch).
    let produces = |list: bool| {
        let mut types = vec!["application/json", "application/yaml", accept::PROTOBUF];
        if list {
            types.extend([
                "application/json;stream=watch",
                "application/vnd.kubernetes.protobuf;stream=watch",
            ]);
        }
        types
    };
    let response = |kind: &str, list: bool| {
        let schema = json!({"$ref": format!("{refs}{}", model(v, kind))});
        if v3 {
            let content: Map<String, Value> = produces(list)
                .into_iter()
                .map(|t| (t.to_owned(), json!({"schema": schema})))
                .collect();
            json!({"200": {"description": "OK", "content": content}, "401": {"description": "Unauthorized"}})
        } else {
            json!({"200": {"description": "OK", "schema": schema}, "401": {"description": "Unauthorized"}})
        }
    };
    let param = |name: &str, description: &str| {
        if v3 {
            json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
        } else {
            json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true})
        }
    };
    let path_param = |name: &str, description: &str| {
        if v3 {
            json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string", "uniqueItems": true}})
        } else {
            json!({"name": name, "in": "path", "required": true, "description": description, "type": "string", "uniqueItems": true})
        }
    };
    let selectors = || {
        vec![
            param(
                "labelSelector",
                "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
            ),
            param(
                "fieldSelector",
                "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
            ),
        ]
    };
    let op = |action: &str, kind: &str, id: String, response_kind: &str| {
        let list = action == "list";
        let mut o = json!({
            "operationId": id,
            "tags": [tag.clone()],
            "responses": response(response_kind, list),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": "metrics.k8s.io", "kind": kind, "version": v.as_str()},
        });
        if !v3 && let Some(m) = o.as_object_mut() {
            m.insert("produces".into(), json!(produces(list)));
            m.insert("schemes".into(), json!(["https"]));
        }
        o
    };
    let base = format!("/apis/metrics.k8s.io/{}", v.as_str());
    out.insert(
        format!("{base}/nodes"),
        json!({"get": op("list", "NodeMetrics", format!("listMetrics{cap}NodeMetrics"), "NodeMetricsList"), "parameters": selectors()}),
    );
    out.insert(
        format!("{base}/nodes/{{name}}"),
        json!({"get": op("get", "NodeMetrics", format!("readMetrics{cap}NodeMetrics"), "NodeMetrics"), "parameters": [path_param("name", "name of the NodeMetrics")]}),
    );
    out.insert(
        format!("{base}/pods"),
        json!({"get": op("list", "PodMetrics", format!("listMetrics{cap}PodMetricsForAllNamespaces"), "PodMetricsList"), "parameters": selectors()}),
    );
    let mut ns_params = selectors();
    ns_params.push(path_param(
        "namespace",
        "object name and auth scope, such as for teams and projects",
    ));
    out.insert(
        format!("{base}/namespaces/{{namespace}}/pods"),
        json!({"get": op("list", "PodMetrics", format!("listMetrics{cap}NamespacedPodMetrics"), "PodMetricsList"), "parameters": ns_params}),
    );
    out.insert(
        format!("{base}/namespaces/{{namespace}}/pods/{{name}}"),
        json!({"get": op("get", "PodMetrics", format!("readMetrics{cap}NamespacedPodMetrics"), "PodMetrics"), "parameters": [
            path_param("name", "name of the PodMetrics"),
            path_param("namespace", "object name and auth scope, such as for teams and projects"),
        ]}),
    );
}

fn info() -> Value {
    json!({"title": "Kubernetes metrics-server", "version": format!("v{}", env!("CARGO_PKG_VERSION"))})
}

impl OpenApi {
    /// Builds every document.
    pub fn new() -> Self {
        let refs2 = "#/definitions/";
        let mut definitions = Map::new();
        let mut paths2 = Map::new();
        meta_schemas(refs2, &mut definitions);
        for v in Version::ALL {
            schemas(v, refs2, &mut definitions);
            paths(v, refs2, false, &mut paths2);
        }
        let v2 = Doc::new(&json!({
            "swagger": "2.0",
            "info": info(),
            "paths": paths2,
            "definitions": definitions,
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}],
        }));
        let refs3 = "#/components/schemas/";
        let v3 = Version::ALL.map(|v| {
            let mut schemas3 = Map::new();
            let mut paths3 = Map::new();
            meta_schemas(refs3, &mut schemas3);
            schemas(v, refs3, &mut schemas3);
            paths(v, refs3, true, &mut paths3);
            Doc::new(&json!({
                "openapi": "3.0.0",
                "info": info(),
                "paths": paths3,
                "components": {
                    "schemas": schemas3,
                    "securitySchemes": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
                },
            }))
        });
        let mut index = Map::new();
        for (v, doc) in Version::ALL.iter().zip(v3.iter()) {
            index.insert(
                format!("apis/metrics.k8s.io/{}", v.as_str()),
                json!({"serverRelativeURL": format!("/openapi/v3/apis/metrics.k8s.io/{}?hash={}", v.as_str(), doc.hash)}),
            );
        }
        OpenApi {
            v2,
            v3_index: Doc::new(&json!({"paths": index})),
            v3,
        }
    }

    /// The v3 document of a version.
    pub fn v3(&self, v: Version) -> &Doc {
        match v {
            Version::V1 => &self.v3[0],
            Version::V1beta1 => &self.v3[1],
        }
    }
}

impl Default for OpenApi {
    fn default() -> Self {
        Self::new()
    }
}
