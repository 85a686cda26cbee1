//! A list request's options, decoded and checked in the order the apiserver's list handler
//! (`handlers.ListResource`) does, so a malformed or contradictory list gets the same answer
//! as from metrics-server:
//! 1. `ParameterCodec.DecodeParameters`: `timeoutSeconds` and `limit` must be integers
//!    (`strconv.ParseInt`), then the label and field selectors must parse: 400;
//! 2. `ValidateListOptions`: `resourceVersionMatch` and `sendInitialEvents` in a combination
//!    the apiserver forbids: 422 `Invalid` on `ListOptions.meta.k8s.io`, one cause per rule;
//! 3. field label conversion: a field other than `metadata.name` / `metadata.namespace`: 400;
//! 4. a watch: 405 (the metrics API has none).
//!
//! The values themselves are not used: metrics-server ignores `limit`, `continue` and the
//! resource versions (every list is whole and current), and so do we.

use std::borrow::Cow;

use scraper::selector::{FieldSelector, LabelSelector};

use super::{ListQuery, query};
use crate::status::{Cause, Status};

/// The raw values, first occurrence of each key (`url.Values` and the generated conversions
/// read `values[0]`).
#[derive(Default)]
struct Raw<'a> {
    label_selector: Option<Cow<'a, str>>,
    field_selector: Option<Cow<'a, str>>,
    watch: Option<Cow<'a, str>>,
    resource_version: Option<Cow<'a, str>>,
    resource_version_match: Option<Cow<'a, str>>,
    timeout_seconds: Option<Cow<'a, str>>,
    limit: Option<Cow<'a, str>>,
    continue_token: Option<Cow<'a, str>>,
    send_initial_events: Option<Cow<'a, str>>,
}

