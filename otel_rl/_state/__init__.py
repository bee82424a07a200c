"""What is kept between calls: the cumulative metrics (:mod:`.store`), a step's kept samples until the step closes
(:mod:`.steps`), the rank's steps and phases as spans and gauges (:mod:`.phases`), what was rejected or dropped
(:mod:`.self_telemetry`) and the merge canary (:mod:`.canary`)."""
