// Package pointcheck is the otel-rl collector's door check for histogram points.
//
// Prometheus validates every native histogram of a remote-write request and, when one is invalid, rolls back the
// whole request and answers 400; the exporter then drops that request as a permanent error, with every other run's
// points in it. One malformed sender (an exponential point whose count is not the sum of its buckets, a bucket
// count of 2^64-1) thereby cost an honest run its data. This processor, first in the metrics pipeline after the
// contract filters, drops each histogram point the store would refuse, before anything merges it, and counts it in
// the collector's own metrics per run, metric and reason (otelcol_otel_rl_points_rejected).
//
// Exponential points are judged exactly as they would be stored: translated by the remote-write exporter's own
// translator (the same release as the exporter) and validated by Prometheus's own histogram.Validate. Explicit
// points are stored as plain samples, which Prometheus never refuses, but a point whose buckets do not add up to
// its count (or whose bounds are not increasing) would corrupt its run's merged distribution, so it is dropped too.
package pointcheck

import (
	"context"
	"errors"
	"math"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/translator/prometheusremotewrite"
	"github.com/prometheus/prometheus/model/histogram"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/otel-rl/otelcol-rl/processors/rejections"
)

// Config bounds what the rejection counter may name.
type Config struct {
	// MaxRuns is how many distinct run ids the counter names; rejections of further runs are counted under the run
	// id rejections.OtherRuns, so a sender inventing a run id per request cannot grow the collector's own metrics.
	MaxRuns int `mapstructure:"max_runs"`
}

// Validate refuses a bound that would name no run.
func (c *Config) Validate() error {
	if c.MaxRuns < 1 {
		return errors.New("max_runs must be at least 1")
	}
	return nil
}

// NewFactory returns the factory of the "pointcheck" processor (metrics only).
func NewFactory() processor.Factory {
	return processor.NewFactory(
		component.MustNewType("pointcheck"),
		func() component.Config { return &Config{MaxRuns: 1000} },
		processor.WithMetrics(createMetrics, component.StabilityLevelAlpha),
	)
}

func createMetrics(
	ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics,
) (processor.Metrics, error) {
	rejected, err := rejections.New(set.TelemetrySettings, cfg.(*Config).MaxRuns)
	if err != nil {
		return nil, err
	}
	check := &checker{rejected: rejected}
	return processorhelper.NewMetrics(ctx, set, cfg, next, check.process,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

type checker struct {
	rejected *rejections.Counter
}

func (c *checker) process(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		run := c.rejected.Run(rm.Resource())
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool {
				dropped := false
				reject := func(reason string) bool {
					if reason == "" {
						return false
					}
					dropped = true
					c.rejected.Add(ctx, run, m.Name(), reason)
					return true
				}
				switch m.Type() {
				case pmetric.MetricTypeExponentialHistogram:
					points := m.ExponentialHistogram().DataPoints()
					points.RemoveIf(func(p pmetric.ExponentialHistogramDataPoint) bool { return reject(exponentialProblem(p)) })
					return dropped && points.Len() == 0
				case pmetric.MetricTypeHistogram:
					points := m.Histogram().DataPoints()
					points.RemoveIf(func(p pmetric.HistogramDataPoint) bool { return reject(explicitProblem(p)) })
					return dropped && points.Len() == 0
				default:
					return false
				}
			})
			return sm.Metrics().Len() == 0
		})
		return rm.ScopeMetrics().Len() == 0
	})
	return md, nil
}

// exponentialProblem is why Prometheus would refuse the point as the exporter writes it ("" when it would not):
// "bucket_overflow" (a count beyond int64, which the translation turns negative), "scale" (a scale the exporter
// cannot translate or Prometheus does not know), "count" (buckets and zero count do not add up to the count),
// "negative_bucket", "spans" or "invalid".
func exponentialProblem(p pmetric.ExponentialHistogramDataPoint) string {
	for _, buckets := range []pmetric.ExponentialHistogramDataPointBuckets{p.Positive(), p.Negative()} {
		for _, count := range buckets.BucketCounts().All() {
			if count > math.MaxInt64 {
				return "bucket_overflow"
			}
		}
	}
	if p.ZeroCount() > math.MaxInt64 || p.Count() > math.MaxInt64 {
		return "bucket_overflow"
	}
	alone := pmetric.NewMetrics()
	m := alone.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("point")
	m.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	copied := m.ExponentialHistogram().DataPoints().AppendEmpty()
	p.CopyTo(copied)
	copied.Attributes().Clear()
	copied.Exemplars().RemoveIf(func(pmetric.Exemplar) bool { return true })
	series, err := prometheusremotewrite.FromMetrics(alone, prometheusremotewrite.Settings{})
	if err != nil {
		return "scale"
	}
	for _, ts := range series {
		for _, h := range ts.Histograms {
			if err := h.ToIntHistogram().Validate(); err != nil {
				return reasonOf(err)
			}
		}
	}
	return ""
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, histogram.ErrHistogramCountMismatch), errors.Is(err, histogram.ErrHistogramCountNotBigEnough):
		return "count"
	case errors.Is(err, histogram.ErrHistogramNegativeBucketCount):
		return "negative_bucket"
	case errors.Is(err, histogram.ErrHistogramSpanNegativeOffset), errors.Is(err, histogram.ErrHistogramSpansBucketsMismatch):
		return "spans"
	case errors.Is(err, histogram.ErrHistogramsInvalidSchema), errors.Is(err, histogram.ErrHistogramsUnknownSchema):
		return "scale"
	default:
		return "invalid"
	}
}

// explicitProblem is why the point would corrupt its run's merged distribution ("" when it would not): "buckets"
// (not one count per bound plus one), "bounds" (not finite and strictly increasing), "count" (the buckets do not add
// up to the count, or overflow adding up). A point without buckets (count and sum only) is fine.
func explicitProblem(p pmetric.HistogramDataPoint) string {
	counts, bounds := p.BucketCounts(), p.ExplicitBounds()
	if counts.Len() == 0 {
		return ""
	}
	if counts.Len() != bounds.Len()+1 {
		return "buckets"
	}
	for i, bound := range bounds.All() {
		if math.IsNaN(bound) || math.IsInf(bound, 0) || (i > 0 && bound <= bounds.At(i-1)) {
			return "bounds"
		}
	}
	var total uint64
	for _, count := range counts.All() {
		if total+count < total {
			return "count"
		}
		total += count
	}
	if total != p.Count() {
		return "count"
	}
	return ""
}
