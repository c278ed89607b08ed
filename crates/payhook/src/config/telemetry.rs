//! The `[telemetry]` table: OpenTelemetry trace export over OTLP. Every key has its standard OpenTelemetry
//! environment variable, which wins over the file (docs/decisions/0047-trace-export.md); a value either way is
//! checked here, so `payhook config check` refuses a bad one with its key (and line) or its variable.

use anyhow::{Result, bail};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    otlp_endpoint: String,
    otlp_protocol: String,
    service_name: String,
    traces_sampler: String,
    traces_sampler_arg: String,
    resource_attributes: String,
    export_queue: u64,
    recent_traces: u64,
}

/// How traces are exported: nowhere (the default), or to an OTLP endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where spans go; `None`: export is off and no span is made.
    pub export: Option<Export>,
}

/// A configured OTLP export.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The URL spans are sent to: for http/protobuf the traces path itself (`…/v1/traces`), for gRPC the server.
    pub endpoint: String,
    /// The wire protocol.
    pub protocol: Protocol,
    /// `service.name`.
    pub service_name: String,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// More resource attributes (`deployment.environment.name=prod`).
    pub resource: Vec<(String, String)>,
    /// Finished spans waiting for export, at most.
    pub export_queue: usize,
    /// Recent deliveries whose span contexts are kept for the links of their retries and dispatches, at most.
    pub recent_traces: usize,
    /// Headers sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`: a collector's token).
    pub headers: ExportHeaders,
}

/// Headers sent with every export, names in lowercase (gRPC metadata's rule, which HTTP accepts). Their values
/// are credentials: `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExportHeaders(Vec<(String, String)>);

impl ExportHeaders {
    /// The names and values.
    pub fn pairs(&self) -> impl Iterator<Item = &(String, String)> {
        self.0.iter()
    }
}

impl std::fmt::Debug for ExportHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(name, _)| format!("{name}: <redacted>"))).finish()
    }
}

/// OTLP's transports payhook speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Protobuf over HTTP POST (port 4318 by convention).
    HttpProtobuf,
    /// gRPC (port 4317 by convention).
    Grpc,
}

/// `OTEL_TRACES_SAMPLER` and its argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// No trace.
    AlwaysOff,
    /// This fraction of traces, by trace id.
    TraceIdRatio(f64),
    /// A parent's decision where there is one (an API request's `traceparent`), else the inner sampler's.
    ParentBased(ParentRoot),
}

/// The sampler a parent-based sampler uses for root spans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentRoot {
    /// Every root.
    AlwaysOn,
    /// No root.
    AlwaysOff,
    /// This fraction of roots.
    TraceIdRatio(f64),
}

/// The largest `export_queue`: a bound is a bound.
pub const MAX_EXPORT_QUEUE: u64 = 1_000_000;
/// The largest `recent_traces`.
pub const MAX_RECENT_TRACES: u64 = 1_000_000;

