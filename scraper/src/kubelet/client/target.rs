//! Which URL a node's kubelet is scraped at (metrics-server `pkg/utils/address_resolver.go`
//! and `pkg/scraper/client/resource/client.go`).

use std::net::Ipv6Addr;
use std::sync::Arc;

use http::Uri;

use super::error::Peer;
use crate::inventory::NodeRecord;
use crate::kubelet::Source;
use crate::point::NodeName;

/// metrics-server's `DefaultAddressTypePriority`.
pub const DEFAULT_ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalDNS",
    "InternalIP",
    "ExternalDNS",
    "ExternalIP",
];

/// Why a node has no usable kubelet URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// None of the node's addresses has a preferred type (`--kubelet-preferred-address-types`).
    #[error("node {node}: no address matched types [{}]", .types.join(" "))]
    NoAddress {
        /// The node.
        node: NodeName,
        /// The preferred types, in order.
        types: Vec<String>,
    },
    /// The address, port and path do not make a valid URL.
    #[error("node {node}: invalid kubelet URL {url:?}")]
    InvalidUrl {
        /// The node.
        node: NodeName,
        /// The URL that did not parse.
        url: String,
    },
}

impl TargetError {
    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::NoAddress { .. } => "no_address",
            TargetError::InvalidUrl { .. } => "invalid_url",
        }
    }
}

/// A node's kubelet endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The node.
    pub node: NodeName,
    /// The chosen address (also the TLS server name the certificate must match).
    pub address: Arc<str>,
    /// The port.
    pub port: u16,
    /// The full URL.
    pub uri: Uri,
}

impl Target {
    /// Who this target is, for error messages.
    pub(crate) fn peer(&self) -> Peer {
        Peer {
            node: Some(self.node.clone()),
            authority: self
                .uri
                .authority()
                .map(|a| a.as_str())
                .unwrap_or_default()
                .into(),
            host: (*self.address).into(),
            url: self.uri.to_string().into(),
        }
    }
}

/// Turns node records into kubelet URLs.
#[derive(Clone, Debug)]
pub struct Resolver {
    address_types: Vec<String>,
    kubelet_port: u16,
    use_node_status_port: bool,
    source: Source,
    scheme: &'static str,
}

impl Resolver {
    /// A resolver. `address_types` is `--kubelet-preferred-address-types` (empty means
    /// [`DEFAULT_ADDRESS_TYPES`]); `plain_http` is `--deprecated-kubelet-completely-insecure`.
    pub fn new(
        address_types: &[String],
        kubelet_port: u16,
        use_node_status_port: bool,
        source: Source,
        plain_http: bool,
    ) -> Self {
        let address_types = if address_types.is_empty() {
            DEFAULT_ADDRESS_TYPES
                .iter()
                .map(|&t| t.to_owned())
                .collect()
        } else {
            address_types.to_vec()
        };
        Resolver {
            address_types,
            kubelet_port,
            use_node_status_port,
            source,
            scheme: if plain_http { "http" } else { "https" },
        }
    }

    /// The node's kubelet URL: the first preferred address type with any address wins, and
    /// within it the first address; the node's status port when enabled and non-zero, else
    /// `--kubelet-port`; the `metrics.k8s.io/resource-metrics-path` annotation, else the
    /// source's default path.
    pub fn resolve(&self, node: &NodeRecord) -> Result<Target, TargetError> {
        let address = self
            .address_types
            .iter()
            .find_map(|kind| node.addresses.iter().find(|a| *a.kind == **kind))
            .map(|a| a.address.clone())
            .ok_or_else(|| TargetError::NoAddress {
                node: node.name.clone(),
                types: self.address_types.clone(),
            })?;
        let port = match node.kubelet_port {
            Some(port) if self.use_node_status_port && port != 0 => port,
            _ => self.kubelet_port,
        };
        let path = node
            .metrics_path
            .as_deref()
            .unwrap_or(self.source.default_path());
        let slash = if path.starts_with('/') { "" } else { "/" };
        let url = if address.parse::<Ipv6Addr>().is_ok() {
            format!("{}://[{address}]:{port}{slash}{path}", self.scheme)
        } else {
            format!("{}://{address}:{port}{slash}{path}", self.scheme)
        };
        let uri = url.parse::<Uri>().map_err(|_| TargetError::InvalidUrl {
            node: node.name.clone(),
            url: url.clone(),
        })?;
        // A "host" with '/', '@' or ':' in it would move the request elsewhere.
        if uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            != Some(&*address)
        {
            return Err(TargetError::InvalidUrl {
                node: node.name.clone(),
                url,
            });
        }
        Ok(Target {
            node: node.name.clone(),
            address,
            port,
            uri,
        })
    }

