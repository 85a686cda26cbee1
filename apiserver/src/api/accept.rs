//! `Accept` negotiation as the generic apiserver does it (`goautoneg.ParseAccept` +
//! `negotiation.NegotiateMediaTypeOptions`), for the one serializer we have: JSON.

/// One media range of an `Accept` header.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaRange<'a> {
    /// Type (`application`, `*`).
    pub typ: &'a str,
    /// Subtype (`json`, `*`).
    pub subtype: &'a str,
    /// `q`, 1.0 when absent.
    pub q: f32,
    /// Every other parameter, in order (a repeated key: the last wins on lookup).
    pub params: Vec<(&'a str, &'a str)>,
}

impl MediaRange<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

/// goautoneg `ParseAccept`: comma-separated ranges, `;`-separated parameters, sorted by `q`
/// (descending), then concrete types before wildcards. Ranges that do not parse are skipped.
pub fn parse(header: &str) -> Vec<MediaRange<'_>> {
    let mut out = Vec::new();
    for part in header.split(',') {
        let mut pieces = part.split(';');
        let range = pieces.next().unwrap_or("");
        let mut sp = range.split('/');
        let typ = sp.next().unwrap_or("").trim_matches(' ');
        let (typ, subtype) = match (sp.next(), sp.next()) {
            (None, None) if typ == "*" => ("*", "*"),
            (Some(sub), None) => (typ, sub.trim_matches(' ')),
            _ => continue,
        };
        let mut m = MediaRange {
            typ,
            subtype,
            q: 1.0,
            params: Vec::new(),
        };
        for param in pieces {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            let k = k.trim_matches(' ');
            if k == "q" {
                // Go keeps 0 when ParseFloat fails.
                m.q = v.parse::<f32>().unwrap_or(0.0);
            } else {
                m.params.push((k, v.trim_matches(' ')));
            }
        }
        out.push(m);
    }
    out.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then((a.typ == "*").cmp(&(b.typ == "*")))
            .then((a.subtype == "*").cmp(&(b.subtype == "*")))
    });
    out
}

/// `meta.k8s.io` version of a Table or PartialObjectMetadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaVersion {
    /// `meta.k8s.io/v1`
    V1,
    /// `meta.k8s.io/v1beta1`
    V1beta1,
}

impl MetaVersion {
    /// `meta.k8s.io/<v>`.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// What the response will be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Plain `application/json` of the object.
    Json,
    /// `as=Table;g=meta.k8s.io;v=...`
    Table(MetaVersion),
    /// `as=PartialObjectMetadata;g=meta.k8s.io;v=...`
    Partial(MetaVersion),
    /// `as=PartialObjectMetadataList;g=meta.k8s.io;v=...`
    PartialList(MetaVersion),
    /// `as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2`
    DiscoveryV2,
}

/// Which transformations an endpoint allows (the apiserver's `EndpointRestrictions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// NodeMetrics / PodMetrics: Table and PartialObjectMetadata conversions.
    Resource,
    /// Legacy discovery and the like: no conversion.
    Plain,
    /// `/apis`: only the aggregated discovery conversion (the caller falls back to `Plain`).
    AggregatedDiscovery,
}

/// The message of the 406 Status.
pub const NOT_ACCEPTABLE: &str = "only the following media types are accepted: application/json";

/// The first acceptable media range's target, or `None` (406). An absent or empty header
/// means JSON.
pub fn negotiate(header: Option<&str>, endpoint: Endpoint) -> Option<Target> {
    let header = match header {
        None | Some("") => {
            return (endpoint != Endpoint::AggregatedDiscovery).then_some(Target::Json);
        }
        Some(h) => h,
    };
    for range in parse(header) {
        let serializer_matches = (range.typ == "application"
            && (range.subtype == "json" || range.subtype == "*"))
            || (range.typ == "*" && range.subtype == "*");
        if !serializer_matches {
            continue;
        }
        if let Some(target) = accept_options(&range, endpoint) {
            return Some(target);
        }
    }
    None
}

