//! Scraper self-metrics. Owned by the client/scrape work.
