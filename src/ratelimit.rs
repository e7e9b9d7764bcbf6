//! Token buckets: the client-side rate limit of every request to the API server (client-go's
//! `--kube-client-qps` / `--kube-client-burst`, Karpenter's defaults 200 and 300), and the limit on
//! per-pod events (Karpenter's pod nomination events: 5 per second, bursts of 10,
//! `core@v0.27.0:pkg/controllers/provisioning/scheduling/events.go`).
//!
//! `TokenBucket` is pure (the caller passes the time); `RateLimitLayer` applies one to a tower
//! service, which is how the kube client is built.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A bucket of `burst` tokens refilled at `rate` per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A `rate` of 0 or less means no limit.
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes a token now, or says how long until one is there (nothing is taken then).
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// Tokio's clock (the one its timers and tests use), as a std `Instant`.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Holds every request of the wrapped service until its bucket has a token, in arrival order.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    qps: f64,
    burst: u32,
}

impl RateLimitLayer {
    /// `qps` requests per second on average, `burst` at once; `qps` 0 turns the limit off.
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimitLayer { qps, burst }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst, now()),
            wait: None,
            permitted: false,
        }
    }
}

/// The service of `RateLimitLayer`. The kube client drives it from one buffer worker, so
/// `poll_ready` waiting for a token holds back the requests behind it too, as client-go's does.
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token is taken for the next `call` (kept while the inner service is not ready).
    permitted: bool,
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.permitted {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(now()) {
                Ok(()) => self.permitted = true,
                Err(wait) => self.wait = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_at_once_then_its_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 10, t0);
        for _ in 0..10 {
            assert_eq!(bucket.take(t0), Ok(()));
        }
        let wait = bucket.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        // A refused take takes nothing: after 0.2 s exactly one token is there.
        let t1 = t0 + Duration::from_millis(200);
        assert_eq!(bucket.take(t1), Ok(()));
        assert!(bucket.take(t1).is_err());
        // Idle time refills up to the burst, never beyond.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..10 {
            assert_eq!(bucket.take(t2), Ok(()));
        }
        assert!(bucket.take(t2).is_err());
    }

    #[test]
    fn a_rate_of_zero_is_no_limit() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0.0, 1, t0);
        for _ in 0..1000 {
            assert_eq!(bucket.take(t0), Ok(()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_holds_requests_beyond_the_burst_until_tokens_come() {
        use tower::{Layer, Service, ServiceExt};
        let mut service = RateLimitLayer::new(10.0, 2).layer(tower::service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
        let start = tokio::time::Instant::now();
        for n in 0..4 {
            assert_eq!(service.ready().await.unwrap().call(n).await, Ok(n));
        }
        // Two at once, then one every 100 ms.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(250),
            "{elapsed:?}"
        );
    }
}
