package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// blockInfo describes one block written (or found already there, Existing).
type blockInfo struct {
	ULID     string `json:"ulid"`
	MinTime  int64  `json:"min_time"`
	MaxTime  int64  `json:"max_time"`
	Series   uint64 `json:"series"`
	Samples  uint64 `json:"samples"`
	Existing bool   `json:"existing"`
}

// rangeWriter gathers the samples of one block range.
type rangeWriter struct {
	writer *tsdb.BlockWriter
	app    storage.Appender
	digest hash.Hash
}

// writeBlocks copies every series of db that has the keep label into blocks of tsdb.DefaultBlockDuration (aligned as
// Prometheus aligns its own), each renamed into opts.out under a ULID made of its start and a digest of its content.
func writeBlocks(ctx context.Context, db *tsdb.DB, opts options) ([]blockInfo, error) {
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(opts.out, ".backfill-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	querier, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	defer querier.Close()
	set := querier.Select(ctx, true, nil, labels.MustNewMatcher(labels.MatchNotEqual, opts.keepLabel, ""))
	writers := map[int64]*rangeWriter{}
	blockMS := tsdb.DefaultBlockDuration
	writer := func(t int64) (*rangeWriter, error) {
		start := t - ((t%blockMS)+blockMS)%blockMS
		if found, ok := writers[start]; ok {
			return found, nil
		}
		created, err := tsdb.NewBlockWriter(promslog.NewNopLogger(), scratch, blockMS)
		if err != nil {
			return nil, err
		}
		found := &rangeWriter{writer: created, app: created.Appender(ctx), digest: sha256.New()}
		writers[start] = found
		return found, nil
	}
	defer func() {
		for _, w := range writers {
			_ = w.writer.Close()
		}
	}()
	var iterator chunkenc.Iterator
	for set.Next() {
		series := set.At()
		lset := series.Labels()
		iterator = series.Iterator(iterator)
		for kind := iterator.Next(); kind != chunkenc.ValNone; kind = iterator.Next() {
			var (
				t      int64
				target *rangeWriter
			)
			switch kind {
			case chunkenc.ValFloat:
				var v float64
				t, v = iterator.At()
				if target, err = writer(t); err != nil {
					return nil, err
				}
				_, err = target.app.Append(0, lset, t, v)
				record(target.digest, lset, t, math.Float64bits(v), "")
			case chunkenc.ValHistogram:
				var h *histogram.Histogram
				t, h = iterator.AtHistogram(nil)
				if target, err = writer(t); err != nil {
					return nil, err
				}
				_, err = target.app.AppendHistogram(0, lset, t, h, nil)
				record(target.digest, lset, t, 0, h.String())
			case chunkenc.ValFloatHistogram:
				var fh *histogram.FloatHistogram
				t, fh = iterator.AtFloatHistogram(nil)
				if target, err = writer(t); err != nil {
					return nil, err
				}
				_, err = target.app.AppendHistogram(0, lset, t, nil, fh)
				record(target.digest, lset, t, 1, fh.String())
			}
			if err != nil {
				return nil, fmt.Errorf("%s at %d: %w", lset, t, err)
			}
		}
		if err := iterator.Err(); err != nil {
			return nil, err
		}
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	starts := make([]int64, 0, len(writers))
	for start := range writers {
		starts = append(starts, start)
	}
	slices.Sort(starts)
	blocks := make([]blockInfo, 0, len(starts))
	for _, start := range starts {
		info, err := flush(ctx, writers[start], scratch, opts)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, info)
	}
	return blocks, nil
}

// record adds one sample to a block's content digest.
func record(digest hash.Hash, lset labels.Labels, t int64, bits uint64, text string) {
	var number [16]byte
	binary.LittleEndian.PutUint64(number[:8], uint64(t))
	binary.LittleEndian.PutUint64(number[8:], bits)
	digest.Write([]byte(lset.String()))
	digest.Write(number[:])
	digest.Write([]byte(text))
}

// flush writes one range's block into scratch, gives it its content ULID and the out-of-order hint, and renames it
// into opts.out; a block of that ULID already there is left as it is.
func flush(ctx context.Context, w *rangeWriter, scratch string, opts options) (blockInfo, error) {
	if err := w.app.Commit(); err != nil {
		return blockInfo{}, err
	}
	written, err := w.writer.Flush(ctx)
	if err != nil {
		return blockInfo{}, err
	}
	folder := filepath.Join(scratch, written.String())
	raw, err := os.ReadFile(filepath.Join(folder, "meta.json"))
	if err != nil {
		return blockInfo{}, err
	}
	var parsed tsdb.BlockMeta
	if err := json.Unmarshal(raw, &parsed); err != nil {
		return blockInfo{}, err
	}
	sum := w.digest.Sum(nil)
	id, err := ulid.New(uint64(max(parsed.MinTime, 0)), &fixedEntropy{sum[:10]})
	if err != nil {
		return blockInfo{}, err
	}
	parsed.ULID = id
	parsed.Compaction.Sources = []ulid.ULID{id}
	parsed.Compaction.SetOutOfOrder()
	encoded, err := json.MarshalIndent(&parsed, "", "\t")
	if err != nil {
		return blockInfo{}, err
	}
	if err := os.WriteFile(filepath.Join(folder, "meta.json"), encoded, 0o644); err != nil {
		return blockInfo{}, err
	}
	info := blockInfo{
		ULID:    id.String(),
		MinTime: parsed.MinTime,
		MaxTime: parsed.MaxTime,
		Series:  parsed.Stats.NumSeries,
		Samples: parsed.Stats.NumSamples,
	}
	destination := filepath.Join(opts.out, id.String())
	if _, err := os.Stat(destination); err == nil {
		info.Existing = true
		return info, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return blockInfo{}, err
	}
	return info, os.Rename(folder, destination)
}

// fixedEntropy hands out the bytes it holds: a ULID's random part taken from a digest.
type fixedEntropy struct{ bytes []byte }

func (f *fixedEntropy) Read(p []byte) (int, error) {
	n := copy(p, f.bytes)
	f.bytes = f.bytes[n:]
	if n < len(p) {
		return n, errors.New("digest exhausted")
	}
	return n, nil
}
