//! The availability controller (kube-aggregator's `remote_available_controller.go`): for
//! every APIService, resolve its backends, probe `/apis/<group>/<version>` as
//! `system:kube-aggregator` five times in parallel, set the `Available` condition, and fetch
//! the version's resources for aggregated discovery (aggregation-contract.md §1.6, §2.4).

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::endpoints::Endpoints;
use super::{Aggregator, ApiService, Availability, Backend, HttpClient, proxy};
use crate::controlplane::discovery;

const PROBE_ATTEMPTS: usize = 5;
const MAX_DISCOVERY_BYTES: usize = 8 << 20;

impl Aggregator {
    /// The availability controller: checks every APIService, then waits `check_interval`
    /// (or a doubling retry delay after a failure, or a wake-up).
    pub(super) async fn run_checks(&self, shutdown: &CancellationToken) {
        let mut retry = self.inner.config.retry_initial;
        loop {
            let all_passed = tokio::select! {
                () = shutdown.cancelled() => return,
                passed = self.check_all() => passed,
            };
            let delay = if all_passed {
                retry = self.inner.config.retry_initial;
                self.inner.config.check_interval
            } else {
                let d = retry;
                retry = (retry * 2).min(self.inner.config.check_interval);
                d
            };
            let deadline = tokio::time::Instant::now() + delay;
            while !self.inner.dirty.load(Ordering::SeqCst) {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep_until(deadline) => break,
                    () = self.inner.wake.notified() => {}
                }
            }
        }
    }

    async fn check_all(&self) -> bool {
        self.inner.dirty.store(false, Ordering::SeqCst);
        let snapshot: Vec<(ApiService, HttpClient, Result<Vec<String>, Availability>)> = {
            let entries = self.inner.entries.read();
            let mut endpoints = self.inner.endpoints.lock();
            entries
                .values()
                .map(|e| {
                    let targets = resolve(&e.spec, &mut endpoints);
                    (e.spec.clone(), e.client.clone(), targets)
                })
                .collect()
        };
        let results =
            futures::future::join_all(snapshot.iter().map(|(spec, client, targets)| async move {
                match targets {
                    Ok(urls) => self.check(spec, client, urls).await,
                    Err(status) => (status.clone(), None),
                }
            }))
            .await;
        let mut all_passed = true;
        {
            let mut entries = self.inner.entries.write();
            for ((spec, _, _), (status, discovered)) in snapshot.iter().zip(results) {
                all_passed &= status.available && discovered.is_some();
                if let Some(e) = entries.get_mut(&spec.name) {
                    e.status = status;
                    e.discovery_ok = discovered.is_some();
                    if let Some(resources) = discovered {
                        e.resources = resources;
                    }
                }
            }
        }
        self.inner.changed.send_modify(|g| *g += 1);
        all_passed
    }

    /// One availability check (5 parallel probes of `/apis/<g>/<v>`, spread over `backends`)
    /// and one discovery fetch from a backend that passed.
    ///
    /// kube-aggregator resolves one random ready endpoint per check; spreading the attempts
    /// over the ready endpoints instead means one bad endpoint cannot fail the check by
    /// chance while another one is ready.
    async fn check(
        &self,
        spec: &ApiService,
        client: &HttpClient,
        backends: &[String],
    ) -> (Availability, Option<Vec<Value>>) {
        let timeout = self.inner.config.probe_timeout;
        let masters = ["system:masters"];
        let urls: Vec<(&str, String)> = backends
            .iter()
            .cycle()
            .take(PROBE_ATTEMPTS.max(backends.len()))
            .map(|b| {
                (
                    b.as_str(),
                    format!("{b}/apis/{}/{}", spec.group, spec.version),
                )
            })
            .collect();
        let attempts = urls.iter().map(|(_, url)| {
            get(
                client,
                url,
                "application/json",
                (PROBE_USER, &masters),
                timeout,
            )
        });
        let results = futures::future::join_all(attempts).await;
        let mut last_error = String::new();
        let mut passed: Option<&str> = None;
        for ((backend, url), r) in urls.iter().zip(results) {
            match r {
                Ok((status, _, _)) if (200..400).contains(&status.as_u16()) => {
                    passed = passed.or(Some(backend));
                }
                Ok((status, _, _)) => {
                    last_error = format!(
                        "failing or missing response from {url}: bad status from {url}: {}",
                        status.as_u16()
                    );
                }
                Err(e) => last_error = format!("failing or missing response from {url}: {e}"),
            }
        }
        let status = if passed.is_some() {
            Availability {
                available: true,
                reason: "Passed".to_owned(),
                message: "all checks passed".to_owned(),
            }
        } else {
            Availability {
                available: false,
                reason: "FailedDiscoveryCheck".to_owned(),
                message: last_error,
            }
        };
        let discovered = match passed {
            Some(backend) => self.discover(spec, client, backend).await,
            None => None,
        };
        (status, discovered)
    }

    /// The resources of one group version, from the backend's aggregated discovery (`/apis`,
    /// v2) or, when it answers anything but v2 or 503, its legacy `/apis/<g>/<v>`.
    async fn discover(
        &self,
        spec: &ApiService,
        client: &HttpClient,
        backend: &str,
    ) -> Option<Vec<Value>> {
        let timeout = self.inner.config.probe_timeout;
        let url = format!("{backend}/apis");
        let (status, headers, body) = get(
            client,
            &url,
            discovery::V2_CONTENT_TYPE,
            (PROBE_USER, &["system:masters"]),
            timeout,
        )
        .await
        .ok()?;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return None;
        }
        let v2 = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(discovery::accepts_v2);
        if status == StatusCode::OK && v2 {
            let doc: Value = serde_json::from_slice(&body).ok()?;
            let group = doc.get("items")?.as_array()?.iter().find(|g| {
                g.pointer("/metadata/name").and_then(Value::as_str) == Some(spec.group.as_str())
            })?;
            let version = group.get("versions")?.as_array()?.iter().find(|v| {
                v.get("version").and_then(Value::as_str) == Some(spec.version.as_str())
            })?;
            return Some(version.get("resources")?.as_array()?.clone());
        }
        let url = format!("{backend}/apis/{}/{}", spec.group, spec.version);
        let (status, _, body) = get(client, &url, "application/json", (PROBE_USER, &[]), timeout)
            .await
            .ok()?;
        if status != StatusCode::OK {
            return None;
        }
        let list: Value = serde_json::from_slice(&body).ok()?;
        Some(discovery::resources_from_list(&list))
    }
}