/// Resolves the table, each key overridden by its variable in `var` (the process's environment).
pub(super) fn resolve_telemetry(raw: &RawTelemetry, var: &dyn Fn(&str) -> Option<String>) -> Result<TelemetryConfig> {
    // Which value counts for a key, and how a message names where it came from.
    let pick = |vars: &[&str], key: &str, file: &str| -> (String, String) {
        for name in vars {
            if let Some(v) = var(name) {
                return (v.trim().to_owned(), format!("environment variable {name}"));
            }
        }
        (file.trim().to_owned(), format!("telemetry.{key}"))
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(TelemetryConfig { export: None });
    }
    let (protocol_text, protocol_at) = pick(
        &["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
        "otlp_protocol",
        &raw.otlp_protocol,
    );
    let protocol = match protocol_text.as_str() {
        "http/protobuf" => Protocol::HttpProtobuf,
        "grpc" => Protocol::Grpc,
        "http/json" => bail!("{protocol_at}: \"http/json\" is not supported; use \"http/protobuf\" or \"grpc\""),
        other => bail!("{protocol_at}: {other:?} is not one of \"http/protobuf\", \"grpc\""),
    };
    // The traces endpoint is used as it is; the general one is a base, to which http/protobuf adds /v1/traces.
    let (endpoint, endpoint_at, is_base) = match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        Some(v) => (v.trim().to_owned(), "environment variable OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_owned(), false),
        None => {
            let (v, at) = pick(&["OTEL_EXPORTER_OTLP_ENDPOINT"], "otlp_endpoint", &raw.otlp_endpoint);
            (v, at, true)
        }
    };
    let (sampler_text, sampler_at) = pick(&["OTEL_TRACES_SAMPLER"], "traces_sampler", &raw.traces_sampler);
    let (arg, arg_at) = pick(&["OTEL_TRACES_SAMPLER_ARG"], "traces_sampler_arg", &raw.traces_sampler_arg);
    let sampler = sampler(&sampler_text, &sampler_at, &arg, &arg_at)?;
    let (service_name, service_at) = pick(&["OTEL_SERVICE_NAME"], "service_name", &raw.service_name);
    if service_name.is_empty() {
        bail!("{service_at}: must not be empty");
    }
    let (attributes, attributes_at) =
        pick(&["OTEL_RESOURCE_ATTRIBUTES"], "resource_attributes", &raw.resource_attributes);
    let resource = resource_attributes(&attributes).map_err(|e| anyhow::anyhow!("{attributes_at}: {e}"))?;
    let queue = match var("OTEL_BSP_MAX_QUEUE_SIZE") {
        Some(v) => v.trim().parse::<u64>().map_err(|_| {
            anyhow::anyhow!("environment variable OTEL_BSP_MAX_QUEUE_SIZE: {v:?} is not a whole number")
        })?,
        None => raw.export_queue,
    };
    if queue == 0 || queue > MAX_EXPORT_QUEUE {
        bail!("telemetry.export_queue: {queue} is not between 1 and {MAX_EXPORT_QUEUE}");
    }
    if raw.recent_traces > MAX_RECENT_TRACES {
        bail!("telemetry.recent_traces: {} is more than {MAX_RECENT_TRACES}", raw.recent_traces);
    }
    if endpoint.is_empty() {
        return Ok(TelemetryConfig { export: None });
    }
    let headers = match ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]
        .into_iter()
        .find_map(|name| var(name).map(|v| (name, v)))
    {
        Some((name, text)) => export_headers(&text).map_err(|e| anyhow::anyhow!("environment variable {name}: {e}"))?,
        None => ExportHeaders::default(),
    };
    let url = reqwest::Url::parse(&endpoint)
        .map_err(|e| anyhow::anyhow!("{endpoint_at}: {endpoint:?} is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("{endpoint_at}: {endpoint:?} must be an http:// or https:// URL with a host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        bail!("{endpoint_at}: must not hold credentials (a collector's token goes in OTEL_EXPORTER_OTLP_HEADERS)");
    }
    let endpoint = match (protocol, is_base) {
        (Protocol::HttpProtobuf, true) => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        _ => endpoint,
    };
    Ok(TelemetryConfig {
        export: Some(Export {
            endpoint,
            protocol,
            service_name,
            sampler,
            resource,
            export_queue: usize::try_from(queue).unwrap_or(usize::MAX),
            recent_traces: usize::try_from(raw.recent_traces).unwrap_or(usize::MAX),
            headers,
        }),
    })
}

fn sampler(name: &str, name_at: &str, arg: &str, arg_at: &str) -> Result<Sampler> {
    let ratio = || -> Result<f64> {
        if arg.is_empty() {
            return Ok(1.0);
        }
        match arg.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => bail!("{arg_at}: {arg:?} is not a ratio between 0 and 1"),
        }
    };
    Ok(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatio(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(ParentRoot::AlwaysOn),
        "parentbased_always_off" => Sampler::ParentBased(ParentRoot::AlwaysOff),
        "parentbased_traceidratio" => Sampler::ParentBased(ParentRoot::TraceIdRatio(ratio()?)),
        other => bail!(
            "{name_at}: {other:?} is not one of always_on, always_off, traceidratio, parentbased_always_on, \
             parentbased_always_off, parentbased_traceidratio"
        ),
    })
}

/// `key=value,key=value`, values percent-decoded as the specification says.
fn resource_attributes(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else { bail!("{pair:?} is not key=value") };
        let key = key.trim();
        if key.is_empty() {
            bail!("{pair:?} has no key");
        }
        let value: String = form_urlencoded_decode(value.trim());
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

/// `name=value,name=value` (values percent-decoded), each a valid header: a name of token characters, which is
/// lowercased, and a value of visible characters and spaces. An error names the pair, never its value.
fn export_headers(text: &str) -> Result<ExportHeaders> {
    let mut out = Vec::new();
    for (name, value) in resource_attributes(text).map_err(|_| anyhow::anyhow!("is not name=value,name=value"))? {
        let name = name.to_ascii_lowercase();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if !name.bytes().all(token) {
            bail!("{name:?} is not a header name");
        }
        if value.is_empty() || !value.bytes().all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()) {
            bail!("the value of {name:?} is empty or holds a character a header may not");
        }
        out.push((name, value));
    }
    Ok(ExportHeaders(out))
}

