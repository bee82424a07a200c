// Package lens gives a run instrumented with NeMo Lens (NeMo-RL's OpenTelemetry) the run-level gauges otel-rl's
// lifecycle alerts and dashboards read, which Lens does not send: the step (rl.step), when the run started
// (rl.run.start_time), whether it finished (rl.run.finished), how many of its processes report (rl.ranks.up) and how
// many run the step loop (rl.ranks.expected: those whose spans carry rl.iteration; NeMo-RL's driver alone, whose
// phase spans the time split divides among).
//
// Lens carries the step only on spans (rl.iteration on rl.<algo>.step and the update spans), and a span is exported
// when it ends, so the step is known only at the end of each step. The connector keeps, per run (rl.run.id, which
// transform/lens sets from nemo.run.id where the sender set none), the largest rl.iteration of its ended spans, the
// earliest start and whether its rl.<algo>.job span ended, and writes the run's gauges each time a Lens process of
// the run sends anything: its spans, or its metrics, which the OpenTelemetry SDK exports every interval while the
// process lives (a synchronous gauge keeps its last value under cumulative temporality). So the gauges stop when the
// run's processes stop, as a rank's own do, and a live process whose step does not move keeps reporting the same
// step.
//
// One component serves the traces and the metrics pipelines (traces->metrics and metrics->metrics): both halves
// share the state of their component id. Runs idle for forget_after are forgotten; at most max_runs are kept, a
// further run is not tracked (counted in otelcol_otel_rl_points_rejected{reason="lens_runs"}).
package lens

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatautil"
	"github.com/otel-rl/otelcol-rl/processors/rejections"
)

// reporting is how recently a process must have sent something to count in rl.ranks.up: Lens exports every 10 s.
const reporting = 30 * time.Second

var (
	jobSpan = regexp.MustCompile(`^rl\.[a-z_]+\.job$`)
	// processKeys are the resource attributes Lens sets that tell its processes apart (providers.py build_providers;
	// NeMo-RL's worker groups add rl.worker_group): the same process sends its spans and its metrics under them.
	processKeys = []string{"service.instance.id", "host.name", "process.pid", "rl.worker_group", "dl.rank"}
	// shared holds the state of each component id, so its traces and metrics halves see the same runs.
	shared sync.Map
)

// Config bounds the state.
type Config struct {
	// ForgetAfter is how long a run may send nothing before it is forgotten.
	ForgetAfter time.Duration `mapstructure:"forget_after"`
	// MaxRuns is how many runs are tracked at once.
	MaxRuns int `mapstructure:"max_runs"`
}

// Validate refuses a bound that tracks nothing.
func (c *Config) Validate() error {
	if c.MaxRuns < 1 || c.ForgetAfter <= 0 {
		return errors.New("max_runs must be at least 1, forget_after positive")
	}
	return nil
}

// NewFactory returns the factory of the "lens" connector (traces to metrics, metrics to metrics).
func NewFactory() connector.Factory {
	return connector.NewFactory(
		component.MustNewType("lens"),
		func() component.Config { return &Config{ForgetAfter: 24 * time.Hour, MaxRuns: 1000} },
		connector.WithTracesToMetrics(createTraces, component.StabilityLevelAlpha),
		connector.WithMetricsToMetrics(createMetrics, component.StabilityLevelAlpha),
	)
}

func runsOf(set connector.Settings, cfg component.Config) (*runs, error) {
	rejected, err := rejections.New(set.TelemetrySettings, cfg.(*Config).MaxRuns)
	if err != nil {
		return nil, err
	}
	state, _ := shared.LoadOrStore(set.ID, &runs{config: cfg.(*Config), rejected: rejected, byID: map[string]*run{}})
	return state.(*runs), nil
}

func createTraces(
	_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics,
) (connector.Traces, error) {
	state, err := runsOf(set, cfg)
	return &tracesHalf{half{runs: state, next: next}}, err
}

func createMetrics(
	_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics,
) (connector.Metrics, error) {
	state, err := runsOf(set, cfg)
	return &metricsHalf{half{runs: state, next: next}}, err
}

type run struct {
	service   string
	step      int64
	hasStep   bool
	start     pcommon.Timestamp
	finished  bool
	lastSeen  time.Time
	processes map[[16]byte]time.Time
	steppers  map[[16]byte]struct{}
}

type runs struct {
	config   *Config
	rejected *rejections.Counter
	mu       sync.Mutex
	byID     map[string]*run
}