/// The backends an availability check probes: the fixed URL, or the ready endpoints of the
/// Service (rotated, so checks spread over them); the failed condition when there is none
/// (kube-aggregator's `EndpointsNotFound` and `MissingEndpoints`).
fn resolve(spec: &ApiService, endpoints: &mut Endpoints) -> Result<Vec<String>, Availability> {
    let url = match &spec.backend {
        Backend::Url(url) => return Ok(vec![url.clone()]),
        Backend::Endpoints => endpoints.ready_rotated(&spec.service),
    };
    if !url.is_empty() {
        return Ok(url);
    }
    let (ns, name) = spec
        .service
        .split_once('/')
        .unwrap_or(("", spec.service.as_str()));
    Err(if endpoints.has_any(&spec.service) {
        Availability {
            available: false,
            reason: "MissingEndpoints".to_owned(),
            message: format!(
                "endpointslices for service/{name} in \"{ns}\" have no addresses with port name \"https\""
            ),
        }
    } else {
        Availability {
            available: false,
            reason: "EndpointsNotFound".to_owned(),
            message: format!("cannot find endpointslices for service/{name} in \"{ns}\""),
        }
    })
}

/// Who the availability checks and the discovery fetches are.
const PROBE_USER: &str = "system:kube-aggregator";

/// One GET as `(user, groups)` (the probes' `system:kube-aggregator`, the OpenAPI
/// downloader's `system:aggregator`); the body is read in full (bounded).
pub(super) async fn get(
    client: &HttpClient,
    url: &str,
    accept: &str,
    (user, groups): (&str, &[&str]),
    timeout: Duration,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let mut builder = Request::get(url)
        .header(http::header::ACCEPT, accept)
        .header("X-Remote-User", user);
    for g in groups {
        builder = builder.header(
            "X-Remote-Group",
            HeaderValue::from_str(g).map_err(|e| e.to_string())?,
        );
    }
    let req = builder
        .body(
            Empty::<Bytes>::new()
                .map_err(|never| match never {})
                .boxed(),
        )
        .map_err(|e| e.to_string())?;
    let fetch = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| proxy::error_chain(&e))?;
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, MAX_DISCOVERY_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    match tokio::time::timeout(timeout, fetch).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out waiting for {url}")),
    }
}
