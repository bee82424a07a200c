package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/tsdb"
)

// alertSpan is one alert (its labels) over the evaluated range: when it was first pending, first firing, last firing.
type alertSpan struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	PendingAt   int64             `json:"pending_at"`
	FiredAt     *int64            `json:"fired_at"`
	LastFiring  *int64            `json:"last_firing_at"`
	ResolvedAt  *int64            `json:"resolved_at"`
	Annotations map[string]string `json:"annotations"`
}

// evaluate runs the rule files' groups over db at every multiple of the evaluation interval within the runs' ranges
// (each from its first sample to its last plus the tail, not after -now), as Prometheus's rule manager would have,
// in file order and each file's group order (promtool's test engine does the same): each Group.Eval appends its
// recording rules' series and its ALERTS and ALERTS_FOR_STATE to db at that time.
func evaluate(ctx context.Context, db *tsdb.DB, opts options, ranges map[string][2]int64) ([]alertSpan, error) {
	logger := promslog.NewNopLogger()
	promqlParser := parser.NewParser(parser.Options{})
	engine := promql.NewEngine(promql.EngineOpts{
		Logger:               logger,
		MaxSamples:           50000000,
		Timeout:              2 * time.Minute,
		LookbackDelta:        5 * time.Minute,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               promqlParser,
	})
	externalURL, _ := url.Parse("")
	manager := rules.NewManager(&rules.ManagerOptions{
		NameValidationScheme: model.UTF8Validation,
		ExternalURL:          externalURL,
		QueryFunc:            rules.EngineQueryFunc(engine, db),
		NotifyFunc:           func(context.Context, string, ...*rules.Alert) {},
		Context:              ctx,
		AppendableV2:         db,
		Queryable:            db,
		Logger:               logger,
		Parser:               promqlParser,
	})
	external := labels.FromMap(opts.externalLabels)
	loaded, errs := manager.LoadGroups(opts.evalInterval, external, "", nil, false, opts.ruleFiles...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading the rule files: %w", errs[0])
	}
	groups, err := ordered(loaded, opts.ruleFiles, promqlParser, logger)
	if err != nil {
		return nil, err
	}
	for _, group := range groups {
		for _, rule := range group.Rules() {
			if alerting, ok := rule.(*rules.AlertingRule); ok {
				alerting.SetRestored(true)
			}
		}
	}
	interval := opts.evalInterval.Milliseconds()
	spans := map[string]*alertSpan{}
	var order []string
	for _, ts := range evaluationTimes(ranges, interval, opts.evalTail.Milliseconds(), opts.now.UnixMilli()) {
		at := time.UnixMilli(ts)
		for _, group := range groups {
			group.Eval(ctx, at)
			for _, rule := range group.Rules() {
				alerting, ok := rule.(*rules.AlertingRule)
				if !ok {
					continue
				}
				for _, alert := range alerting.ActiveAlerts() {
					key := alert.Labels.String()
					span, seen := spans[key]
					if !seen {
						span = &alertSpan{Name: alerting.Name(), Labels: alert.Labels.Map(), PendingAt: alert.ActiveAt.UnixMilli()}
						spans[key], order = span, append(order, key)
					}
					span.ResolvedAt = nil
					span.Annotations = alert.Annotations.Map()
					if alert.State == rules.StateFiring {
						if span.FiredAt == nil {
							fired := alert.FiredAt.UnixMilli()
							span.FiredAt = &fired
						}
						last := ts
						span.LastFiring = &last
					}
				}
			}
		}
		for _, key := range order {
			if span := spans[key]; span.ResolvedAt == nil && !active(groups, key) {
				resolved := ts
				span.ResolvedAt = &resolved
			}
		}
	}
	result := make([]alertSpan, 0, len(order))
	for _, key := range order {
		result = append(result, *spans[key])
	}
	return result, nil
}

// evaluationTimes returns the multiples of interval within any of the ranges (each extended by tail, none after now),
// in order, each once.
func evaluationTimes(ranges map[string][2]int64, interval, tail, now int64) []int64 {
	seen := map[int64]bool{}
	var times []int64
	for _, span := range ranges {
		for ts := (span[0]/interval + 1) * interval; ts <= min(span[1]+tail, now); ts += interval {
			if !seen[ts] {
				seen[ts] = true
				times = append(times, ts)
			}
		}
	}
	slices.Sort(times)
	return times
}

// active reports whether an alert with the labels key is pending or firing in any group now.
func active(groups []*rules.Group, key string) bool {
	for _, group := range groups {
		for _, rule := range group.Rules() {
			if alerting, ok := rule.(*rules.AlertingRule); ok {
				for _, alert := range alerting.ActiveAlerts() {
					if alert.Labels.String() == key {
						return true
					}
				}
			}
		}
	}
	return false
}

// ordered returns the loaded groups in the order of the rule files and of the groups in each file.
func ordered(loaded map[string]*rules.Group, files []string, p parser.Parser, logger *slog.Logger) ([]*rules.Group, error) {
	var groups []*rules.Group
	for _, file := range files {
		parsed, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, p, logger)
		if len(errs) > 0 {
			return nil, fmt.Errorf("rule file %s: %w", file, errs[0])
		}
		for _, group := range parsed.Groups {
			found, ok := loaded[rules.GroupKey(file, group.Name)]
			if !ok {
				return nil, fmt.Errorf("rule file %s: group %q was not loaded", file, group.Name)
			}
			groups = append(groups, found)
		}
	}
	if len(groups) != len(loaded) {
		return nil, fmt.Errorf("%d rule groups loaded, %d found in the files", len(loaded), len(groups))
	}
	return slices.Clip(groups), nil
}
