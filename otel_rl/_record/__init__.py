"""What a record call takes and summarizes: user values converted and validated one at a time (:mod:`.inputs`), the
bucket layouts (:mod:`.buckets`), one pass over the data into :class:`~otel_rl._record.stats.Statistics`
(:mod:`.stats`, compiled in :mod:`.kernels`, threaded by :mod:`.parallel`), the rollout health signals and their joint
sums (:mod:`.rollouts`, :mod:`.joint`), and the samples a caller offers (:mod:`.samples`). Nothing here keeps state
between calls or talks to an exporter."""
