//! The endpoints of Services: the backend pods behind an APIService's Service, each ready or
//! not by a readiness probe run the way the kubelet runs an `httpGet` probe, and the choice of
//! one ready endpoint per proxied request (kube-apiserver with `--enable-aggregator-routing`
//! resolves a Service to one of its ready endpoints for every request).
//!
//! An endpoint is added not ready (a new pod) and becomes ready once a probe passes
//! (`successThreshold: 1`); a ready endpoint turns not ready after `failure_threshold`
//! probes in a row fail. Removing an endpoint (a pod being deleted) takes it out of routing at
//! once, which is how Kubernetes stops traffic to a terminating pod.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A readiness probe, as a pod spec's `readinessProbe.httpGet` with `scheme: HTTPS` (the
/// kubelet neither verifies the serving certificate nor presents a client certificate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadinessProbe {
    /// `httpGet.path`.
    pub path: String,
    /// `periodSeconds`.
    pub period: Duration,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `failureThreshold`: failures in a row that make a ready endpoint not ready.
    pub failure_threshold: u32,
}

impl Default for ReadinessProbe {
    /// `GET /readyz` every second with a one-second timeout, not ready after three failures
    /// (metrics-server's manifest probes every 10 s; the simulated cluster is faster).
    fn default() -> Self {
        ReadinessProbe {
            path: "/readyz".to_owned(),
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            failure_threshold: 3,
        }
    }
}

/// One endpoint as [`super::Aggregator::endpoints`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointStatus {
    /// `https://host:port` of the pod.
    pub url: String,
    /// `conditions.ready`.
    pub ready: bool,
}

/// Identifies one endpoint for its prober, so that a prober of a removed endpoint never
/// updates a later endpoint at the same URL.
pub(super) type EndpointId = u64;

struct Endpoint {
    id: EndpointId,
    url: String,
    ready: bool,
    /// Probe failures in a row.
    failures: u32,
    /// Whether a prober runs for it.
    probed: bool,
    /// Ends its prober when the endpoint is removed.
    stop: CancellationToken,
}

#[derive(Default)]
struct Service {
    endpoints: Vec<Endpoint>,
    /// Round-robin position over the ready endpoints.
    next: usize,
}

/// Every Service's endpoints.
#[derive(Default)]
pub(super) struct Endpoints {
    services: BTreeMap<String, Service>,
    next_id: EndpointId,
}

/// A prober to start: the endpoint's id, URL and stop token.
pub(super) struct Unprobed {
    pub(super) id: EndpointId,
    pub(super) url: String,
    pub(super) stop: CancellationToken,
}

impl Endpoints {
    /// Adds `url` to `service`, not ready. False when it is there already.
    pub(super) fn add(&mut self, service: &str, url: &str) -> bool {
        let svc = self.services.entry(service.to_owned()).or_default();
        if svc.endpoints.iter().any(|e| e.url == url) {
            return false;
        }
        self.next_id += 1;
        svc.endpoints.push(Endpoint {
            id: self.next_id,
            url: url.to_owned(),
            ready: false,
            failures: 0,
            probed: false,
            stop: CancellationToken::new(),
        });
        true
    }

    /// Removes `url` from `service` and stops its prober; whether it was ready, or `None`
    /// when unknown.
    pub(super) fn remove(&mut self, service: &str, url: &str) -> Option<bool> {
        let svc = self.services.get_mut(service)?;
        let i = svc.endpoints.iter().position(|e| e.url == url)?;
        let e = svc.endpoints.remove(i);
        e.stop.cancel();
        Some(e.ready)
    }

    /// The endpoints of `service`, in the order they were added.
    pub(super) fn list(&self, service: &str) -> Vec<EndpointStatus> {
        self.services.get(service).map_or_else(Vec::new, |s| {
            s.endpoints
                .iter()
                .map(|e| EndpointStatus {
                    url: e.url.clone(),
                    ready: e.ready,
                })
                .collect()
        })
    }

    /// The URLs of the ready endpoints of `service`, starting at the round-robin position
    /// (which then moves on by one).
    pub(super) fn ready_rotated(&mut self, service: &str) -> Vec<String> {
        let Some(svc) = self.services.get_mut(service) else {
            return Vec::new();
        };
        let ready: Vec<&Endpoint> = svc.endpoints.iter().filter(|e| e.ready).collect();
        if ready.is_empty() {
            return Vec::new();
        }
        let start = svc.next % ready.len();
        let urls = ready[start..]
            .iter()
            .chain(&ready[..start])
            .map(|e| e.url.clone())
            .collect();
        svc.next = svc.next.wrapping_add(1);
        urls
    }

    /// One ready endpoint of `service` for a request, round robin.
    pub(super) fn pick(&mut self, service: &str) -> Option<String> {
        self.ready_rotated(service).into_iter().next()
    }

    /// Whether `service` has any endpoint, ready or not.
    pub(super) fn has_any(&self, service: &str) -> bool {
        self.services
            .get(service)
            .is_some_and(|s| !s.endpoints.is_empty())
    }

    /// Endpoints without a prober yet; they are marked as probed.
    pub(super) fn take_unprobed(&mut self) -> Vec<Unprobed> {
        self.services
            .values_mut()
            .flat_map(|s| s.endpoints.iter_mut())
            .filter(|e| !e.probed)
            .map(|e| {
                e.probed = true;
                Unprobed {
                    id: e.id,
                    url: e.url.clone(),
                    stop: e.stop.clone(),
                }
            })
            .collect()
    }

