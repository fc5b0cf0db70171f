//! Writing a [`Registry`] in the Prometheus text format (version 0.0.4), and small
//! helpers for [`Collector`]s that read a daemon's own counters at scrape time.
//!
//! Counters are named without their `_total` suffix: the encoder appends it (and
//! `prometheus-client` refuses a counter registered with it). Help texts given to
//! [`Registry::register`] get a full stop appended by `prometheus-client`; the helpers
//! here write theirs as given.
//!
//! [`Collector`]: prometheus_client::collector::Collector

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::error::ExporterError;

/// The `Content-Type` of the text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// `registry`'s metrics in the Prometheus text format (version 0.0.4).
pub fn render(registry: &Registry) -> Result<String, ExporterError> {
    let mut text = String::with_capacity(4096);
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry)?;
    Ok(text)
}

/// Writes a counter family with one unlabelled sample. `name` has no `_total` suffix.
pub fn counter<N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> std::fmt::Result {
    let counter = ConstCounter::new(value);
    counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)
}

/// Writes a counter family with a sample per label set. `name` has no `_total`
/// suffix.
pub fn counter_family<L: EncodeLabelSet, N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, N)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a gauge family with one unlabelled sample.
pub fn gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: N,
) -> std::fmt::Result {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

/// Writes a gauge family with a sample per label set (an `_info` metric's labels, for
/// one).
pub fn gauge_family<L: EncodeLabelSet, N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, N)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Writes a histogram family with one unlabelled sample: `buckets` are the upper
/// bounds with the count of observations in each bucket alone (not cumulative; the
/// encoder adds them up and writes the `+Inf` bucket as `count` unless a bound is
/// infinite), `sum` the sum of the observations.
pub fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    buckets: &[(f64, u64)],
    (sum, count): (f64, u64),
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Histogram,
    )?;
    metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, buckets, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;

    /// Reads fixed values when scraped, through each helper.
    #[derive(Debug)]
    struct Fixed;

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
            counter(&mut encoder, "demo_requests", "Requests seen.", 3u64)?;
            counter_family(
                &mut encoder,
                "demo_dropped",
                "Dropped, by reason.",
                [
                    ([("reason", "mode")], 1u64),
                    ([("reason", "say \"hi\"")], 2),
                ],
            )?;
            gauge(&mut encoder, "demo_up", "1 when up.", 1i64)?;
            histogram(
                &mut encoder,
                "demo_wait_seconds",
                "Waits.",
                &[(0.5, 2), (1.0, 1)],
                (1.75, 4),
            )
        }
    }

    #[test]
    fn collectors_are_written_in_the_text_format() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed));
        let text = render(&registry).unwrap();
        assert_eq!(
            text,
            "# HELP demo_requests_total Requests seen.\n\
             # TYPE demo_requests_total counter\n\
             demo_requests_total 3\n\
             # HELP demo_dropped_total Dropped, by reason.\n\
             # TYPE demo_dropped_total counter\n\
             demo_dropped_total{reason=\"mode\"} 1\n\
             demo_dropped_total{reason=\"say \\\"hi\\\"\"} 2\n\
             # HELP demo_up 1 when up.\n\
             # TYPE demo_up gauge\n\
             demo_up 1\n\
             # HELP demo_wait_seconds Waits.\n\
             # TYPE demo_wait_seconds histogram\n\
             demo_wait_seconds_bucket{le=\"0.5\"} 2\n\
             demo_wait_seconds_bucket{le=\"1\"} 3\n\
             demo_wait_seconds_bucket{le=\"+Inf\"} 4\n\
             demo_wait_seconds_sum 1.75\n\
             demo_wait_seconds_count 4\n"
        );
        assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
        testdata::assert_promtool_accepts(&text);
    }

    /// A gauge with labels, as an `_info` metric has.
    #[derive(Debug)]
    struct Info;

    impl Collector for Info {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
            gauge_family(
                &mut encoder,
                "demo_build_info",
                "The build.",
                [([("version", "1.2")], 1i64)],
            )
        }
    }

    #[test]
    fn gauge_families_carry_their_labels() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Info));
        let text = render(&registry).unwrap();
        assert_eq!(
            text,
            "# HELP demo_build_info The build.\n\
             # TYPE demo_build_info gauge\n\
             demo_build_info{version=\"1.2\"} 1\n"
        );
        testdata::assert_promtool_accepts(&text);
    }
}
