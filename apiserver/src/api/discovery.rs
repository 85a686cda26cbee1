//! Discovery documents, built once: `/apis` (legacy APIGroupList and aggregated
//! `apidiscovery.k8s.io/v2`), `/apis/metrics.k8s.io` (APIGroup), the per-version
//! APIResourceList and `/version` (aggregation-contract.md §2.2-2.4).

use bytes::Bytes;
use sha2::{Digest, Sha512};

use super::routes::Version;

/// Every discovery body, serialized once at startup.
#[derive(Clone, Debug)]
pub struct Discovery {
    /// `/apis` as `APIGroupList`.
    pub apis: Bytes,
    /// `/apis/metrics.k8s.io` as `APIGroup`.
    pub group: Bytes,
    /// `/apis/metrics.k8s.io/v1` and `/v1beta1` (indexed like [`Version::ALL`]).
    pub resources: [Bytes; 2],
    /// `/apis` as `APIGroupDiscoveryList` (apidiscovery.k8s.io/v2).
    pub aggregated: Bytes,
    /// `"<HEX sha512 of the aggregated document>"`, quotes included.
    pub aggregated_etag: String,
    /// `/version`.
    pub version: Bytes,
}

/// The Content-Type of the aggregated discovery document (must be exact, §2.4).
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Upper-case hex SHA-512 (Go's `fmt.Sprintf("%X", sha512.Sum512(b))`).
pub fn hash_hex(bytes: &[u8]) -> String {
    let digest = Sha512::digest(bytes);
    let mut out = String::with_capacity(128);
    for b in digest {
        out.push(char::from(b"0123456789ABCDEF"[(b >> 4) as usize]));
        out.push(char::from(b"0123456789ABCDEF"[(b & 0xF) as usize]));
    }
    out
}

const GROUP_VERSIONS: &str = concat!(
    "[{\"groupVersion\":\"metrics.k8s.io/v1\",\"version\":\"v1\"},",
    "{\"groupVersion\":\"metrics.k8s.io/v1beta1\",\"version\":\"v1beta1\"}]"
);
const PREFERRED: &str = "{\"groupVersion\":\"metrics.k8s.io/v1\",\"version\":\"v1\"}";

/// `/version` payload (`version.Info`, indented as the apiserver's `WriteRawJSON` does), from
/// the crate version (`v0.1.0`).
fn version_info() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or("");
    let minor = parts.next().unwrap_or("");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    let os = std::env::consts::OS;
    format!(
        "{{\n  \"major\": \"{major}\",\n  \"minor\": \"{minor}\",\n  \"gitVersion\": \"v{version}\",\n  \"gitCommit\": \"\",\n  \"gitTreeState\": \"\",\n  \"buildDate\": \"\",\n  \"goVersion\": \"\",\n  \"compiler\": \"rustc\",\n  \"platform\": \"{os}/{arch}\"\n}}"
    )
}

impl Discovery {
    /// Builds every document.
    pub fn new() -> Self {
        let apis = format!(
            "{{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[{{\"name\":\"metrics.k8s.io\",\"versions\":{GROUP_VERSIONS},\"preferredVersion\":{PREFERRED}}}]}}\n"
        );
        let group = format!(
            "{{\"kind\":\"APIGroup\",\"apiVersion\":\"v1\",\"name\":\"metrics.k8s.io\",\"versions\":{GROUP_VERSIONS},\"preferredVersion\":{PREFERRED}}}\n"
        );
        let resources = Version::ALL.map(|v| {
            Bytes::from(format!(
                concat!(
                    "{{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"{}\",\"resources\":[",
                    "{{\"name\":\"nodes\",\"singularName\":\"\",\"namespaced\":false,\"kind\":\"NodeMetrics\",\"verbs\":[\"get\",\"list\"]}},",
                    "{{\"name\":\"pods\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"PodMetrics\",\"verbs\":[\"get\",\"list\"]}}]}}\n"
                ),
                v.group_version()
            ))
        });
        let versions: Vec<String> = Version::ALL
            .iter()
            .map(|v| {
                format!(
                    concat!(
                        "{{\"version\":\"{}\",\"resources\":[",
                        "{{\"resource\":\"nodes\",\"responseKind\":{{\"group\":\"\",\"version\":\"\",\"kind\":\"NodeMetrics\"}},\"scope\":\"Cluster\",\"singularResource\":\"\",\"verbs\":[\"get\",\"list\"]}},",
                        "{{\"resource\":\"pods\",\"responseKind\":{{\"group\":\"\",\"version\":\"\",\"kind\":\"PodMetrics\"}},\"scope\":\"Namespaced\",\"singularResource\":\"\",\"verbs\":[\"get\",\"list\"]}}],",
                        "\"freshness\":\"Current\"}}"
                    ),
                    v.as_str()
                )
            })
            .collect();
        let aggregated = format!(
            "{{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"apidiscovery.k8s.io/v2\",\"metadata\":{{}},\"items\":[{{\"metadata\":{{\"name\":\"metrics.k8s.io\",\"creationTimestamp\":null}},\"versions\":[{}]}}]}}",
            versions.join(",")
        );
        let aggregated_etag = format!("\"{}\"", hash_hex(aggregated.as_bytes()));
        Discovery {
            apis: Bytes::from(apis),
            group: Bytes::from(group),
            resources,
            aggregated: Bytes::from(aggregated + "\n"),
            aggregated_etag,
            version: Bytes::from(version_info()),
        }
    }

    /// The APIResourceList of a version.
    pub fn resources(&self, v: Version) -> &Bytes {
        match v {
            Version::V1 => &self.resources[0],
            Version::V1beta1 => &self.resources[1],
        }
    }
}

impl Default for Discovery {
    fn default() -> Self {
        Self::new()
    }
}
