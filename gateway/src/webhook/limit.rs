//! A per-route rate limit (token bucket refilled continuously), counted only after a request
//! authenticated, so strangers cannot spend a route's budget.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RateLimiter {
    per_minute: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute: f64::from(per_minute.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one call from `route`'s budget, or says how long until one is free.
    pub fn take(&self, route: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        let (tokens, at) = buckets
            .entry(route.to_owned())
            .or_insert((self.per_minute, now));
        let refill = now.duration_since(*at).as_secs_f64() * self.per_minute / 60.0;
        *tokens = (*tokens + refill).min(self.per_minute);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - *tokens) * 60.0 / self.per_minute,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_gets_its_budget_then_waits() {
        let limiter = RateLimiter::new(3);
        for _ in 0..3 {
            assert!(limiter.take("a").is_ok());
        }
        let wait = limiter.take("a").expect_err("over budget");
        assert!(
            wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        assert!(limiter.take("b").is_ok(), "routes have separate budgets");
    }
}
