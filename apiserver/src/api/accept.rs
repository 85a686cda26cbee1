//! `Accept` negotiation as the generic apiserver does it (`goautoneg.ParseAccept` +
//! `negotiation.NegotiateMediaTypeOptions`) over our serializers, in the order of
//! k8s.io/apimachinery's `CodecFactory`: JSON (the default for `*/*`), YAML, protobuf.
//! Discovery documents have JSON and YAML.

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

/// Whether an OpenAPI document may be answered in JSON, as kube-openapi's handlers decide it:
/// an absent or empty header is `*/*`; any range whose type and subtype match
/// `application/json` (each exactly or `*`) will do, whatever its parameters and `q`. (They
/// also serve the documents in protobuf, which no client of an aggregated server asks for:
/// the aggregator fetches them with no `Accept`, kubectl in JSON.)
pub fn openapi_json(header: Option<&str>) -> bool {
    match header {
        None | Some("") => true,
        Some(header) => parse(header).iter().any(|range| {
            matches!(range.typ, "application" | "*") && matches!(range.subtype, "json" | "*")
        }),
    }
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

/// A serializer: the media type of the response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/yaml`: the JSON turned into YAML as sigs.k8s.io/yaml does ([`super::yaml`]).
    Yaml,
    /// `application/vnd.kubernetes.protobuf` (the `k8s\0` + `runtime.Unknown` envelope).
    Protobuf,
}

impl Format {
    /// The response `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
            Format::Protobuf => PROTOBUF,
        }
    }

    /// The media subtype a range must name (or `*`) to select this serializer.
    fn subtype(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Protobuf => "vnd.kubernetes.protobuf",
        }
    }
}

/// The protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// What the response will be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The object itself, no conversion (`application/json` or protobuf).
    Object,
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

/// The message of the 406 Status on a discovery document.
pub const NOT_ACCEPTABLE: &str =
    "only the following media types are accepted: application/json, application/yaml";

/// The message of the 406 Status on NodeMetrics / PodMetrics.
pub const NOT_ACCEPTABLE_RESOURCE: &str = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// The serializer of the aggregated discovery document.
const JSON_ONLY: &[Format] = &[Format::Json];
/// The serializers of the other discovery documents.
const DOCUMENT: &[Format] = &[Format::Json, Format::Yaml];
/// The serializers of NodeMetrics / PodMetrics and of Status, in the `CodecFactory`'s order.
const ALL: &[Format] = &[Format::Json, Format::Yaml, Format::Protobuf];

/// The first acceptable media range's target for a JSON-only document, or `None` (406).
/// An absent or empty header means JSON.
pub fn negotiate(header: Option<&str>, endpoint: Endpoint) -> Option<Target> {
    negotiate_in(header, endpoint, JSON_ONLY).map(|(_, target)| target)
}

/// The serializer of a discovery document (no conversion), or `None` (406).
pub fn negotiate_document(header: Option<&str>) -> Option<Format> {
    negotiate_in(header, Endpoint::Plain, DOCUMENT).map(|(format, _)| format)
}

/// The serializer and target of a NodeMetrics / PodMetrics response, or `None` (406).
pub fn negotiate_resource(header: Option<&str>) -> Option<(Format, Target)> {
    negotiate_in(header, Endpoint::Resource, ALL)
}

/// The serializer of an error `Status` (`responsewriters.ErrorNegotiated`: no conversion
/// allowed; when nothing is acceptable the Status is still written, as JSON).
pub fn negotiate_status(header: Option<&str>) -> Format {
    negotiate_in(header, Endpoint::Plain, ALL).map_or(Format::Json, |(format, _)| format)
}

/// Whether the range a JSON answer is negotiated from asks for it indented (`pretty=1`,
/// `acceptMediaTypeOptions`): the first range by preference that JSON satisfies.
pub fn pretty(header: Option<&str>) -> bool {
    header.is_some_and(|h| {
        h.contains("pretty")
            && parse(h)
                .iter()
                .find(|r| {
                    (r.typ == "application" && matches!(r.subtype, "json" | "*"))
                        || (r.typ == "*" && r.subtype == "*")
                })
                .is_some_and(|r| r.param("pretty") == Some("1"))
    })
}

