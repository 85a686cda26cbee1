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

/// Where a v3 document's `$ref`s point.
const REFS_V3: &str = "#/components/schemas/";
/// Where a v2 document's `$ref`s point.
const REFS_V2: &str = "#/definitions/";

/// Schemas of one version's types, in OpenAPI v3's form (see [`swagger2`] for v2's).
fn schemas(v: Version, out: &mut Map<String, Value>) {
    let r = |name: &str| json!({"$ref": format!("{REFS_V3}{name}")});
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
    // A reference with keys beside it, as kube-openapi writes one in v3.
    let r_with = |name: &str, extra: Value| with(json!({"allOf": [r(name)]}), extra);
    let time_window = json!({
        "timestamp": r_with(&format!("{META}.Time"), json!({"description": "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp]."})),
        "window": {"type": "string"},
    });
    let object = |kind: &str, description: &str, required: Value, fields: Value| {
        let mut props = with(
            type_meta(),
            json!({"metadata": r_with(&format!("{META}.ObjectMeta"), json!({"description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata", "default": {}}))}),
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
                "metadata": r_with(&format!("{META}.ListMeta"), json!({"description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "default": {}})),
                "items": {"description": format!("List of {item}."), "type": "array", "items": r_with(&model(v, item), json!({"default": {}}))},
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
                "items": r_with(&model(v, "ContainerMetrics"), json!({"default": {}})),
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

/// The apimachinery schemas the metrics types refer to, with everything they refer to in turn,
/// exactly as Kubernetes' own OpenAPI v3 documents have them (`openapi_meta.json`, from
/// kubernetes/kubernetes `api/openapi-spec/v3/apis__scheduling.k8s.io__v1_openapi.json`, and
/// Quantity from `apis__resource.k8s.io__v1_openapi.json`, at 8a84988, Kubernetes 1.34 or
/// later). It matters for v2 most: the aggregator merges this server's v2
/// document into kube-apiserver's and renames every definition that differs from its own
/// (`ObjectMeta_v2`, ...), as kube-openapi's `mergeSpecs` does.
fn meta_schemas(out: &mut Map<String, Value>) {
    match serde_json::from_str::<Map<String, Value>>(include_str!("openapi_meta.json")) {
        Ok(meta) => out.extend(meta),
        Err(error) => tracing::error!(%error, "openapi_meta.json does not parse"),
    }
}

/// A v3 schema in Swagger 2.0's form, as kube-openapi writes the same definition there: a
/// reference with keys beside it is not wrapped in `allOf`; no `default` (k8s.io/apiserver
/// prunes them from v2, `handler.PruneDefaults`); a quantity (a string or a number in v3,
/// `OpenAPIV3OneOfTypes`) is a string.
fn swagger2(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                match key.as_str() {
                    "default" => {}
                    "$ref" => {
                        let target = value.as_str().unwrap_or_default();
                        let name = target.strip_prefix(REFS_V3).unwrap_or(target);
                        out.insert(key.clone(), json!(format!("{REFS_V2}{name}")));
                    }
                    "allOf" => match value.as_array().map(Vec::as_slice) {
                        Some([only]) if only.get("$ref").is_some() => {
                            if let Value::Object(reference) = swagger2(only) {
                                out.extend(reference);
                            }
                        }
                        _ => {
                            out.insert(key.clone(), swagger2(value));
                        }
                    },
                    "oneOf" if *value == json!([{"type": "string"}, {"type": "number"}]) => {
                        out.insert("type".into(), json!("string"));
                    }
                    // Property names are not schema keywords: only their schemas change.
                    "properties" => {
                        let properties = value.as_object().map(|properties| {
                            properties
                                .iter()
                                .map(|(name, property)| (name.clone(), swagger2(property)))
                                .collect::<Map<String, Value>>()
                        });
                        out.insert(
                            key.clone(),
                            properties.map_or_else(|| value.clone(), Value::Object),
                        );
                    }
                    _ => {
                        out.insert(key.clone(), swagger2(value));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(swagger2).collect()),
        other => other.clone(),
    }
}

/// Paths of one version. `response` wraps a `$ref` into the right response object.
fn paths(v: Version, v3: bool, out: &mut Map<String, Value>) {
    let refs = if v3 { REFS_V3 } else { REFS_V2 };
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
    // The parameters of a path, all at the path's level as kube-openapi hoists the ones every
    // operation shares (one GET here), sorted by name as it sorts them.
    let param = |name: &str, place: &str, kind: &str, description: &str| {
        let mut p = json!({"name": name, "in": place, "description": description});
        if place == "path" {
            p["required"] = json!(true);
        }
        if v3 {
            p["schema"] = json!({"type": kind, "uniqueItems": true});
        } else {
            p["type"] = json!(kind);
            p["uniqueItems"] = json!(true);
        }
        p
    };
    let parameters = |kind: &str, namespaced: bool, list: bool| {
        let mut params: Vec<Value> = Vec::new();
        if list {
            // `metav1.ListOptions`, as the installer adds them to every list route.
            params.extend(
                LIST_OPTIONS
                    .iter()
                    .map(|(name, kind, description)| param(name, "query", kind, description)),
            );
        } else {
            params.push(param(
                "name",
                "path",
                "string",
                &format!("name of the {kind}"),
            ));
        }
        if namespaced {
            params.push(param("namespace", "path", "string", NAMESPACE_PARAM));
        }
        params.push(param("pretty", "query", "string", PRETTY_PARAM));
        params.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Value::Array(params)
    };
    let op = |action: &str, kind: &str, id: String, response_kind: &str| {
        let list = action == "list";
        let mut o = json!({
            "description": if list { format!("list objects of kind {kind}") } else { format!("read the specified {kind}") },
            "operationId": id,
            "tags": [tag.clone()],
            "responses": response(response_kind, list),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": "metrics.k8s.io", "kind": kind, "version": v.as_str()},
        });
        if !v3 && let Some(m) = o.as_object_mut() {
            // The web service's `Consumes("*/*")`, which every route inherits.
            m.insert("consumes".into(), json!(["*/*"]));
            m.insert("produces".into(), json!(produces(list)));
            m.insert("schemes".into(), json!(["https"]));
        }
        o
    };
    let base = format!("/apis/metrics.k8s.io/{}", v.as_str());
    let routes = [
        (
            "nodes",
            "list",
            "NodeMetrics",
            "NodeMetricsList",
            "NodeMetrics",
            false,
        ),
        (
            "nodes/{name}",
            "get",
            "NodeMetrics",
            "NodeMetrics",
            "NodeMetrics",
            false,
        ),
        (
            "pods",
            "list",
            "PodMetrics",
            "PodMetricsList",
            "PodMetricsForAllNamespaces",
            false,
        ),
        (
            "namespaces/{namespace}/pods",
            "list",
            "PodMetrics",
            "PodMetricsList",
            "NamespacedPodMetrics",
            true,
        ),
        (
            "namespaces/{namespace}/pods/{name}",
            "get",
            "PodMetrics",
            "PodMetrics",
            "NamespacedPodMetrics",
            true,
        ),
    ];
    for (path, action, kind, response_kind, id, namespaced) in routes {
        let verb = if action == "list" { "list" } else { "read" };
        out.insert(
            format!("{base}/{path}"),
            json!({
                "get": op(action, kind, format!("{verb}Metrics{cap}{id}"), response_kind),
                "parameters": parameters(kind, namespaced, action == "list"),
            }),
        );
    }
}

/// `pretty`, which the installer adds to every route.
const PRETTY_PARAM: &str = "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).";

/// `{namespace}`, as the installer describes it.
const NAMESPACE_PARAM: &str = "object name and auth scope, such as for teams and projects";

/// The query parameters of `metav1.ListOptions` (name, type, description), as the installer
/// declares them on every list route, whatever the storage makes of them: this server, as
/// metrics-server, answers every item whatever `limit` says (which the option's own text
/// allows) and answers `watch` 405 (the storage is no watcher).
const LIST_OPTIONS: [(&str, &str, &str); 10] = [
    (
        "allowWatchBookmarks",
        "boolean",
        "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
    ),
    (
        "continue",
        "string",
        "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token. If the client needs a consistent list, it must restart their list without the continue field. Otherwise, the client may send another list request with the token received with the 410 error, the server will respond with a list starting from the next key, but from the latest snapshot, which is inconsistent from the previous list results - objects that are created, modified, or deleted after the first list request will be included in the response, as long as their keys are after the \"next key\".\n\nThis field is not supported when watch is true. Clients may start a watch from the last resourceVersion value returned by the server and not miss any modifications.",
    ),
    (
        "fieldSelector",
        "string",
        "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    ),
    (
        "labelSelector",
        "string",
        "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    ),
    (
        "limit",
        "integer",
        "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. Setting a limit may return fewer than the requested amount of items (up to zero items) in the event all requested objects are filtered out and clients should only use the presence of the continue field to determine whether more results are available. Servers may choose not to support the limit argument and will return all of the available results. If limit is specified and the continue field is empty, clients may assume that no more results are available. This field is not supported if watch is true.\n\nThe server guarantees that the objects returned when using continue will be identical to issuing a single list call without a limit - that is, no objects created, modified, or deleted after the first request is issued will be included in any subsequent continued requests. This is sometimes referred to as a consistent snapshot, and ensures that a client that is using limit to receive smaller chunks of a very large result can ensure they see all possible objects. If objects are updated during a chunked list the version of the object that was present at the time the first list result was calculated is returned.",
    ),
    (
        "resourceVersion",
        "string",
        "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
    ),
    (
        "resourceVersionMatch",
        "string",
        "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
    ),
    (
        "sendInitialEvents",
        "boolean",
        "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event  will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.\n\nWhen `sendInitialEvents` option is set, we require `resourceVersionMatch` option to also be set. The semantic of the watch request is as following: - `resourceVersionMatch` = NotOlderThan\n  is interpreted as \"data at least as new as the provided `resourceVersion`\"\n  and the bookmark event is send when the state is synced\n  to a `resourceVersion` at least as fresh as the one provided by the ListOptions.\n  If `resourceVersion` is unset, this is interpreted as \"consistent read\" and the\n  bookmark event is send when the state is synced at least to the moment\n  when request started being processed.\n- `resourceVersionMatch` set to any other value or unset\n  Invalid error is returned.\n\nDefaults to true if `resourceVersion=\"\"` or `resourceVersion=\"0\"` (for backward compatibility reasons) and to false otherwise.",
    ),
    (
        "timeoutSeconds",
        "integer",
        "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
    ),
    (
        "watch",
        "boolean",
        "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
    ),
];

fn info() -> Value {
    json!({"title": "Kubernetes metrics-server", "version": format!("v{}", env!("CARGO_PKG_VERSION"))})
}

impl OpenApi {
    /// Builds every document.
    pub fn new() -> Self {
        let mut schemas3 = Map::new();
        meta_schemas(&mut schemas3);
        let mut paths2 = Map::new();
        for v in Version::ALL {
            schemas(v, &mut schemas3);
            paths(v, false, &mut paths2);
        }
        let definitions: Map<String, Value> = schemas3
            .iter()
            .map(|(name, schema)| (name.clone(), swagger2(schema)))
            .collect();
        let v2 = Doc::new(&json!({
            "swagger": "2.0",
            "info": info(),
            "paths": paths2,
            "definitions": definitions,
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}],
        }));
        let v3 = Version::ALL.map(|v| {
            let mut schemas3 = Map::new();
            let mut paths3 = Map::new();
            meta_schemas(&mut schemas3);
            schemas(v, &mut schemas3);
            paths(v, true, &mut paths3);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The v2 form of Kubernetes' own meta schemas, derived from their v3 form, is exactly what
    /// kube-apiserver's `/openapi/v2` has (`testdata/openapi_meta_v2.json`, from
    /// kubernetes/kubernetes `api/openapi-spec/swagger.json` at de5742a, Kubernetes 1.31; these
    /// seven have not changed since): no definition of this server is
    /// renamed when the aggregator merges the documents.
    #[test]
    fn meta_schemas_in_swagger2_are_kubernetes_own() {
        let mut meta = Map::new();
        meta_schemas(&mut meta);
        assert_eq!(meta.len(), 7);
        let derived: Map<String, Value> = meta
            .iter()
            .map(|(name, schema)| (name.clone(), swagger2(schema)))
            .collect();
        let kubernetes: Map<String, Value> =
            serde_json::from_str(include_str!("testdata/openapi_meta_v2.json")).unwrap();
        for (name, schema) in &kubernetes {
            assert_eq!(derived.get(name), Some(schema), "{name}");
        }
        assert_eq!(derived.len(), kubernetes.len());
    }

    #[test]
    fn swagger2_unwraps_references_and_drops_defaults_but_not_properties_so_named() {
        let v3 = json!({
            "properties": {
                "default": {"type": "string", "default": ""},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/M"}], "description": "d", "default": {}},
                "items": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/I"}], "default": {}}},
                "q": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            },
        });
        assert_eq!(
            swagger2(&v3),
            json!({
                "properties": {
                    "default": {"type": "string"},
                    "metadata": {"$ref": "#/definitions/M", "description": "d"},
                    "items": {"type": "array", "items": {"$ref": "#/definitions/I"}},
                    "q": {"type": "string"},
                },
            })
        );
    }
}
