//! Which format `GET /metrics` answers in: the spec's JSON, the Prometheus
//! text format 0.0.4, or OpenMetrics 1.0.0, chosen from the `Accept` header
//! (RFC 9110 media ranges with `q` weights) and the `?format=prometheus`
//! query.
//!
//! JSON stays the answer for JSON clients, browsers' and curl's `*/*`, and
//! requests without `Accept`; a scraper that lists `text/plain` or
//! `application/openmetrics-text` ahead of (or instead of) `application/json`
//! gets the exposition format, so a Prometheus scrape job with default
//! settings works. Wildcards never select an exposition format: only a named
//! type does.

/// The body format of one `/metrics` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsFormat {
    /// The spec's JSON document.
    Json,
    /// The Prometheus text format, version 0.0.4.
    PrometheusText,
    /// OpenMetrics text, version 1.0.0 (ends with `# EOF`).
    OpenMetrics,
}

impl MetricsFormat {
    /// The format a request asks for: `?format=prometheus` first (it
    /// predates negotiation and keeps meaning the Prometheus text), then the
    /// `Accept` header.
    pub fn choose(query: Option<&str>, accept: Option<&str>) -> MetricsFormat {
        let asks_prometheus =
            query.is_some_and(|query| query.split('&').any(|pair| pair == "format=prometheus"));
        if asks_prometheus {
            return MetricsFormat::PrometheusText;
        }
        accept.map_or(MetricsFormat::Json, negotiate)
    }

    /// The `Content-Type` of an exposition answer (None for JSON, which
    /// the JSON reply sets itself).
    pub fn content_type(self) -> Option<&'static str> {
        match self {
            MetricsFormat::Json => None,
            MetricsFormat::PrometheusText => Some("text/plain; version=0.0.4; charset=utf-8"),
            MetricsFormat::OpenMetrics => {
                Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
            }
        }
    }
}

/// One media range of an `Accept` header that names a format this endpoint
/// serves, with its weight and position.
#[derive(Clone, Copy)]
struct Offer {
    format: MetricsFormat,
    /// The weight in thousandths (RFC 9110 allows three decimals), so
    /// comparisons are exact.
    weight: u16,
    position: usize,
}

/// The format an `Accept` header prefers. The highest-weighted exposition
/// type (ties go to the earlier-listed) wins over `application/json` when
/// it weighs more, or as much and is listed first; JSON otherwise,
/// including when nothing this endpoint serves is named.
fn negotiate(accept: &str) -> MetricsFormat {
    let mut best_exposition: Option<Offer> = None;
    let mut json: Option<Offer> = None;
    for (position, range) in accept.split(',').enumerate() {
        let Some(offer) = parse_range(range, position) else {
            continue;
        };
        let slot = match offer.format {
            MetricsFormat::Json => &mut json,
            _ => &mut best_exposition,
        };
        // A type listed twice counts at its best weight, first listing on ties.
        if slot.is_none_or(|held| offer.weight > held.weight) {
            *slot = Some(offer);
        }
    }
    let Some(exposition) = best_exposition.filter(|offer| offer.weight > 0) else {
        return MetricsFormat::Json;
    };
    match json {
        Some(json)
            if json.weight > exposition.weight
                || (json.weight == exposition.weight && json.position < exposition.position) =>
        {
            MetricsFormat::Json
        }
        _ => exposition.format,
    }
}

/// One media range (`type/subtype;param=value;q=0.5`), when it names a
/// format this endpoint serves. Types compare case-insensitively; a range
/// whose `q` does not parse is ignored, as a malformed header should not
/// switch the format.
fn parse_range(range: &str, position: usize) -> Option<Offer> {
    let mut parts = range.split(';');
    let media_type = parts.next()?.trim().to_ascii_lowercase();
    let format = match media_type.as_str() {
        "application/json" => MetricsFormat::Json,
        "text/plain" => MetricsFormat::PrometheusText,
        "application/openmetrics-text" => MetricsFormat::OpenMetrics,
        _ => return None,
    };
    let mut weight = 1000;
    for parameter in parts {
        let Some((name, value)) = parameter.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            weight = parse_weight(value.trim())?;
        }
    }
    Some(Offer {
        format,
        weight,
        position,
    })
}

