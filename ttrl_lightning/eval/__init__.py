"""Best-of-N evaluation (VisConf Table-1 protocol): the loop (:mod:`.bon`) over per-rollout scores
(:mod:`.rollout_scores`), fixed subsets (:mod:`.subsets`), the per-subset calibration (:mod:`.calibration`),
batched votes (:mod:`.votes`) and the method registry (:mod:`.methods`, read through :mod:`.chunk`); the
per-question oracle (:mod:`.reference`), the paired bootstrap (:mod:`.bootstrap`) and the report
(:mod:`.report`)."""
