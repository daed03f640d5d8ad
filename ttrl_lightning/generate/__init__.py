"""From a model and a question set to a rollout pool (``ttrl generate``): prompts per view, sampling with the
per-token signals recorded during generation, a sharded resumable writer, data-parallel sharding and the
merge of shards."""
from .merge import merge_pool_files, merge_records
from .prompts import FUSED_REFRAME_INSTRUCTION, PROMPT_FORMATS, PromptBuilder, view_prompt
from .sampler import sample_batch, sample_sequences
from .sharding import DataParallel, rank_indices
from .store import ShardStore

__all__ = ["FUSED_REFRAME_INSTRUCTION", "PROMPT_FORMATS", "PromptBuilder", "view_prompt", "sample_sequences",
           "sample_batch",
           "DataParallel", "rank_indices", "ShardStore", "merge_pool_files", "merge_records"]
