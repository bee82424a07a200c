// Command otel-rl-backfill writes Prometheus TSDB blocks of replayed runs (`otel-rl replay`) and, given rule files,
// the series Prometheus's own rule engine would have recorded over them: recording rules, ALERTS and
// ALERTS_FOR_STATE, evaluated at the past timestamps of the run with the rules package Prometheus runs.
//
// Input (standard input, JSON lines): `{"series": ID, "labels": {...}}` declares a series; `{"s": ID, "t": MS, "v":
// VALUE}` is a float sample (VALUE a number, or "NaN", "+Inf", "-Inf"); `{"s": ID, "t": MS, "h": {...}}` an integer
// native histogram (schema, zero_threshold, zero_count, count, sum, and positive / negative as {"offset": the native
// index of the first bucket, "counts": [...]}).
//
// Output: one block per two-hour range in -out (a folder of their own, renamed into place whole), each marked as
// made from out-of-order samples (the compaction hint Prometheus gives blocks of its out-of-order head), so that a
// block overlapping a Prometheus head neither moves the head's lower bound nor truncates it when Prometheus opens
// its data (`thanos tools bucket upload-blocks` adds the labels a Thanos bucket needs). A block's ULID is derived
// from its time range and content, so the same input gives the same blocks. Standard output gets a JSON summary: the blocks,
// and each alert that was pending or firing with when.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
)

type labelFlags map[string]string

func (f labelFlags) String() string { return fmt.Sprint(map[string]string(f)) }

func (f labelFlags) Set(text string) error {
	name, val, ok := strings.Cut(text, "=")
	if !ok || name == "" {
		return fmt.Errorf("a label must be name=value, got %q", text)
	}
	f[name] = val
	return nil
}

type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(text string) error {
	*f = append(*f, text)
	return nil
}

type options struct {
	out            string
	ruleFiles      listFlag
	evalInterval   time.Duration
	evalTail       time.Duration
	now            time.Time
	externalLabels labelFlags
	keepLabel      string
}

func main() {
	opts := options{externalLabels: labelFlags{}}
	nowMS := flag.Int64("now", 0, "unix milliseconds no rule is evaluated after (default: the current time)")
	flag.StringVar(&opts.out, "out", "", "folder the blocks are written into (required)")
	flag.Var(&opts.ruleFiles, "rule-file", "a Prometheus rule file to evaluate over the samples (repeatable)")
	flag.DurationVar(&opts.evalInterval, "eval-interval", 15*time.Second, "how often the rules are evaluated")
	flag.DurationVar(&opts.evalTail, "eval-tail", 10*time.Minute, "how long after the last sample the rules are evaluated")
	flag.Var(opts.externalLabels, "external-label", "name=value, an external label of the rule evaluation (repeatable)")
	flag.StringVar(&opts.keepLabel, "keep-label", "rl_run_id", "only series with this label are written")
	flag.Parse()
	if opts.out == "" {
		fail(errors.New("-out is required"))
	}
	opts.now = time.Now()
	if *nowMS != 0 {
		opts.now = time.UnixMilli(*nowMS)
	}
	summary, err := run(context.Background(), os.Stdin, opts)
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(summary); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "otel-rl-backfill: %v\n", err)
	os.Exit(1)
}

// summary is what the command prints: the blocks it wrote and the alerts the rules raised.
type summary struct {
	Series  int         `json:"series"`
	Samples int         `json:"samples"`
	Blocks  []blockInfo `json:"blocks"`
	Alerts  []alertSpan `json:"alerts"`
}

func run(ctx context.Context, input io.Reader, opts options) (*summary, error) {
	work, err := os.MkdirTemp("", "otel-rl-backfill-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	dbOpts := tsdb.DefaultOptions()
	dbOpts.WALSegmentSize = -1
	dbOpts.RetentionDuration = 0
	// Rule outputs are appended at past timestamps, behind the newest sample: the whole range is out-of-order-able.
	dbOpts.OutOfOrderTimeWindow = int64(100 * 365 * 24 * time.Hour / time.Millisecond)
	db, err := tsdb.Open(work, promslog.NewNopLogger(), nil, dbOpts, nil)
	if err != nil {
		return nil, fmt.Errorf("open the working TSDB: %w", err)
	}
	defer db.Close()
	db.DisableCompactions()
	loaded, err := load(ctx, db, input, opts.keepLabel)
	if err != nil {
		return nil, err
	}
	out := &summary{Series: loaded.series, Samples: loaded.samples, Blocks: []blockInfo{}, Alerts: []alertSpan{}}
	if loaded.samples == 0 {
		return out, nil
	}
	if len(opts.ruleFiles) > 0 {
		out.Alerts, err = evaluate(ctx, db, opts, loaded.ranges)
		if err != nil {
			return nil, err
		}
	}
	out.Blocks, err = writeBlocks(ctx, db, opts)
	return out, err
}

type loadedInput struct {
	series, samples int
	mint, maxt      int64
	// ranges holds the first and last sample time of each value of the keep label (each run): the rules are evaluated
	// over these alone, not over the gaps between runs recorded days apart.
	ranges map[string][2]int64
}

type inputLine struct {
	Series *uint64           `json:"series"`
	Labels map[string]string `json:"labels"`
	S      uint64            `json:"s"`
	T      int64             `json:"t"`
	V      *jsonFloat        `json:"v"`
	H      *histogramSample  `json:"h"`
}

type jsonFloat float64

func (f *jsonFloat) UnmarshalJSON(data []byte) error {
	var text string
	if json.Unmarshal(data, &text) == nil {
		parsed, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return fmt.Errorf("a value must be a number, \"NaN\", \"+Inf\" or \"-Inf\", got %q", text)
		}
		*f = jsonFloat(parsed)
		return nil
	}
	var number float64
	if err := json.Unmarshal(data, &number); err != nil {
		return err
	}
	*f = jsonFloat(number)
	return nil
}

