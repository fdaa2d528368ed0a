//! The Prometheus text exposition as a test reads it: samples by name and labels, and the
//! quantiles of what a histogram counted between two scrapes, computed as Prometheus's
//! `histogram_quantile` does (linear within a bucket).

use std::collections::BTreeMap;

/// One sample: a series and its value.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Every sample of one scrape.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    /// Reads an exposition; a line that is not a sample is skipped.
    pub fn parse(text: &str) -> Scrape {
        Scrape {
            samples: text
                .lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(sample)
                .collect(),
        }
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(l, w)| l == k && w == v))
        })
    }

    /// The sum of the samples of `name` that have every one of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// As [`sum`](Self::sum), grouped by the value of label `by` (absent: "").
    pub fn sum_by(&self, name: &str, labels: &[(&str, &str)], by: &str) -> BTreeMap<String, f64> {
        let mut groups = BTreeMap::new();
        for s in self.matching(name, labels) {
            let key = s
                .labels
                .iter()
                .find(|(l, _)| l == by)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            *groups.entry(key).or_insert(0.0) += s.value;
        }
        groups
    }

    /// The cumulative buckets of histogram `name` (`<name>_bucket`) over the series that have
    /// every one of `labels`, summed: (upper bound, count), by bound.
    pub fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let mut by_bound: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in self.matching(&format!("{name}_bucket"), labels) {
            let Some(le) = s.labels.iter().find(|(l, _)| l == "le") else {
                continue;
            };
            let bound = if le.1 == "+Inf" {
                f64::INFINITY
            } else {
                match le.1.parse::<f64>() {
                    Ok(bound) => bound,
                    Err(_) => continue,
                }
            };
            // Bounds are finite or +Inf, never NaN: their bits order them.
            let key = if bound.is_infinite() {
                u64::MAX
            } else {
                bound.to_bits()
            };
            by_bound.entry(key).or_insert((bound, 0.0)).1 += s.value;
        }
        let mut buckets: Vec<(f64, f64)> = by_bound.into_values().collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }
}

/// What each cumulative bucket counted from `before` to `after` (two results of
/// [`Scrape::buckets`]): (upper bound, count), by bound.
fn increase(before: &[(f64, f64)], after: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|&(bound, count)| {
            let earlier = before
                .iter()
                .find(|(b, _)| *b == bound)
                .map_or(0.0, |(_, c)| *c);
            (bound, count - earlier)
        })
        .collect()
}

