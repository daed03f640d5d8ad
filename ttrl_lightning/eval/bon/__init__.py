"""Best-of-N evaluation (VisConf Table-1 protocol): the loop (:mod:`.protocol`) over per-rollout scores
(:mod:`.rollout_scores`), fixed subsets (:mod:`.subsets`), the per-subset calibration (:mod:`.calibration`),
batched votes (:mod:`.votes`) and the method registry (:mod:`.methods`, read through :mod:`.chunk`); the
per-question oracle (:mod:`.oracle`), the paired bootstrap (:mod:`.bootstrap`), several pools
(:mod:`.benchmarks`), within-question AUC (:mod:`.auc`), the token-fusion ablation (:mod:`.token_fusion`) and
the report (:mod:`.report`)."""