    /// The `/stats/summary` URL of a node whose `/metrics/resource` URL is `target`, for the
    /// warm-up's rates: the same scheme, address and port. `None` with the summary source
    /// (there is nothing to add) and for a node that names its own metrics path (its
    /// endpoint may not be a kubelet's).
    pub fn summary(&self, node: &NodeRecord, target: &Target) -> Option<Target> {
        if self.source != Source::Resource || node.metrics_path.is_some() {
            return None;
        }
        let uri = Uri::builder()
            .scheme(target.uri.scheme()?.clone())
            .authority(target.uri.authority()?.clone())
            .path_and_query(Source::Summary.default_path())
            .build()
            .ok()?;
        Some(Target {
            uri,
            ..target.clone()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::inventory::{Labels, NodeAddress};

    fn node(addresses: &[(&str, &str)], port: Option<u16>, path: Option<&str>) -> NodeRecord {
        NodeRecord {
            name: NodeName::from("n1"),
            labels: Labels::default(),
            addresses: addresses
                .iter()
                .map(|&(kind, address)| NodeAddress {
                    kind: kind.into(),
                    address: address.into(),
                })
                .collect(),
            kubelet_port: port,
            metrics_path: path.map(Arc::from),
        }
    }

    fn types(t: &[&str]) -> Vec<String> {
        t.iter().map(|&s| s.to_owned()).collect()
    }

    #[test]
    fn first_type_with_an_address_wins_then_first_address() {
        let n = node(
            &[
                ("Hostname", "node-1"),
                ("InternalIP", "10.0.0.1"),
                ("InternalIP", "10.0.0.2"),
                ("ExternalIP", "1.2.3.4"),
            ],
            None,
            None,
        );
        let r = Resolver::new(
            &types(&["ExternalDNS", "InternalIP", "Hostname"]),
            10250,
            false,
            Source::Resource,
            false,
        );
        let t = r.resolve(&n).unwrap();
        assert_eq!(&*t.address, "10.0.0.1");
        assert_eq!(t.uri.to_string(), "https://10.0.0.1:10250/metrics/resource");

        let r = Resolver::new(&[], 10250, false, Source::Resource, false);
        assert_eq!(&*r.resolve(&n).unwrap().address, "node-1");
    }

    #[test]
    fn no_matching_type_names_the_types() {
        let n = node(&[("Hostname", "node-1")], None, None);
        let r = Resolver::new(
            &types(&["InternalIP", "ExternalIP"]),
            10250,
            false,
            Source::Resource,
            false,
        );
        let err = r.resolve(&n).unwrap_err();
        assert_eq!(err.reason(), "no_address");
        assert_eq!(
            err.to_string(),
            "node n1: no address matched types [InternalIP ExternalIP]"
        );
    }

    #[test]
    fn status_port_only_when_enabled_and_non_zero() {
        let n = node(&[("InternalIP", "10.0.0.1")], Some(4443), None);
        let on = Resolver::new(&[], 10250, true, Source::Resource, false);
        let off = Resolver::new(&[], 10250, false, Source::Resource, false);
        assert_eq!(on.resolve(&n).unwrap().port, 4443);
        assert_eq!(off.resolve(&n).unwrap().port, 10250);
        let zero = node(&[("InternalIP", "10.0.0.1")], Some(0), None);
        assert_eq!(on.resolve(&zero).unwrap().port, 10250);
    }

    #[test]
    fn ipv6_is_bracketed_and_the_server_name_is_the_bare_address() {
        let n = node(&[("InternalIP", "fd00::1")], None, None);
        let r = Resolver::new(&[], 10250, false, Source::Resource, false);
        let t = r.resolve(&n).unwrap();
        assert_eq!(
            t.uri.to_string(),
            "https://[fd00::1]:10250/metrics/resource"
        );
        assert_eq!(&*t.peer().host, "fd00::1");
        assert_eq!(&*t.peer().authority, "[fd00::1]:10250");
    }

    #[test]
    fn annotation_path_source_path_and_plain_http() {
        let r = Resolver::new(&[], 10250, false, Source::Summary, false);
        let plain = node(&[("InternalIP", "10.0.0.1")], None, None);
        assert_eq!(
            r.resolve(&plain).unwrap().uri.to_string(),
            "https://10.0.0.1:10250/stats/summary?only_cpu_and_memory=true"
        );
        let kwok = node(
            &[("InternalIP", "10.0.0.1")],
            None,
            Some("/metrics/nodes/n1/metrics/resource"),
        );
        assert_eq!(
            r.resolve(&kwok).unwrap().uri.to_string(),
            "https://10.0.0.1:10250/metrics/nodes/n1/metrics/resource"
        );
        let no_slash = node(&[("InternalIP", "10.0.0.1")], None, Some("custom"));
        let insecure = Resolver::new(&[], 10255, false, Source::Resource, true);
        assert_eq!(
            insecure.resolve(&no_slash).unwrap().uri.to_string(),
            "http://10.0.0.1:10255/custom"
        );
    }

    #[test]
    fn hostile_addresses_are_refused() {
        let r = Resolver::new(&[], 10250, false, Source::Resource, false);
        for bad in ["evil.example/x", "a@b", "x y", "10.0.0.1:99"] {
            let n = node(&[("Hostname", bad)], None, None);
            let err = r.resolve(&n).unwrap_err();
            assert_eq!(err.reason(), "invalid_url", "{bad}");
        }
    }

    /// The warm-up's summary URL: the node's kubelet (address, port, scheme) at the
    /// summary's path; none for a node with its own metrics path (kwok's, virtual kubelets')
    /// nor with the summary source.
    #[test]
    fn the_summary_beside_the_resource_endpoint() {
        let r = Resolver::new(&[], 10250, true, Source::Resource, false);
        let n = node(&[("InternalIP", "fd00::1")], Some(10251), None);
        let t = r.resolve(&n).unwrap();
        let summary = r.summary(&n, &t).unwrap();
        assert_eq!(
            summary.uri.to_string(),
            "https://[fd00::1]:10251/stats/summary?only_cpu_and_memory=true"
        );
        assert_eq!(summary.peer().authority, t.peer().authority);
        let kwok = node(
            &[("InternalIP", "10.0.0.1")],
            None,
            Some("/metrics/nodes/n1/metrics/resource"),
        );
        assert_eq!(r.summary(&kwok, &r.resolve(&kwok).unwrap()), None);
        let by_summary = Resolver::new(&[], 10250, false, Source::Summary, false);
        assert_eq!(by_summary.summary(&n, &t), None);
    }
}