/// The `q` quantile of what histogram buckets counted from `before` to `after` (two results
/// of [`Scrape::buckets`]), as `histogram_quantile` computes it; `None` when nothing was
/// counted.
pub fn quantile(q: f64, before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<f64> {
    let increase = increase(before, after);
    let total = increase.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(bound, count) in &increase {
        if count >= rank {
            if bound.is_infinite() {
                // Above the last finite bound: that bound, as Prometheus answers.
                return Some(lower.0);
            }
            let within = count - lower.1;
            let fraction = if within > 0.0 {
                (rank - lower.1) / within
            } else {
                1.0
            };
            return Some(lower.0 + (bound - lower.0) * fraction);
        }
        lower = (bound, count);
    }
    Some(lower.0)
}

/// The bucket that holds the `q` quantile of what histogram buckets counted from `before` to
/// `after`, as (lower bound, upper bound), the upper infinite above the last finite bound: the
/// quantile is somewhere in it, where [`quantile`] places it by interpolation. `None` when
/// nothing was counted.
pub fn quantile_bucket(q: f64, before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<(f64, f64)> {
    let increase = increase(before, after);
    let total = increase.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let mut lower = 0.0;
    for &(bound, count) in &increase {
        if count >= q * total {
            return Some((lower, bound));
        }
        lower = bound;
    }
    None
}

/// The smallest bucket bound that holds everything histogram buckets counted from `before` to
/// `after`: every observation was at most this; `None` when nothing was counted, infinite when
/// something was above the last finite bound.
pub fn all_within(before: &[(f64, f64)], after: &[(f64, f64)]) -> Option<f64> {
    quantile_bucket(1.0, before, after).map(|(_, bound)| bound)
}

/// One sample line: `name{k="v",...} value [timestamp]`.
fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let (series, rest) = match line.find('{') {
        Some(open) => {
            let close = closing_brace(line, open)?;
            (&line[..=close], &line[close + 1..])
        }
        None => line.split_at(line.find(' ')?),
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    let (name, labels) = match series.find('{') {
        Some(open) => (
            &series[..open],
            labels(&series[open + 1..series.len() - 1])?,
        ),
        None => (series, Vec::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Where the label set opened at `open` closes: the first `}` outside a quoted value.
fn closing_brace(line: &str, open: usize) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(open + i),
            _ => {}
        }
    }
    None
}

/// `k="v",k2="v2"` with the exposition's escapes (`\\`, `\"`, `\n`).
fn labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text.trim_start_matches(',');
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.push((key.trim().to_owned(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 7
apiserver_request_total{code="422",resource="pods",subresource="status",verb="PATCH"} 2
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 40
odd{path="a\"}b",x="1"} 3 1700000000
d_bucket{le="0.1",verb="PATCH"} 2
d_bucket{le="1",verb="PATCH"} 6
d_bucket{le="+Inf",verb="PATCH"} 10
d_bucket{le="0.1",verb="PUT"} 100
d_bucket{le="1",verb="PUT"} 100
d_bucket{le="+Inf",verb="PUT"} 100
"#;

    #[test]
    fn samples_are_summed_and_grouped_by_their_labels() {
        let scrape = Scrape::parse(TEXT);
        assert_eq!(
            scrape.sum("apiserver_request_total", &[("resource", "pods")]),
            9.0
        );
        assert_eq!(
            scrape.sum("apiserver_request_total", &[("verb", "PUT")]),
            40.0
        );
        let by_code = scrape.sum_by("apiserver_request_total", &[("verb", "PATCH")], "code");
        assert_eq!(by_code["200"], 7.0);
        assert_eq!(by_code["422"], 2.0);
        // A quoted brace and a timestamp.
        assert_eq!(scrape.sum("odd", &[("path", "a\"}b")]), 3.0);
        assert_eq!(scrape.sum("missing", &[]), 0.0);
    }

    #[test]
    fn quantiles_are_of_the_increase_between_scrapes() {
        let before = Scrape::parse(TEXT).buckets("d", &[("verb", "PATCH")]);
        let after_text = TEXT
            .replace(
                r#"d_bucket{le="1",verb="PATCH"} 6"#,
                r#"d_bucket{le="1",verb="PATCH"} 16"#,
            )
            .replace(
                r#"d_bucket{le="+Inf",verb="PATCH"} 10"#,
                r#"d_bucket{le="+Inf",verb="PATCH"} 20"#,
            );
        let after = Scrape::parse(&after_text).buckets("d", &[("verb", "PATCH")]);
        // The increase: 0 below 0.1 s, 10 in (0.1, 1], none above.
        let median = quantile(0.5, &before, &after).unwrap();
        assert!((median - 0.55).abs() < 1e-9, "{median}");
        let p99 = quantile(0.99, &before, &after).unwrap();
        assert!((p99 - 0.991).abs() < 1e-9, "{p99}");
        // The bucket that holds them: somewhere in (0.1, 1].
        assert_eq!(quantile_bucket(0.5, &before, &after), Some((0.1, 1.0)));
        assert_eq!(quantile_bucket(0.99, &before, &after), Some((0.1, 1.0)));
        assert_eq!(quantile_bucket(0.99, &after, &after), None);
        // From the start: 2 of 10 within 0.1 s, the p99 above 1 s.
        let all = Scrape::parse(TEXT).buckets("d", &[("verb", "PATCH")]);
        assert_eq!(quantile_bucket(0.2, &[], &all), Some((0.0, 0.1)));
        assert_eq!(quantile_bucket(0.99, &[], &all), Some((1.0, f64::INFINITY)));
        // Nothing counted: no quantile.
        assert_eq!(quantile(0.99, &after, &after), None);
        // Above the last finite bound: that bound.
        let all = Scrape::parse(TEXT).buckets("d", &[("verb", "PATCH")]);
        assert_eq!(quantile(0.99, &[], &all), Some(1.0));
        // Everything counted between the scrapes was at most 1 s; before them, some was above.
        assert_eq!(all_within(&before, &after), Some(1.0));
        assert_eq!(all_within(&[], &all), Some(f64::INFINITY));
        assert_eq!(all_within(&after, &after), None);
    }
}
