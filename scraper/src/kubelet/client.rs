//! The kubelet HTTPS client. Owned by the client/scrape work.
