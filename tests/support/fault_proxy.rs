//! A fault-injecting HTTP proxy in front of moto, on 127.0.0.1, for the fault tests: moto stays
//! the EC2/SSM/SQS implementation and the proxy forwards every call to it, except where a rule
//! says otherwise. Rules match one API action (EC2's `Action=` form field, or the operation of
//! an `X-Amz-Target` header for the JSON protocols) and apply to a fraction of its calls (spread
//! evenly and deterministically: the n-th matching call is hit when ⌈n·f⌉ > ⌈(n−1)·f⌉), for a
//! set time, and/or for a set number of calls. They answer:
//!
//! - `Throttle`: 503 with EC2's `RequestLimitExceeded`,
//! - `Status(code)`: that status with `InternalError`/`Unavailable`,
//! - `InsufficientCapacity(offerings)`: CreateFleet only; those (type, zone) overrides are taken
//!   out of the request before it is forwarded, and when none is left the answer is EC2's
//!   instant-fleet answer with no instance and an `InsufficientInstanceCapacity` error per override,
//! - `Latency(d)`: forwarded after `d`,
//! - `DropRequest`: the connection is closed before anything is forwarded,
//! - `DropResponse`: forwarded (the action takes effect in moto), then the connection is closed
//!   without an answer: a lost response.
//!
//! Every call is recorded (action, form fields, what was done) for the tests to count.
//! These faults are what moto cannot produce itself; the proxy is the one mock here.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// What a matching call gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    Throttle,
    Status(u16),
    InsufficientCapacity(Vec<(String, String)>),
    Latency(Duration),
    DropRequest,
    DropResponse,
}

/// One rule: `fault` for `action`'s calls.
#[derive(Clone, Debug)]
pub struct Rule {
    pub action: String,
    pub fault: Fault,
    /// Fraction of the matching calls hit, spread evenly (1.0: every one).
    pub fraction: f64,
    /// The rule ends at this instant.
    pub until: Option<Instant>,
    /// The rule ends after hitting this many calls.
    pub times: Option<u32>,
    matched: u64,
    hit: u32,
}

impl Rule {
    /// Every call of `action`, until removed.
    pub fn new(action: &str, fault: Fault) -> Rule {
        Rule {
            action: action.to_string(),
            fault,
            fraction: 1.0,
            until: None,
            times: None,
            matched: 0,
            hit: 0,
        }
    }

    pub fn fraction(mut self, fraction: f64) -> Rule {
        self.fraction = fraction;
        self
    }

    pub fn for_duration(mut self, d: Duration) -> Rule {
        self.until = Some(Instant::now() + d);
        self
    }

    pub fn times(mut self, n: u32) -> Rule {
        self.times = Some(n);
        self
    }
}

/// Whether `rule` still applies at `now`.
pub fn active(rule: &Rule, now: Instant) -> bool {
    rule.until.is_none_or(|u| now < u) && rule.times.is_none_or(|t| rule.hit < t)
}

/// Counts a call matching `rule`; true when this one is hit.
pub fn take(rule: &mut Rule) -> bool {
    rule.matched += 1;
    let n = rule.matched as f64;
    let hit = (n * rule.fraction).ceil() > ((n - 1.0) * rule.fraction).ceil();
    if hit {
        rule.hit += 1;
    }
    hit
}

/// One call through the proxy.
#[derive(Clone, Debug)]
pub struct Call {
    pub action: String,
    /// The form fields of a Query-protocol call (EC2), decoded.
    pub params: BTreeMap<String, String>,
    /// The fault applied, if any.
    pub fault: Option<Fault>,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    calls: Vec<Call>,
}

/// The running proxy; stops with its runtime when dropped.
pub struct FaultProxy {
    runtime: Option<tokio::runtime::Runtime>,
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FaultProxy {
    /// Starts forwarding 127.0.0.1:<port> to `upstream` (e.g. moto's `http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = upstream.trim_end_matches('/').to_string();
        let client = reqwest::Client::builder().pool_max_idle_per_host(16).build().unwrap();
        let shared = state.clone();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (state, client, upstream) = (shared.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(req, state.clone(), client.clone(), upstream.clone()));
                    // An error from the service (a dropped call) closes the connection unanswered.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultProxy {
            runtime: Some(runtime),
            addr,
            state,
        }
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn add(&self, rule: Rule) {
        self.state.lock().unwrap().rules.push(rule);
    }