/// `NegotiateMediaTypeOptions`: ranges by preference, and for each the serializers in
/// order; the first whose media type the range matches and whose options are allowed wins.
fn negotiate_in(
    header: Option<&str>,
    endpoint: Endpoint,
    formats: &[Format],
) -> Option<(Format, Target)> {
    let header = match header {
        None | Some("") => {
            return (endpoint != Endpoint::AggregatedDiscovery)
                .then_some((Format::Json, Target::Object));
        }
        Some(h) => h,
    };
    for range in parse(header) {
        for &format in formats {
            let serializer_matches = (range.typ == "application"
                && (range.subtype == format.subtype() || range.subtype == "*"))
                || (range.typ == "*" && range.subtype == "*");
            if !serializer_matches {
                continue;
            }
            if let Some(target) = accept_options(&range, endpoint, format) {
                return Some((format, target));
            }
        }
    }
    None
}

/// `acceptMediaTypeOptions` + `AllowsMediaTypeTransform` (`endpoints/handlers/rest.go`):
/// Table only as JSON or YAML, PartialObjectMetadata in any serializer.
fn accept_options(range: &MediaRange<'_>, endpoint: Endpoint, format: Format) -> Option<Target> {
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
        return (endpoint != Endpoint::AggregatedDiscovery).then_some(Target::Object);
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
                "Table" => (format != Format::Protobuf).then_some(Target::Table(v)),
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
                Some(Target::Object),
                "{h}"
            );
        }
        assert_eq!(negotiate(None, Endpoint::Resource), Some(Target::Object));
        assert_eq!(negotiate(Some(""), Endpoint::Plain), Some(Target::Object));
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
            Some(Target::Object)
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

    #[test]
    fn protobuf_for_resources() {
        let pb = Some((Format::Protobuf, Target::Object));
        let json = Some((Format::Json, Target::Object));
        for (h, want) in [
            ("application/vnd.kubernetes.protobuf, */*", pb),
            ("application/vnd.kubernetes.protobuf", pb),
            ("application/vnd.kubernetes.protobuf,application/json", pb),
            (
                "application/json;q=0.5, application/vnd.kubernetes.protobuf",
                pb,
            ),
            ("*/*", json),
            ("application/*", json),
            (
                "application/json, application/vnd.kubernetes.protobuf",
                json,
            ),
            ("text/html, application/vnd.kubernetes.protobuf;q=0.1", pb),
            (
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io",
                Some((Format::Json, Target::Table(MetaVersion::V1))),
            ),
            (
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                Some((Format::Protobuf, Target::PartialList(MetaVersion::V1))),
            ),
            (
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
                None,
            ),
            ("application/vnd.kubernetes.protobuf;stream=other", None),
            ("application/yaml", Some((Format::Yaml, Target::Object))),
            (
                "application/yaml, application/json",
                Some((Format::Yaml, Target::Object)),
            ),
            ("application/*", json),
            (
                "application/yaml;as=Table;v=v1;g=meta.k8s.io",
                Some((Format::Yaml, Target::Table(MetaVersion::V1))),
            ),
            (
                "application/yaml;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io",
                Some((Format::Yaml, Target::PartialList(MetaVersion::V1beta1))),
            ),
            ("text/yaml", None),
            ("application/x-yaml", None),
        ] {
            assert_eq!(negotiate_resource(Some(h)), want, "{h}");
        }
        assert_eq!(negotiate_resource(None), json);
    }

    #[test]
    fn status_follows_the_preferred_serializer_without_conversions() {
        for (h, want) in [
            ("application/vnd.kubernetes.protobuf, */*", Format::Protobuf),
            ("application/vnd.kubernetes.protobuf", Format::Protobuf),
            (KUBECTL_GET, Format::Json),
            (
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/vnd.kubernetes.protobuf",
                Format::Protobuf,
            ),
            (
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
                Format::Json,
            ),
            ("application/yaml", Format::Yaml),
            ("application/yaml;as=Table;v=v1;g=meta.k8s.io", Format::Json),
            ("text/yaml", Format::Json),
            ("*/*", Format::Json),
            ("", Format::Json),
        ] {
            assert_eq!(negotiate_status(Some(h)), want, "{h}");
        }
        assert_eq!(negotiate_status(None), Format::Json);
    }
}