/// An RFC 9110 weight (`0`, `1`, `0.5`, `1.000`; up to three decimals) in
/// thousandths.
fn parse_weight(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{fraction:0<3}").parse().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::MetricsFormat::{Json, OpenMetrics, PrometheusText};
    use super::*;

    fn accept(header: &str) -> MetricsFormat {
        MetricsFormat::choose(None, Some(header))
    }

    /// Prometheus 2.0 to 2.48 (fixed header; 2.42 is Debian bookworm's).
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,\
        application/openmetrics-text;version=0.0.1;q=0.75,\
        text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// Prometheus 2.49 to 2.55 (from the default `scrape_protocols`).
    const PROMETHEUS_2_49: &str = "application/openmetrics-text;version=1.0.0;q=0.5,\
        application/openmetrics-text;version=0.0.1;q=0.4,\
        text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    /// Prometheus 3.x with its default `scrape_protocols` and UTF-8 names.
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
        application/openmetrics-text;version=0.0.1;q=0.5,\
        text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,\
        text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    /// Prometheus 3.x with protobuf first (native histograms scraped).
    const PROMETHEUS_3_PROTO_FIRST: &str = "application/vnd.google.protobuf;\
        proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,\
        application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
        application/openmetrics-text;version=0.0.1;q=0.4,\
        text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,\
        text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
    /// Prometheus 3.x configured with `scrape_protocols: [PrometheusText0.0.4]`.
    const PROMETHEUS_3_TEXT_ONLY: &str = "text/plain;version=0.0.4;q=0.6,*/*;q=0.5";

    #[test]
    fn prometheus_servers_get_openmetrics_by_default() {
        assert_eq!(accept(PROMETHEUS_2), OpenMetrics);
        assert_eq!(accept(PROMETHEUS_2_49), OpenMetrics);
        assert_eq!(accept(PROMETHEUS_3), OpenMetrics);
        assert_eq!(accept(PROMETHEUS_3_PROTO_FIRST), OpenMetrics);
        assert_eq!(accept(PROMETHEUS_3_TEXT_ONLY), PrometheusText);
    }

    #[test]
    fn json_clients_curl_and_no_accept_keep_json() {
        assert_eq!(MetricsFormat::choose(None, None), Json);
        assert_eq!(accept(""), Json);
        assert_eq!(accept("*/*"), Json);
        assert_eq!(accept("application/json"), Json);
        assert_eq!(accept("application/json, text/plain;q=0.9"), Json);
        assert_eq!(accept("text/*, application/*"), Json);
        // A browser's header names no exposition type.
        assert_eq!(
            accept("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            Json
        );
    }

    #[test]
    fn text_plain_is_the_prometheus_text() {
        assert_eq!(accept("text/plain"), PrometheusText);
        assert_eq!(accept("text/plain; version=0.0.4"), PrometheusText);
        assert_eq!(accept("Text/Plain;Q=0.2"), PrometheusText);
        assert_eq!(accept("*/*;q=0.1, text/plain;q=0.5"), PrometheusText);
        assert_eq!(
            accept("text/plain;q=0.5,application/openmetrics-text;q=0.4"),
            PrometheusText
        );
    }

    #[test]
    fn weights_rank_json_against_the_exposition_formats() {
        assert_eq!(
            accept("application/json;q=0.5, text/plain;q=0.6"),
            PrometheusText
        );
        assert_eq!(accept("application/json;q=0.7, text/plain;q=0.6"), Json);
        assert_eq!(
            accept("APPLICATION/OPENMETRICS-TEXT, application/json;q=0.9"),
            OpenMetrics
        );
        // Ties go to the earlier-listed type.
        assert_eq!(accept("text/plain, application/json"), PrometheusText);
        assert_eq!(accept("application/json, text/plain"), Json);
        assert_eq!(
            accept("text/plain;q=0.5, application/openmetrics-text;q=0.5"),
            PrometheusText
        );
        assert_eq!(
            accept("application/openmetrics-text;q=0.5, text/plain;q=0.5"),
            OpenMetrics
        );
    }

    #[test]
    fn zero_or_malformed_weights_are_not_acceptable() {
        assert_eq!(accept("text/plain;q=0"), Json);
        assert_eq!(accept("application/openmetrics-text;q=0.000"), Json);
        assert_eq!(accept("text/plain;q=0, application/json;q=0"), Json);
        assert_eq!(
            accept("application/json;q=0, application/openmetrics-text;q=0.001"),
            OpenMetrics
        );
        assert_eq!(accept("text/plain;q=2"), Json);
        assert_eq!(accept("text/plain;q=0.5000"), Json);
        assert_eq!(accept("text/plain;q=abc"), Json);
        assert_eq!(accept("text/plain;q=1.0"), PrometheusText);
    }

    #[test]
    fn the_format_query_still_selects_the_prometheus_text() {
        assert_eq!(
            MetricsFormat::choose(Some("format=prometheus"), None),
            PrometheusText
        );
        assert_eq!(
            MetricsFormat::choose(Some("a=1&format=prometheus"), Some(PROMETHEUS_3)),
            PrometheusText
        );
        assert_eq!(
            MetricsFormat::choose(Some("format=json"), Some("*/*")),
            Json
        );
    }

    #[test]
    fn weights_parse_as_rfc_9110_writes_them() {
        assert_eq!(parse_weight("0"), Some(0));
        assert_eq!(parse_weight("0.5"), Some(500));
        assert_eq!(parse_weight("0.75"), Some(750));
        assert_eq!(parse_weight("0.001"), Some(1));
        assert_eq!(parse_weight("1"), Some(1000));
        assert_eq!(parse_weight("1.000"), Some(1000));
        assert_eq!(parse_weight("1.001"), None);
        assert_eq!(parse_weight("0.+1"), None);
        assert_eq!(parse_weight(""), None);
    }
}