    /// Removes every rule of `action`.
    pub fn clear(&self, action: &str) {
        self.state.lock().unwrap().rules.retain(|r| r.action != action);
    }

    /// The calls of `action` so far.
    pub fn calls(&self, action: &str) -> Vec<Call> {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.action == action)
            .cloned()
            .collect()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped by the fault proxy")
    }
}

impl std::error::Error for Dropped {}

type Answer = Result<Response<Full<Bytes>>, Dropped>;

async fn handle(req: Request<Incoming>, state: Arc<Mutex<State>>, client: reqwest::Client, upstream: String) -> Answer {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let form = parse_form(&body);
    let action = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
        .map(str::to_string)
        .or_else(|| form.get("Action").cloned())
        .unwrap_or_default();
    let fault = {
        let mut state = state.lock().unwrap();
        let now = Instant::now();
        state.rules.retain(|r| active(r, now));
        let fault = state
            .rules
            .iter_mut()
            .filter(|r| r.action == action)
            .find_map(|r| take(r).then(|| r.fault.clone()));
        state.calls.push(Call {
            action: action.clone(),
            params: form.clone(),
            fault: fault.clone(),
            at: now,
        });
        fault
    };
    let mut forward_body = body.clone();
    // Overrides refused for capacity while others are forwarded: EC2's instant fleet reports
    // each in its answer's errorSet beside the instances it launched from the rest.
    let mut refused_on_the_way = Vec::new();
    match &fault {
        Some(Fault::Throttle) => return Ok(ec2_error(503, "RequestLimitExceeded", "Request limit exceeded.")),
        Some(Fault::Status(code)) => {
            let name = if *code == 503 { "Unavailable" } else { "InternalError" };
            return Ok(ec2_error(*code, name, "injected by the fault proxy"));
        }
        Some(Fault::DropRequest) => return Err(Dropped),
        Some(Fault::Latency(d)) => tokio::time::sleep(*d).await,
        Some(Fault::InsufficientCapacity(offerings)) => match without_offerings(&form, offerings) {
            Ok((kept, refused)) => {
                forward_body = Bytes::from(kept);
                refused_on_the_way = refused;
            }
            Err(refused) => return Ok(insufficient_capacity(&refused)),
        },
        Some(Fault::DropResponse) | None => {}
    }
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut forward = client.request(parts.method.clone(), format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            forward = forward.header(name, value);
        }
    }
    let answer = match forward.body(forward_body).send().await {
        Ok(a) => a,
        Err(_) => return Err(Dropped),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let mut bytes = answer.bytes().await.map_err(|_| Dropped)?;
    if fault == Some(Fault::DropResponse) {
        return Err(Dropped);
    }
    if !refused_on_the_way.is_empty() && status.is_success() {
        bytes = Bytes::from(with_errors(&String::from_utf8_lossy(&bytes), &refused_on_the_way));
    }
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            response = response.header(name, value);
        }
    }
    Ok(response.body(Full::new(bytes)).unwrap())
}

fn ec2_error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"
    );
    Response::builder()
        .status(status)
        .header("content-type", "text/xml")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// An override refused for capacity: (launch template, instance type, zone, capacity type).
pub type Refused = (String, String, String, String);

/// A CreateFleet answer with `refused`'s capacity errors added to its errorSet.
pub fn with_errors(answer: &str, refused: &[Refused]) -> String {
    let items = error_items(refused);
    if answer.contains("<errorSet/>") {
        answer.replacen("<errorSet/>", &format!("<errorSet>{items}</errorSet>"), 1)
    } else if answer.contains("<errorSet>") {
        answer.replacen("<errorSet>", &format!("<errorSet>{items}"), 1)
    } else {
        answer.replacen(
            "</CreateFleetResponse>",
            &format!("<errorSet>{items}</errorSet></CreateFleetResponse>"),
            1,
        )
    }
}

/// CreateFleet's answer when every override was refused.
fn insufficient_capacity(refused: &[Refused]) -> Response<Full<Bytes>> {
    let items = error_items(refused);
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>fault-proxy</requestId><fleetId>fleet-fault-proxy</fleetId><errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
    );
    Response::builder()
        .status(200)
        .header("content-type", "text/xml")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// The errorSet items of capacity errors, one per refused override.
