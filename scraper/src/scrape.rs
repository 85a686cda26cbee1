//! The scrape loop. Owned by the client/scrape work.