// lensRun is the id, state and process key of a Lens resource's run (one with nemo.run.id): its rl.run.id where the
// sender set one, else nemo.run.id, as transform/lens maps it. It notes the resource's process as reporting now.
func (r *runs) lensRun(ctx context.Context, resource pcommon.Resource, now time.Time) (string, *run, [16]byte) {
	attributes := resource.Attributes()
	id, lens := attributes.Get("nemo.run.id")
	if !lens {
		return "", nil, [16]byte{}
	}
	if own, ok := attributes.Get("rl.run.id"); ok {
		id = own
	}
	state := r.byID[id.AsString()]
	if state == nil {
		if len(r.byID) >= r.config.MaxRuns {
			r.rejected.Add(ctx, rejections.OtherRuns, "rl.step", "lens_runs")
			return "", nil, [16]byte{}
		}
		service, _ := attributes.Get("service.name")
		state = &run{service: service.AsString(), processes: map[[16]byte]time.Time{}, steppers: map[[16]byte]struct{}{}}
		r.byID[id.AsString()] = state
	}
	identity := pcommon.NewMap()
	for _, key := range processKeys {
		if value, ok := attributes.Get(key); ok {
			value.CopyTo(identity.PutEmpty(key))
		}
	}
	process := pdatautil.MapHash(identity)
	state.lastSeen = now
	state.processes[process] = now
	return id.AsString(), state, process
}

func (r *runs) forget(now time.Time) {
	for id, state := range r.byID {
		if now.Sub(state.lastSeen) > r.config.ForgetAfter {
			delete(r.byID, id)
		}
	}
}

// gauges appends the run's gauges to out.
func (r *runs) gauges(out pmetric.Metrics, id string, state *run, now time.Time) {
	rm := out.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", state.service)
	rm.Resource().Attributes().PutStr("rl.run.id", id)
	rm.Resource().Attributes().PutStr("service.instance.id", id+"/lens")
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("github.com/otel-rl/otelcol-rl/processors/lens")
	stamp := pcommon.NewTimestampFromTime(now)
	gauge := func(name, unit string) pmetric.NumberDataPoint {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		m.SetUnit(unit)
		point := m.SetEmptyGauge().DataPoints().AppendEmpty()
		point.SetTimestamp(stamp)
		return point
	}
	if state.hasStep {
		gauge("rl.step", "{step}").SetIntValue(state.step)
	}
	if state.start != 0 {
		gauge("rl.run.start_time", "s").SetDoubleValue(float64(state.start) / 1e9)
	}
	finished := int64(0)
	if state.finished {
		finished = 1
	}
	gauge("rl.run.finished", "").SetIntValue(finished)
	up := int64(0)
	for key, seen := range state.processes {
		if now.Sub(seen) <= reporting {
			up++
		} else if now.Sub(seen) > r.config.ForgetAfter {
			delete(state.processes, key)
			delete(state.steppers, key)
		}
	}
	gauge("rl.ranks.up", "{rank}").SetIntValue(up)
	if len(state.steppers) > 0 {
		gauge("rl.ranks.expected", "{rank}").SetIntValue(int64(len(state.steppers)))
	}
}

// half is one pipeline's side of the connector: both share the runs of their component id.
type half struct {
	runs *runs
	next consumer.Metrics
	component.StartFunc
	component.ShutdownFunc
}

func (*half) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

// report writes the gauges of the runs seen (the lock held on entry) and sends them once the lock is released.
func (h *half) report(ctx context.Context, seen map[string]*run, now time.Time) error {
	out := pmetric.NewMetrics()
	for id, state := range seen {
		h.runs.gauges(out, id, state, now)
	}
	h.runs.mu.Unlock()
	if out.ResourceMetrics().Len() == 0 {
		return nil
	}
	return h.next.ConsumeMetrics(ctx, out)
}

type tracesHalf struct{ half }

// ConsumeTraces takes each Lens run's step, start and end from its ended spans.
func (t *tracesHalf) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	t.runs.mu.Lock()
	now := time.Now()
	t.runs.forget(now)
	seen := map[string]*run{}
	for _, rs := range td.ResourceSpans().All() {
		id, state, process := t.runs.lensRun(ctx, rs.Resource(), now)
		if state == nil {
			continue
		}
		seen[id] = state
		for _, ss := range rs.ScopeSpans().All() {
			for _, span := range ss.Spans().All() {
				if state.start == 0 || span.StartTimestamp() < state.start {
					state.start = span.StartTimestamp()
				}
				if iteration, ok := span.Attributes().Get("rl.iteration"); ok && iteration.Type() == pcommon.ValueTypeInt {
					state.steppers[process] = struct{}{}
					if !state.hasStep || iteration.Int() > state.step {
						state.step, state.hasStep = iteration.Int(), true
					}
				}
				if jobSpan.MatchString(span.Name()) {
					state.finished = true
				}
			}
		}
	}
	return t.report(ctx, seen, now)
}

type metricsHalf struct{ half }

// ConsumeMetrics writes the gauges of each Lens run whose process sent metrics: the heartbeat of a live process.
func (m *metricsHalf) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	m.runs.mu.Lock()
	now := time.Now()
	m.runs.forget(now)
	seen := map[string]*run{}
	for _, rm := range md.ResourceMetrics().All() {
		id, state, _ := m.runs.lensRun(ctx, rm.Resource(), now)
		if state == nil {
			continue
		}
		if state.start == 0 {
			state.start = pcommon.NewTimestampFromTime(now)
		}
		seen[id] = state
	}
	return m.report(ctx, seen, now)
}