/// `acceptMediaTypeOptions` + `AllowsMediaTypeTransform` for the JSON serializer.
fn accept_options(range: &MediaRange<'_>, endpoint: Endpoint) -> Option<Target> {
    if let Some(stream) = range.param("stream")
        && !stream.is_empty()
        && stream != "watch"
    {
        return None;
    }
    let kind = range.param("as");
    let group = range.param("g");
    let version = range.param("v");
    let convert =
        kind.is_some() || group.is_some() || version.is_some() || range.param("sv").is_some();
    if !convert {
        return (endpoint != Endpoint::AggregatedDiscovery).then_some(Target::Json);
    }
    let (kind, group, version) = (
        kind.unwrap_or(""),
        group.unwrap_or(""),
        version.unwrap_or(""),
    );
    match endpoint {
        Endpoint::Plain => None,
        Endpoint::AggregatedDiscovery => {
            (kind == "APIGroupDiscoveryList" && group == "apidiscovery.k8s.io" && version == "v2")
                .then_some(Target::DiscoveryV2)
        }
        Endpoint::Resource => {
            if group != "meta.k8s.io" {
                return None;
            }
            let v = match version {
                "v1" => MetaVersion::V1,
                "v1beta1" => MetaVersion::V1beta1,
                _ => return None,
            };
            match kind {
                "Table" => Some(Target::Table(v)),
                "PartialObjectMetadata" => Some(Target::Partial(v)),
                "PartialObjectMetadataList" => Some(Target::PartialList(v)),
                _ => None,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    #[test]
    fn json_for_wildcards_and_plain_json() {
        for h in [
            "*/*",
            "*",
            "application/*",
            "application/json",
            "application/json; charset=utf-8",
            "application/vnd.kubernetes.protobuf, */*",
            "application/vnd.kubernetes.protobuf,application/json",
            "text/html;q=0.9, application/json;q=0.1",
        ] {
            assert_eq!(
                negotiate(Some(h), Endpoint::Resource),
                Some(Target::Json),
                "{h}"
            );
        }
        assert_eq!(negotiate(None, Endpoint::Resource), Some(Target::Json));
        assert_eq!(negotiate(Some(""), Endpoint::Plain), Some(Target::Json));
    }

    #[test]
    fn nothing_acceptable() {
        for h in [
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
            "text/plain",
            " ",
            "application/json;as=Table;g=meta.k8s.io;v=v2",
            "application/json;as=Table;g=example.com;v=v1",
            "application/json;as=Table",
            "application/json;sv=v1",
            "application/json;stream=other",
        ] {
            assert_eq!(negotiate(Some(h), Endpoint::Resource), None, "{h}");
        }
    }

    #[test]
    fn tables() {
        assert_eq!(
            negotiate(Some(KUBECTL_GET), Endpoint::Resource),
            Some(Target::Table(MetaVersion::V1))
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
                Endpoint::Resource
            ),
            Some(Target::Table(MetaVersion::V1beta1))
        );
        // Higher q wins regardless of order.
        assert_eq!(
            negotiate(
                Some("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io"),
                Endpoint::Resource
            ),
            Some(Target::Table(MetaVersion::V1))
        );
        // Discovery documents have no Table: the fallback applies.
        assert_eq!(
            negotiate(Some(KUBECTL_GET), Endpoint::Plain),
            Some(Target::Json)
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
                Endpoint::Resource
            ),
            Some(Target::PartialList(MetaVersion::V1))
        );
    }

    #[test]
    fn aggregated_discovery() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert_eq!(
            negotiate(Some(v2), Endpoint::AggregatedDiscovery),
            Some(Target::DiscoveryV2)
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;v=v2;as=APIGroupDiscoveryList;g=apidiscovery.k8s.io,application/json"
                ),
                Endpoint::AggregatedDiscovery
            ),
            Some(Target::DiscoveryV2)
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
                ),
                Endpoint::AggregatedDiscovery
            ),
            None
        );
        assert_eq!(
            negotiate(Some("application/json"), Endpoint::AggregatedDiscovery),
            None
        );
    }
}
