//! Repeated timings and their summary.

use std::time::{Duration, Instant};

/// Median and minimum of repeated measurements, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median_ms: f64,
    pub min_ms: f64,
    pub reps: usize,
}

impl Summary {
    pub fn of(samples: &mut [Duration]) -> Self {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let n = samples.len();
        let median = if n % 2 == 1 {
            ms(samples[n / 2])
        } else {
            (ms(samples[n / 2 - 1]) + ms(samples[n / 2])) / 2.0
        };
        Self {
            median_ms: median,
            min_ms: ms(samples[0]),
            reps: n,
        }
    }
}

/// Runs `step` `warmup` times untimed, then `reps` times, timing each call (which must end with
/// the device synchronised, so wall time is the step's time).
pub fn repeat<E>(warmup: usize, reps: usize, mut step: impl FnMut() -> Result<(), E>) -> Result<Summary, E> {
    for _ in 0..warmup {
        step()?;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        step()?;
        samples.push(t.elapsed());
    }
    Ok(Summary::of(&mut samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let ms = Duration::from_millis;
        let s = Summary::of(&mut [ms(5), ms(1), ms(3)]);
        assert_eq!((s.median_ms, s.min_ms, s.reps), (3.0, 1.0, 3));
        let s = Summary::of(&mut [ms(4), ms(1), ms(3), ms(2)]);
        assert_eq!(s.median_ms, 2.5);
    }
}
