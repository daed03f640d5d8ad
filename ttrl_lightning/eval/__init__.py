"""Evaluation: sampled accuracy of k completions per question (:mod:`.sampled`: avg@k, maj@k, pass@k, what
``ttrl eval`` and TTRL's validation report), the agent's process metrics (:mod:`.process_metrics`: RaPR,
RaCPR) and best-of-N selection over a rollout pool (:mod:`.bon`, VisConf's Table-1 protocol)."""