fn error_items(refused: &[Refused]) -> String {
    refused
        .iter()
        .map(|(template, instance_type, zone, capacity_type)| {
            format!(
                "<item><launchTemplateAndOverrides><launchTemplateSpecification><launchTemplateName>{template}</launchTemplateName><version>$Latest</version></launchTemplateSpecification><overrides><instanceType>{instance_type}</instanceType><availabilityZone>{zone}</availabilityZone></overrides></launchTemplateAndOverrides><lifecycle>{capacity_type}</lifecycle><errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient {instance_type} capacity in the Availability Zone you requested ({zone}).</errorMessage></item>"
            )
        })
        .collect()
}

/// The CreateFleet form without the overrides naming `offerings` (renumbered) and the refused
/// overrides as (template, type, zone, capacity type), or, when none is left, those alone.
pub fn without_offerings(form: &BTreeMap<String, String>, offerings: &[(String, String)]) -> Result<(String, Vec<Refused>), Vec<Refused>> {
    // (config, override) → fields of the override
    let mut overrides: BTreeMap<(u32, u32), BTreeMap<String, String>> = BTreeMap::new();
    let mut rest: Vec<(String, String)> = Vec::new();
    for (k, v) in form {
        let parts: Vec<&str> = k.splitn(5, '.').collect();
        if let ["LaunchTemplateConfigs", i, "Overrides", j, field] = parts[..] {
            if let (Ok(i), Ok(j)) = (i.parse(), j.parse()) {
                overrides.entry((i, j)).or_default().insert(field.to_string(), v.clone());
                continue;
            }
        }
        rest.push((k.clone(), v.clone()));
    }
    let capacity_type = form
        .get("TargetCapacitySpecification.DefaultTargetCapacityType")
        .cloned()
        .unwrap_or_else(|| "on-demand".into());
    let refused_offering = |o: &BTreeMap<String, String>| {
        offerings
            .iter()
            .any(|(t, z)| o.get("InstanceType") == Some(t) && o.get("AvailabilityZone") == Some(z))
    };
    let mut refused = Vec::new();
    let mut kept: BTreeMap<u32, Vec<&BTreeMap<String, String>>> = BTreeMap::new();
    for ((i, _), o) in &overrides {
        if refused_offering(o) {
            let template = form
                .get(&format!("LaunchTemplateConfigs.{i}.LaunchTemplateSpecification.LaunchTemplateName"))
                .cloned()
                .unwrap_or_default();
            refused.push((
                template,
                o.get("InstanceType").cloned().unwrap_or_default(),
                o.get("AvailabilityZone").cloned().unwrap_or_default(),
                capacity_type.clone(),
            ));
        } else {
            kept.entry(*i).or_default().push(o);
        }
    }
    if kept.is_empty() {
        return Err(refused);
    }
    // A launch template config with no override left goes too (EC2 would launch nothing from
    // it; moto would launch the template's own instance type), and the configs left are
    // numbered 1..n again, as a form list must be.
    type Fields = Vec<(String, String)>;
    let (configs, mut rest): (Fields, Fields) = rest.into_iter().partition(|(k, _)| k.starts_with("LaunchTemplateConfigs."));
    for (n, (i, list)) in kept.into_iter().enumerate() {
        let (old, new) = (format!("LaunchTemplateConfigs.{i}."), format!("LaunchTemplateConfigs.{}.", n + 1));
        for (k, v) in &configs {
            if let Some(field) = k.strip_prefix(&old) {
                rest.push((format!("{new}{field}"), v.clone()));
            }
        }
        for (j, o) in list.into_iter().enumerate() {
            for (field, v) in o {
                rest.push((format!("{new}Overrides.{}.{field}", j + 1), v.clone()));
            }
        }
    }
    let kept = rest
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    Ok((kept, refused))
}

/// `application/x-www-form-urlencoded` fields (empty for other bodies).
pub fn parse_form(body: &[u8]) -> BTreeMap<String, String> {
    let Ok(text) = std::str::from_utf8(body) else {
        return BTreeMap::new();
    };
    if text.starts_with('{') {
        return BTreeMap::new();
    }
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}
