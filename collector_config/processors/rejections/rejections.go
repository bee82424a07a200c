// Package rejections counts what otel-rl's processors drop, in the collector's own metric
// otelcol_otel_rl_points_rejected{rl_run_id, metric, reason}: one counter for every processor, so one dashboard
// query and one alert (OtelRLRejectedPoints) name the run whatever dropped its points.
package rejections

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// OtherRuns is the run id rejections are counted under once the counter names its maximum of runs.
const OtherRuns = "(other runs)"

// Counter counts dropped points by run, metric and reason, naming at most maxRuns runs, so a sender inventing a
// run id per request cannot grow the collector's own metrics.
type Counter struct {
	counter metric.Int64Counter
	maxRuns int
	mu      sync.Mutex
	runs    map[string]struct{}
}

// New returns a counter on the collector's own meter provider.
func New(telemetry component.TelemetrySettings, maxRuns int) (*Counter, error) {
	counter, err := telemetry.MeterProvider.Meter("github.com/otel-rl/otelcol-rl/processors").Int64Counter(
		"otelcol_otel_rl_points_rejected",
		metric.WithDescription("Points dropped by otel-rl's processors (a histogram the store would refuse, a run over its series budget), by run, metric and reason"),
		metric.WithUnit("{point}"),
	)
	if err != nil {
		return nil, err
	}
	return &Counter{counter: counter, maxRuns: maxRuns, runs: map[string]struct{}{}}, nil
}

// Run is the resource's rl.run.id as the counter names it: "" when absent, OtherRuns past the bound.
func (c *Counter) Run(resource pcommon.Resource) string {
	value, ok := resource.Attributes().Get("rl.run.id")
	if !ok {
		return ""
	}
	run := value.AsString()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, known := c.runs[run]; known {
		return run
	}
	if len(c.runs) >= c.maxRuns {
		return OtherRuns
	}
	c.runs[run] = struct{}{}
	return run
}

// Add counts one dropped point of metric in run for reason.
func (c *Counter) Add(ctx context.Context, run, metricName, reason string) {
	c.counter.Add(ctx, 1, metric.WithAttributes(
		attribute.String("rl_run_id", run),
		attribute.String("metric", metricName),
		attribute.String("reason", reason),
	))
}