impl<'a> Raw<'a> {
    /// One pass over the query.
    fn read(q: Option<&'a str>) -> Self {
        let mut raw = Raw::default();
        for (k, v) in query::pairs(q) {
            let slot = match &*k {
                "labelSelector" => &mut raw.label_selector,
                "fieldSelector" => &mut raw.field_selector,
                "watch" => &mut raw.watch,
                "resourceVersion" => &mut raw.resource_version,
                "resourceVersionMatch" => &mut raw.resource_version_match,
                "timeoutSeconds" => &mut raw.timeout_seconds,
                "limit" => &mut raw.limit,
                "continue" => &mut raw.continue_token,
                "sendInitialEvents" => &mut raw.send_initial_events,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        raw
    }
}

/// Decodes and checks a list request's query; `resource` (`nodes` / `pods`) names the
/// resource in a watch's 405.
pub(super) fn list_options(q: Option<&str>, resource: &str) -> Result<ListQuery, Box<Status>> {
    let raw = Raw::read(q);
    let bad = |message: String| Box::new(Status::bad_request(message));
    // 1. Decoding, in `metav1.ListOptions`' field order: the integers (url.Values to v1),
    //    then the selectors (v1 to the internal version).
    for v in [&raw.timeout_seconds, &raw.limit].into_iter().flatten() {
        scraper::go::parse_int(v, 64).map_err(bad)?;
    }
    let labels = LabelSelector::parse(raw.label_selector.as_deref().unwrap_or_default())
        .map_err(|e| bad(e.0))?;
    let fields = FieldSelector::parse_syntax(raw.field_selector.as_deref().unwrap_or_default())
        .map_err(|e| bad(e.0))?;
    let watch = raw.watch.as_deref().is_some_and(query::truthy);
    // 2. Validation.
    let causes = validate(&raw, watch);
    if !causes.is_empty() {
        return Err(Box::new(Status::invalid(
            "meta.k8s.io",
            "ListOptions",
            causes,
        )));
    }
    // 3. Field label conversion.
    let fields = fields.convert().map_err(|e| bad(e.0))?;
    // 4. No watch here.
    if watch {
        return Err(Box::new(Status::method_not_supported(
            resource,
            "metrics.k8s.io",
            "watch",
        )));
    }
    Ok(ListQuery { labels, fields })
}

const EXACT: &str = "Exact";
const NOT_OLDER_THAN: &str = "NotOlderThan";
const RVM: &str = "resourceVersionMatch";
const SIE: &str = "sendInitialEvents";

/// `ValidateListOptions` (with the WatchList feature on, as in Kubernetes 1.34 on), after
/// `SetListOptionsDefaults`, which for a watch from the start sets exactly the options that
/// pass.
fn validate(raw: &Raw<'_>, watch: bool) -> Vec<Cause> {
    let rv = raw.resource_version.as_deref().unwrap_or_default();
    let rvm = raw
        .resource_version_match
        .as_deref()
        .filter(|m| !m.is_empty());
    let continues = raw.continue_token.as_deref().is_some_and(|c| !c.is_empty());
    let sends_initial_events = raw.send_initial_events.is_some();
    let forbidden =
        |field: &'static str, detail: &'static str| move || Cause::forbidden(field, detail);
    // Each rule in upstream's order: whether the options break it, and its cause (built
    // only then: the options of almost every list break none).
    let mut causes = Vec::new();
    let mut rule = |broken: bool, cause: &dyn Fn() -> Cause| {
        if broken {
            causes.push(cause());
        }
    };
    let rvm_is = |m: &str| rvm == Some(m);
    let other = rvm.unwrap_or_default();
    if watch {
        rule(
            sends_initial_events && !rvm_is(NOT_OLDER_THAN),
            &forbidden(
                RVM,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ),
        );
        rule(
            rvm.is_some() && !sends_initial_events,
            &forbidden(
                RVM,
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ),
        );
        rule(rvm.is_some() && !rvm_is(NOT_OLDER_THAN), &|| {
            Cause::not_supported(RVM, other, &[NOT_OLDER_THAN])
        });
        rule(
            rvm.is_some() && continues,
            &forbidden(
                RVM,
                "resourceVersionMatch is forbidden when continue is provided",
            ),
        );
    } else {
        rule(
            rvm.is_some() && rv.is_empty(),
            &forbidden(
                RVM,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ),
        );
        rule(
            rvm.is_some() && continues,
            &forbidden(
                RVM,
                "resourceVersionMatch is forbidden when continue is provided",
            ),
        );
        rule(
            rvm.is_some() && !rvm_is(EXACT) && !rvm_is(NOT_OLDER_THAN),
            &|| Cause::not_supported(RVM, other, &[EXACT, NOT_OLDER_THAN, ""]),
        );
        rule(
            rvm_is(EXACT) && rv == "0",
            &forbidden(
                RVM,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ),
        );
        rule(
            sends_initial_events,
            &forbidden(SIE, "sendInitialEvents is forbidden for list"),
        );
    }
    causes
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn status(q: &str) -> Status {
        *list_options(Some(q), "pods").unwrap_err()
    }

    #[test]
    fn integers_must_parse_as_go_parses_them() {
        for ok in [
            "limit=500",
            "limit=-1",
            "limit=%2B5",
            "timeoutSeconds=0",
            "limit=0&limit=x",
        ] {
            assert!(list_options(Some(ok), "pods").is_ok(), "{ok}");
        }
        let s = status("limit=abc");
        assert_eq!((s.http, s.reason), (400, "BadRequest"));
        assert_eq!(
            s.message,
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert_eq!(
            status("limit=").message,
            "strconv.ParseInt: parsing \"\": invalid syntax"
        );
        assert_eq!(
            status("limit=+1+").message,
            "strconv.ParseInt: parsing \" 1 \": invalid syntax"
        );
        assert_eq!(
            status("timeoutSeconds=99999999999999999999").message,
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
        // timeoutSeconds decodes before limit, both before the selectors.
        assert!(status("limit=x&timeoutSeconds=y").message.contains("\"y\""));
        assert!(
            status("labelSelector=%3D%3D&limit=x")
                .message
                .contains("\"x\"")
        );
    }

    #[test]
    fn contradictory_options_are_invalid_with_one_cause_per_rule() {
        let s = status("resourceVersionMatch=NotOlderThan");
        assert_eq!((s.http, s.reason), (422, "Invalid"));
        assert_eq!(
            s.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
             resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        let s = status("resourceVersionMatch=Other&continue=abc&sendInitialEvents=false");
        let fields: Vec<_> = s
            .details
            .as_ref()
            .unwrap()
            .causes
            .iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, [RVM, RVM, RVM, SIE]);
        assert_eq!(
            s.message,
            "ListOptions.meta.k8s.io \"\" is invalid: [\
             resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, \
             resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, \
             resourceVersionMatch: Unsupported value: \"Other\": supported values: \"Exact\", \"NotOlderThan\", \"\", \
             sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
        );
        let s = status("resourceVersion=0&resourceVersionMatch=Exact");
        assert!(
            s.message
                .ends_with("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")
        );
        // What client-go sends passes.
        for ok in [
            "resourceVersion=0",
            "resourceVersion=0&resourceVersionMatch=NotOlderThan",
            "resourceVersion=12&resourceVersionMatch=Exact&limit=500",
            "resourceVersionMatch=",
            "continue=abc",
        ] {
            assert!(list_options(Some(ok), "pods").is_ok(), "{ok}");
        }
    }

    #[test]
    fn checks_run_in_the_apiservers_order() {
        // Validation before field label conversion, conversion before the watch.
        assert_eq!(
            status("fieldSelector=spec.nodeName%3Dx&sendInitialEvents=1").http,
            422
        );
        assert_eq!(status("fieldSelector=spec.nodeName%3Dx&watch=1").http, 400);
        assert_eq!(
            status("fieldSelector=%3D%3D%3D&sendInitialEvents=1").http,
            400
        );
        // A watch is checked by the watch rules, then refused.
        assert_eq!(status("watch=1").http, 405);
        assert_eq!(status("watch=1&resourceVersion=5").http, 405);
        assert_eq!(
            status("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan").http,
            405
        );
        let s = status("watch=true&resourceVersionMatch=Exact&resourceVersion=5");
        assert_eq!(s.http, 422);
        assert_eq!(s.details.unwrap().causes.len(), 2);
        assert_eq!(status("watch=true&sendInitialEvents=true").http, 422);
        assert!(list_options(Some("watch=false&limit=5"), "pods").is_ok());
    }
}
