//! Client configurations for the Kubernetes API: a kubeconfig file or the in-cluster
//! configuration (metrics-server's `restConfig`), and which one each delegated review uses.

use std::path::Path;

/// A kubeconfig file, or the in-cluster configuration when there is none.
pub async fn load(path: Option<&Path>) -> Result<kube::Config, String> {
    match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => kube::Config::incluster().map_err(|e| e.to_string()),
    }
}

/// The client configuration of a delegated review: `given` (a test's or the sandbox's),
/// else the review's own kubeconfig (`--authentication-kubeconfig` /
/// `--authorization-kubeconfig`), else the cluster's, else `main` (`--kubeconfig`) or
/// in-cluster.
pub async fn delegated(
    given: Option<&kube::Config>,
    own: Option<&Path>,
    cluster: Option<&kube::Config>,
    main: Option<&Path>,
) -> Result<kube::Config, String> {
    match (given, own, cluster) {
        (Some(c), _, _) => Ok(c.clone()),
        (None, Some(path), _) => load(Some(path)).await,
        (None, None, Some(c)) => Ok(c.clone()),
        (None, None, None) => load(main).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delegated_kubeconfigs_default_to_the_cluster_and_the_given_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("authn.kubeconfig");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.9:6443\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\n",
        )
        .unwrap();
        let cluster = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        let given = kube::Config::new("https://10.0.0.2:6443".parse().unwrap());
        let host = |c: kube::Config| c.cluster_url.to_string();
        let from_cluster = delegated(None, None, Some(&cluster), None).await.unwrap();
        assert_eq!(host(from_cluster), "https://10.0.0.1:6443/");
        let from_flag = delegated(None, Some(&file), Some(&cluster), None)
            .await
            .unwrap();
        assert_eq!(host(from_flag), "https://10.0.0.9:6443/");
        let from_given = delegated(Some(&given), Some(&file), Some(&cluster), None)
            .await
            .unwrap();
        assert_eq!(host(from_given), "https://10.0.0.2:6443/");
        let missing = dir.path().join("absent");
        let err = delegated(None, Some(&missing), Some(&cluster), None)
            .await
            .unwrap_err();
        assert!(err.starts_with(&missing.display().to_string()), "{err}");
    }
}
