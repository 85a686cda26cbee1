//! The `kube-system/extension-apiserver-authentication` ConfigMap kube-apiserver maintains:
//! its keys (k8s.io/apiserver `pkg/server/options/authentication.go`,
//! `headerrequest/requestheader_controller.go`) and the watch that keeps the trust current.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use tokio_util::sync::CancellationToken;

use super::Authenticator;
use super::x509::CaBundle;

/// Namespace of the ConfigMap.
pub const NAMESPACE: &str = "kube-system";
/// Name of the ConfigMap.
pub const NAME: &str = "extension-apiserver-authentication";

const CLIENT_CA: &str = "client-ca-file";
const RH_CA: &str = "requestheader-client-ca-file";
const RH_ALLOWED_NAMES: &str = "requestheader-allowed-names";
const RH_USERNAME: &str = "requestheader-username-headers";
const RH_UID: &str = "requestheader-uid-headers";
const RH_GROUP: &str = "requestheader-group-headers";
const RH_EXTRA: &str = "requestheader-extra-headers-prefix";

/// The request-header keys, as written (header lists not yet merged with the flags).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestHeaderKeys {
    pub(crate) ca: Option<CaBundle>,
    pub(crate) allowed_names: Vec<String>,
    pub(crate) username: Vec<String>,
    pub(crate) uid: Vec<String>,
    pub(crate) group: Vec<String>,
    pub(crate) extra_prefixes: Vec<String>,
}

/// What the ConfigMap says; each half fails on its own, as upstream runs one controller for
/// the client CA and one for the request-header settings.
#[derive(Debug)]
pub(crate) struct Trust {
    /// `client-ca-file`; `Ok(None)` when missing or empty.
    pub(crate) client_ca: Result<Option<CaBundle>, String>,
    /// The `requestheader-*` keys.
    pub(crate) request_header: Result<RequestHeaderKeys, String>,
}

/// Parses the ConfigMap's `data`.
pub(crate) fn parse(data: &BTreeMap<String, String>) -> Trust {
    Trust {
        client_ca: bundle(data, CLIENT_CA),
        request_header: request_header(data),
    }
}

fn request_header(data: &BTreeMap<String, String>) -> Result<RequestHeaderKeys, String> {
    Ok(RequestHeaderKeys {
        ca: bundle(data, RH_CA)?,
        allowed_names: strings(data, RH_ALLOWED_NAMES)?,
        username: strings(data, RH_USERNAME)?,
        uid: strings(data, RH_UID)?,
        group: strings(data, RH_GROUP)?,
        extra_prefixes: strings(data, RH_EXTRA)?,
    })
}

fn bundle(data: &BTreeMap<String, String>, key: &str) -> Result<Option<CaBundle>, String> {
    match data.get(key) {
        Some(pem) if !pem.trim().is_empty() => {
            CaBundle::from_pem(pem.as_bytes(), &format!("configmap key {key}")).map(Some)
        }
        _ => Ok(None),
    }
}

/// `deserializeStrings`: a JSON array of strings; a missing key, `""`, `null` and `[]` are
/// all empty.
pub(crate) fn strings(data: &BTreeMap<String, String>, key: &str) -> Result<Vec<String>, String> {
    match data.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(Vec::new()),
        Some(json) => serde_json::from_str::<Option<Vec<String>>>(json)
            .map(Option::unwrap_or_default)
            .map_err(|e| format!("configmap key {key}: not a JSON array of strings: {e}")),
    }
}

/// Reads the ConfigMap once. `Ok(None)` when it does not exist (upstream goes on without it).
pub(crate) async fn get(
    client: kube::Client,
) -> Result<Option<BTreeMap<String, String>>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    match api.get_opt(NAME).await? {
        Some(cm) => Ok(Some(cm.data.unwrap_or_default())),
        None => Ok(None),
    }
}

/// Watches the ConfigMap (one object, by field selector) and applies every version of it to
/// `auth` until `shutdown`. A deleted ConfigMap keeps the last trust, as upstream.
pub(crate) async fn watch(auth: &Authenticator, client: kube::Client, shutdown: CancellationToken) {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let mut events = std::pin::pin!(watch_stream(api, config).default_backoff());
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Ok(Event::Apply(cm) | Event::InitApply(cm))) => {
                let data = cm.data.unwrap_or_default();
                if let Err(error) = auth.update_from_configmap(&data) {
                    tracing::warn!(%error, configmap = NAME, "keeping the previous trust");
                } else {
                    tracing::info!(configmap = NAME, "authentication configuration updated");
                }
            }
            Some(Ok(Event::Delete(_) | Event::Init | Event::InitDone)) => {}
            Some(Err(error)) => {
                tracing::warn!(%error, configmap = NAME, "watching the authentication configmap");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn null_empty_array_and_missing_keys_are_all_empty_lists() {
        let d = data(&[
            (RH_ALLOWED_NAMES, "null"),
            (RH_USERNAME, "[]"),
            (RH_GROUP, ""),
        ]);
        assert_eq!(strings(&d, RH_ALLOWED_NAMES), Ok(vec![]));
        assert_eq!(strings(&d, RH_USERNAME), Ok(vec![]));
        assert_eq!(strings(&d, RH_GROUP), Ok(vec![]));
        assert_eq!(strings(&d, RH_EXTRA), Ok(vec![]));
    }

    #[test]
    fn json_arrays_are_read_in_order() {
        let d = data(&[(RH_ALLOWED_NAMES, r#"["front-proxy-client","aggregator"]"#)]);
        assert_eq!(
            strings(&d, RH_ALLOWED_NAMES),
            Ok(vec![
                "front-proxy-client".to_owned(),
                "aggregator".to_owned()
            ])
        );
    }

    #[test]
    fn a_non_array_is_an_error_for_the_request_header_half_only() {
        let ca = tls::issue::Ca::new("client-ca").expect("a CA");
        let d = data(&[(CLIENT_CA, ca.cert_pem()), (RH_USERNAME, "X-Remote-User")]);
        let trust = parse(&d);
        assert!(trust.request_header.is_err());
        assert!(matches!(trust.client_ca, Ok(Some(_))));
    }

    #[test]
    fn missing_ca_keys_mean_no_bundle_and_garbage_pem_is_an_error() {
        let trust = parse(&data(&[]));
        assert!(matches!(trust.client_ca, Ok(None)));
        assert!(matches!(trust.request_header, Ok(ref rh) if rh.ca.is_none()));
        let trust = parse(&data(&[(CLIENT_CA, "not pem")]));
        assert!(trust.client_ca.is_err());
    }
}
