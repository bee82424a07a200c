// Package runbudget bounds the series one run may write, whatever its metrics' kinds and however its streams
// arrive (all in one flush, growing over many flushes, spread over ranks).
//
// It runs after the ranks are merged, so it sees one resource per run, and it keeps, per run, the streams it
// admitted and the series they cost in the store: a sum or gauge 1, an explicit histogram its buckets plus sum and
// count, an exponential histogram 1 (a native histogram), each doubled for a metric also written as exemplar
// carriers (<name>.exemplars). A stream it admitted always passes; a new stream that would take its run over
// max_series_per_run is dropped and counted (otelcol_otel_rl_points_rejected{reason="series_budget"}); the run's
// other series go on. A run not seen for forget_after is forgotten (its budget starts anew).
package runbudget

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatautil"
	"github.com/otel-rl/otelcol-rl/processors/rejections"
)

// Config is the budget.
type Config struct {
	// MaxSeriesPerRun is the most series one run may write.
	MaxSeriesPerRun int `mapstructure:"max_series_per_run"`
	// ExemplarCarriers are the histogram metrics the pipeline also writes as <name>.exemplars: their streams cost
	// twice.
	ExemplarCarriers []string `mapstructure:"exemplar_carriers"`
	// ForgetAfter is how long a run may send nothing before its admitted streams are forgotten.
	ForgetAfter time.Duration `mapstructure:"forget_after"`
	// MaxRuns is how many distinct run ids the rejection counter names.
	MaxRuns int `mapstructure:"max_runs"`
}

// Validate refuses a budget that admits nothing.
func (c *Config) Validate() error {
	if c.MaxSeriesPerRun < 1 || c.MaxRuns < 1 || c.ForgetAfter <= 0 {
		return errors.New("max_series_per_run and max_runs must be at least 1, forget_after positive")
	}
	return nil
}

// NewFactory returns the factory of the "runbudget" processor (metrics only).
func NewFactory() processor.Factory {
	return processor.NewFactory(
		component.MustNewType("runbudget"),
		func() component.Config {
			return &Config{MaxSeriesPerRun: 20000, ForgetAfter: 24 * time.Hour, MaxRuns: 1000}
		},
		processor.WithMetrics(createMetrics, component.StabilityLevelAlpha),
	)
}

func createMetrics(
	ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics,
) (processor.Metrics, error) {
	config := cfg.(*Config)
	rejected, err := rejections.New(set.TelemetrySettings, config.MaxRuns)
	if err != nil {
		return nil, err
	}
	budget := &budget{config: config, rejected: rejected, runs: map[string]*run{}, now: time.Now}
	return processorhelper.NewMetrics(ctx, set, cfg, next, budget.process,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

type run struct {
	series   int
	streams  map[string]struct{}
	lastSeen time.Time
}

type budget struct {
	config   *Config
	rejected *rejections.Counter
	now      func() time.Time
	mu       sync.Mutex
	runs     map[string]*run
}

func (b *budget) process(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for id, state := range b.runs {
		if now.Sub(state.lastSeen) > b.config.ForgetAfter {
			delete(b.runs, id)
		}
	}
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		runID, _ := rm.Resource().Attributes().Get("rl.run.id")
		state := b.runs[runID.AsString()]
		if state == nil {
			state = &run{streams: map[string]struct{}{}}
			b.runs[runID.AsString()] = state
		}
		state.lastSeen = now
		label := b.rejected.Run(rm.Resource())
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool {
				factor := 1
				if slices.Contains(b.config.ExemplarCarriers, m.Name()) {
					factor = 2
				}
				admit := func(attributes pcommon.Map, cost int) bool {
					hash := pdatautil.MapHash(attributes)
					key := m.Type().String() + "\x00" + m.Name() + "\x00" + string(hash[:])
					if _, known := state.streams[key]; known {
						return true
					}
					if state.series+cost*factor > b.config.MaxSeriesPerRun {
						b.rejected.Add(ctx, label, m.Name(), "series_budget")
						return false
					}
					state.series += cost * factor
					state.streams[key] = struct{}{}
					return true
				}
				switch m.Type() {
				case pmetric.MetricTypeSum:
					m.Sum().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return !admit(p.Attributes(), 1) })
					return m.Sum().DataPoints().Len() == 0
				case pmetric.MetricTypeGauge:
					m.Gauge().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return !admit(p.Attributes(), 1) })
					return m.Gauge().DataPoints().Len() == 0
				case pmetric.MetricTypeHistogram:
					m.Histogram().DataPoints().RemoveIf(func(p pmetric.HistogramDataPoint) bool {
						return !admit(p.Attributes(), p.ExplicitBounds().Len()+3)
					})
					return m.Histogram().DataPoints().Len() == 0
				case pmetric.MetricTypeExponentialHistogram:
					m.ExponentialHistogram().DataPoints().RemoveIf(func(p pmetric.ExponentialHistogramDataPoint) bool {
						return !admit(p.Attributes(), 1)
					})
					return m.ExponentialHistogram().DataPoints().Len() == 0
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