/// Percent-decoding (`%20` → space), leaving anything else as it is.
fn form_urlencoded_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = value.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawTelemetry {
        RawTelemetry {
            otlp_endpoint: String::new(),
            otlp_protocol: "http/protobuf".into(),
            service_name: "payhook".into(),
            traces_sampler: "parentbased_always_on".into(),
            traces_sampler_arg: String::new(),
            resource_attributes: String::new(),
            export_queue: 2048,
            recent_traces: 4096,
        }
    }

    fn with(env: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn export_is_off_without_an_endpoint_and_the_variables_win_over_the_file() {
        assert_eq!(resolve_telemetry(&raw(), &with(&[])).unwrap().export, None);
        let mut file = raw();
        file.otlp_endpoint = "http://file:4318".into();
        let env = with(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "payhook-eu"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,team=pay%20ments"),
        ]);
        let export = resolve_telemetry(&file, &env).unwrap().export.unwrap();
        assert_eq!(export.endpoint, "http://collector:4317");
        assert_eq!(export.protocol, Protocol::Grpc);
        assert_eq!(export.service_name, "payhook-eu");
        assert_eq!(export.sampler, Sampler::ParentBased(ParentRoot::TraceIdRatio(0.1)));
        assert_eq!(export.resource[1], ("team".to_owned(), "pay ments".to_owned()));
        assert_eq!(export.recent_traces, 4096);
        let http = resolve_telemetry(&file, &with(&[])).unwrap().export.unwrap();
        assert_eq!(http.endpoint, "http://file:4318/v1/traces", "the signal's path is added to a base endpoint");
        assert_eq!(resolve_telemetry(&file, &with(&[("OTEL_SDK_DISABLED", "true")])).unwrap().export, None);
    }

    #[test]
    fn bad_values_are_refused_naming_their_key_or_variable() {
        let mut file = raw();
        file.otlp_endpoint = "http://collector:4318".into();
        let refused = |env: &[(&str, &str)], file: &RawTelemetry| {
            format!("{:#}", resolve_telemetry(file, &with(env)).unwrap_err())
        };
        let m = refused(&[("OTEL_TRACES_SAMPLER", "sometimes")], &file);
        assert!(m.starts_with("environment variable OTEL_TRACES_SAMPLER: \"sometimes\""), "{m}");
        let m = refused(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "1.5")], &file);
        assert!(m.contains("OTEL_TRACES_SAMPLER_ARG"), "{m}");
        let m = refused(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")], &file);
        assert!(m.contains("not supported"), "{m}");
        let mut bad = raw();
        bad.otlp_endpoint = "collector:4318".into();
        assert!(refused(&[], &bad).starts_with("telemetry.otlp_endpoint: "), "{}", refused(&[], &bad));
        bad.otlp_endpoint = "http://user:pw@collector:4318".into();
        assert!(refused(&[], &bad).contains("credentials"));
        let mut bad = file;
        bad.export_queue = 0;
        assert!(refused(&[], &bad).starts_with("telemetry.export_queue: "));
        bad.export_queue = 10;
        bad.recent_traces = MAX_RECENT_TRACES + 1;
        assert!(refused(&[], &bad).starts_with("telemetry.recent_traces: "));
        bad.recent_traces = 0;
        assert_eq!(resolve_telemetry(&bad, &with(&[])).unwrap().export.unwrap().recent_traces, 0, "0 keeps none");
        bad.resource_attributes = "novalue".into();
        assert!(refused(&[], &bad).starts_with("telemetry.resource_attributes: "));
    }

    #[test]
    fn export_headers_come_from_the_variables_and_their_values_are_never_shown() {
        let mut file = raw();
        file.otlp_endpoint = "http://collector:4318".into();
        let export = |env: &[(&str, &str)]| resolve_telemetry(&file, &with(env)).map(|t| t.export.unwrap());
        let headers =
            export(&[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cret, X-Tenant=eu")]).unwrap().headers;
        let pairs: Vec<_> = headers.pairs().cloned().collect();
        assert_eq!(
            pairs,
            [("authorization".to_owned(), "Bearer s3cret".to_owned()), ("x-tenant".to_owned(), "eu".to_owned())]
        );
        let shown = format!("{headers:?}");
        assert!(shown.contains("authorization") && !shown.contains("s3cret"), "{shown}");
        let traces = export(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=1"), ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2")]);
        assert_eq!(traces.unwrap().headers.pairs().next().unwrap().0, "b", "the signal's own variable wins");
        assert_eq!(export(&[]).unwrap().headers, ExportHeaders::default());
        for bad in ["token", "bad name=x", "x-key=line%0Abreak", "x-key="] {
            let m = format!("{:#}", export(&[("OTEL_EXPORTER_OTLP_HEADERS", bad)]).unwrap_err());
            assert!(m.starts_with("environment variable OTEL_EXPORTER_OTLP_HEADERS: "), "{bad}: {m}");
            assert!(!m.contains("break"), "a value is never repeated: {m}");
        }
    }
}