type bucketSide struct {
	Offset int32    `json:"offset"`
	Counts []uint64 `json:"counts"`
}

type histogramSample struct {
	Schema        int32      `json:"schema"`
	ZeroThreshold float64    `json:"zero_threshold"`
	ZeroCount     uint64     `json:"zero_count"`
	Count         uint64     `json:"count"`
	Sum           jsonFloat  `json:"sum"`
	Positive      bucketSide `json:"positive"`
	Negative      bucketSide `json:"negative"`
}

// native is the sample as Prometheus's integer native histogram: one span per side, counts as deltas.
func (h *histogramSample) native() *histogram.Histogram {
	spans := func(side bucketSide) ([]histogram.Span, []int64) {
		if len(side.Counts) == 0 {
			return nil, nil
		}
		deltas := make([]int64, len(side.Counts))
		previous := int64(0)
		for i, count := range side.Counts {
			deltas[i] = int64(count) - previous
			previous = int64(count)
		}
		return []histogram.Span{{Offset: side.Offset, Length: uint32(len(side.Counts))}}, deltas
	}
	positiveSpans, positiveDeltas := spans(h.Positive)
	negativeSpans, negativeDeltas := spans(h.Negative)
	native := &histogram.Histogram{
		CounterResetHint: histogram.UnknownCounterReset,
		Schema:           h.Schema,
		ZeroThreshold:    h.ZeroThreshold,
		ZeroCount:        h.ZeroCount,
		Count:            h.Count,
		Sum:              float64(h.Sum),
		PositiveSpans:    positiveSpans,
		PositiveBuckets:  positiveDeltas,
		NegativeSpans:    negativeSpans,
		NegativeBuckets:  negativeDeltas,
	}
	return native.Compact(0)
}

// load appends every sample of input to db.
func load(ctx context.Context, db *tsdb.DB, input io.Reader, keepLabel string) (loadedInput, error) {
	result := loadedInput{mint: math.MaxInt64, maxt: math.MinInt64, ranges: map[string][2]int64{}}
	series := map[uint64]labels.Labels{}
	reader := bufio.NewReaderSize(input, 1<<20)
	app := db.Appender(ctx)
	pending := 0
	for number := 1; ; number++ {
		text, err := reader.ReadBytes('\n')
		if len(text) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return result, err
		}
		var item inputLine
		if err := json.Unmarshal(text, &item); err != nil {
			return result, fmt.Errorf("input line %d: %w", number, err)
		}
		if item.Series != nil {
			series[*item.Series] = labels.FromMap(item.Labels)
			result.series++
			continue
		}
		lset, ok := series[item.S]
		if !ok {
			return result, fmt.Errorf("input line %d: series %d was not declared", number, item.S)
		}
		switch {
		case item.V != nil:
			_, err = app.Append(0, lset, item.T, float64(*item.V))
		case item.H != nil:
			_, err = app.AppendHistogram(0, lset, item.T, item.H.native(), nil)
		default:
			err = errors.New(`a sample needs "v" or "h"`)
		}
		if err != nil {
			return result, fmt.Errorf("input line %d (%s at %d): %w", number, lset, item.T, err)
		}
		result.samples++
		result.mint, result.maxt = min(result.mint, item.T), max(result.maxt, item.T)
		if key := lset.Get(keepLabel); key != "" {
			span, seen := result.ranges[key]
			if !seen {
				span = [2]int64{item.T, item.T}
			}
			result.ranges[key] = [2]int64{min(span[0], item.T), max(span[1], item.T)}
		}
		if pending++; pending == 10000 {
			if err := app.Commit(); err != nil {
				return result, err
			}
			app, pending = db.Appender(ctx), 0
		}
	}
	return result, app.Commit()
}