    /// Records one probe result of endpoint `id`; true when its readiness changed.
    pub(super) fn record(&mut self, id: EndpointId, passed: bool, failure_threshold: u32) -> bool {
        let Some(e) = self
            .services
            .values_mut()
            .flat_map(|s| s.endpoints.iter_mut())
            .find(|e| e.id == id)
        else {
            return false;
        };
        if passed {
            e.failures = 0;
            let changed = !e.ready;
            e.ready = true;
            changed
        } else {
            e.failures = e.failures.saturating_add(1);
            let changed = e.ready && e.failures >= failure_threshold.max(1);
            if changed {
                e.ready = false;
            }
            changed
        }
    }
}

impl super::Aggregator {
    /// Starts one prober per endpoint (the kubelet's probe worker of each pod) and owns
    /// them; a prober ends when its endpoint is removed or on `shutdown`.
    pub(super) async fn run_probes(&self, shutdown: &CancellationToken) {
        let client = match probe_client() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "readiness probe client; endpoints stay not ready");
                return;
            }
        };
        let mut probers = JoinSet::new();
        loop {
            let unprobed = self.inner.endpoints.lock().take_unprobed();
            for u in unprobed {
                let this = self.clone();
                let client = client.clone();
                let shutdown = shutdown.clone();
                probers.spawn(async move {
                    tokio::select! {
                        () = u.stop.cancelled() => {}
                        () = shutdown.cancelled() => {}
                        () = this.probe_forever(&client, u.id, &u.url) => {}
                    }
                });
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.inner.probe_wake.notified() => {}
                Some(_) = probers.join_next(), if !probers.is_empty() => {}
            }
        }
        while probers.join_next().await.is_some() {}
    }

    /// Probes one endpoint every period, from now on (`initialDelaySeconds: 0`).
    async fn probe_forever(&self, client: &ProbeClient, id: EndpointId, url: &str) {
        let probe = &self.inner.config.readiness;
        let mut ticker = tokio::time::interval(probe.period.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let passed = probe_once(client, url, probe).await;
            let changed = self
                .inner
                .endpoints
                .lock()
                .record(id, passed, probe.failure_threshold);
            if changed {
                tracing::debug!(%url, ready = passed, "endpoint readiness changed");
                self.endpoints_changed();
            }
        }
    }
}

/// The kubelet's probe client: HTTPS without verification or client certificate, and no
/// kept-alive connections (the kubelet's HTTP prober disables keep-alive).
pub(super) type ProbeClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A [`ProbeClient`].
pub(super) fn probe_client() -> Result<ProbeClient, tls::Error> {
    let connector = crate::https::connector(&tls::client::Verify::Insecure, None)?;
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector))
}

/// The kubelet reads at most this much of a probe's body.
const MAX_PROBE_BODY_BYTES: usize = 10 << 10;

/// One probe of `url` + `probe.path`: passed when a status in [200, 400) arrives within the
/// timeout (the kubelet's `httpprobe`).
pub(super) async fn probe_once(client: &ProbeClient, url: &str, probe: &ReadinessProbe) -> bool {
    let Ok(req) = Request::get(format!("{url}{}", probe.path))
        .header(http::header::USER_AGENT, "kube-probe/1.37")
        .header(http::header::ACCEPT, "*/*")
        .body(Empty::new())
    else {
        return false;
    };
    let fetch = async {
        let resp = client.request(req).await.ok()?;
        let status = resp.status();
        // The kubelet reads (a bounded part of) the body; a body cut short is still a
        // response.
        let _ = Limited::new(resp.into_body(), MAX_PROBE_BODY_BYTES)
            .collect()
            .await;
        Some(status)
    };
    matches!(
        tokio::time::timeout(probe.timeout, fetch).await,
        Ok(Some(status)) if (200..400).contains(&status.as_u16())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_ready_after_one_pass_and_not_ready_after_the_threshold() {
        let mut e = Endpoints::default();
        assert!(e.add("ns/svc", "https://a"));
        assert!(!e.add("ns/svc", "https://a"), "added once");
        let id = e.take_unprobed()[0].id;
        assert!(e.take_unprobed().is_empty(), "one prober per endpoint");
        assert_eq!(e.pick("ns/svc"), None, "added not ready");
        assert!(e.record(id, true, 3));
        assert_eq!(e.pick("ns/svc").as_deref(), Some("https://a"));
        assert!(!e.record(id, false, 3));
        assert!(!e.record(id, false, 3));
        assert!(!e.record(id, true, 3), "a pass resets the failures");
        assert!(!e.record(id, false, 3));
        assert!(!e.record(id, false, 3));
        assert!(e.record(id, false, 3), "three failures in a row");
        assert_eq!(e.pick("ns/svc"), None);
        assert!(e.has_any("ns/svc"));
    }

    #[test]
    fn requests_rotate_over_ready_endpoints_and_a_removed_one_gets_none() {
        let mut e = Endpoints::default();
        for url in ["https://a", "https://b", "https://c"] {
            e.add("ns/svc", url);
        }
        let ids: Vec<EndpointId> = e.take_unprobed().iter().map(|u| u.id).collect();
        e.record(ids[0], true, 3);
        e.record(ids[2], true, 3);
        let picks: Vec<String> = (0..4).filter_map(|_| e.pick("ns/svc")).collect();
        assert_eq!(picks, ["https://a", "https://c", "https://a", "https://c"]);
        assert_eq!(e.remove("ns/svc", "https://a"), Some(true));
        assert_eq!(e.remove("ns/svc", "https://a"), None);
        assert!((0..3).all(|_| e.pick("ns/svc").as_deref() == Some("https://c")));
        assert!(
            !e.record(ids[0], true, 3),
            "a removed endpoint's prober changes nothing"
        );
        assert_eq!(
            e.list("ns/svc"),
            [
                EndpointStatus {
                    url: "https://b".to_owned(),
                    ready: false
                },
                EndpointStatus {
                    url: "https://c".to_owned(),
                    ready: true
                },
            ]
        );
    }
}
