"""``ttrl generate``: sample N rollouts per question from a model and write them, with the per-token signals
recorded while sampling, as a rollout pool (the input of ``ttrl bon``).

Every option is checked before the model is loaded (:mod:`.arguments`; a bad one is one line naming the
flag, exit 1), then the questions (``data.questions.read_questions``: a bad row names the file, row and
field), then the prompts this model can build (:class:`~ttrl_lightning.generate.PromptBuilder`). Rollouts
go to ``OUT.parts/`` in shards as questions finish (:class:`~ttrl_lightning.generate.ShardStore`); a re-run
of the same command skips the finished questions; Ctrl-C writes what is finished and exits 130. When every
question is done the shards are merged into ``--out`` in file order (written atomically). Under ``torchrun``
each rank samples a disjoint share of the questions (:mod:`ttrl_lightning.generate.sharding`) and writes
``OUT-stem.rank{r}-of-{W}.ext``; with a process group rank 0 merges them into ``--out`` (as ``ttrl pool
merge`` does), without one run ``ttrl pool merge`` yourself.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..answers.extractors import ANSWER_EXTRACTORS
from ..data.pool import VIEWS
from ..errors import UserError, first_line
from ..rollout.base import check_context, check_context_chars, context_limit
from ..safe_files import content_sha256, file_sha256, same_file
from .arguments import EXIT_CODES, CommandParser, nonnegative_float, nonnegative_int, positive_int, samples_per_question, seed
from .engines import add_engine_arguments, build_sampling_engine, check_engine_options, default_batch_size
from .eval import TINY_MAX_NEW_TOKENS, _device, metrics_lines, top_p
from .termination import interrupt_exit

__all__ = ["build_parser", "generate_main", "rank_out_path"]

_MAX_NEW_TOKENS_REQUIRED = ("argument --max-new-tokens: required for a real checkpoint (how long may a "
                            "rollout be? VisConf samples up to 2048 tokens)")

DESCRIPTION = """Sample --n rollouts per question and view from a model and write a rollout pool with the
per-token signals the best-of-N methods read: logprob, entropy, self_certainty (VisConf's KL(U || p) of the
raw logits) and, for a vision-language model, visual_engagement (VisConf's A_I / (A_I + A_P + A_G)) and
image_attention (LookBack's image mass), all recorded during sampling by the streaming ops (no eager
attention, no stored logits). Then `ttrl bon --pool OUT` compares selection rules on it.

Questions: --data, a .jsonl or .parquet question file (id, prompt or question, optional gold, choices,
image, reframed_prompt; docs/evaluation.md). Views: original, and reframed (the row's reframed_prompt, else
Self-Harmony's fused reframe-and-solve prompt). Prompts go through the checkpoint's chat template and
processor (tiny: models have the project's own).

Resumable: rollouts are written to OUT.parts/ in shards as questions finish; re-run the same command to
continue after Ctrl-C or a crash (finished questions are skipped; other settings are refused). Data
parallel: under torchrun each rank samples every WORLD_SIZE-th question; the rank pools are merged into
--out (see `ttrl pool merge`). Sampling defaults are VisConf's (temperature 0.7, top-p 0.8, top-k 20)."""


def build_parser() -> CommandParser:
    p = CommandParser(prog="ttrl generate", description=DESCRIPTION, epilog=EXIT_CODES)
    p.add_argument("--model", required=True, metavar="MODEL",
                   help="tiny:<arch> (tiny:qwen2_vl for a vision-language model), a local Hugging Face "
                        "checkpoint folder, or a .ckpt written by `ttrl fit`")
    p.add_argument("--data", required=True, metavar="FILE", help="the question file, .jsonl or .parquet")
    p.add_argument("--out", required=True, metavar="POOL",
                   help="the pool to write, .jsonl or .parquet (its shards go to POOL.parts/)")
    p.add_argument("--n", "--rollouts", dest="n", type=samples_per_question, default=32,
                   help="rollouts per question and view (under torchrun write --rollouts: torchrun's own "
                        "parser refuses --n as an ambiguous abbreviation of its options)")
    p.add_argument("--views", nargs="+", choices=VIEWS, default=[VIEWS[0]], metavar="VIEW",
                   help="original, and reframed for Self-Harmony's second view")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help=f"tokens per rollout at most; required for a real checkpoint (default "
                        f"{TINY_MAX_NEW_TOKENS} for a tiny model)")
    p.add_argument("--temperature", type=nonnegative_float, default=0.7,
                   help="sampling temperature (0: greedy, then all n rollouts are the same)")
    p.add_argument("--top-p", type=top_p, default=0.8, help="nucleus sampling, in (0, 1] (1: off)")
    p.add_argument("--top-k", type=nonnegative_int, default=20, help="top-k sampling (0: off)")
    p.add_argument("--seed", type=seed, default=0,
                   help="sampling seed (each question and view derives its own; and the initialisation "
                        "of a tiny:<arch> model)")
    p.add_argument("--prompt-format", choices=("auto", "chat", "plain"), default="auto",
                   help="chat: the checkpoint's chat template; plain: the prompt as written; auto: chat when "
                        "the checkpoint has a template")
    p.add_argument("--answer-extractor", choices=ANSWER_EXTRACTORS.names(), default="final_answer",
                   help="how a rollout's answer is read and written into the pool")
    add_engine_arguments(p)
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="questions per engine call (default 1 for hf: each (question, view) sampled alone with "
                        "its own seed and the signals recorded while sampling; 16 for vllm). Above 1 a batch "
                        "of fixed positions in the question list shares one seed, so the pool depends on the "
                        "batch size (and, under torchrun, on the number of ranks); the signals then come from "
                        "one replay through the fused op. Text prompts only")
    p.add_argument("--shard-size", type=positive_int, default=8,
                   help="questions per shard written to POOL.parts/")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu; "
                                                  "under torchrun cuda:LOCAL_RANK)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                   help="cast the model's weights (default: the checkpoint's)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def rank_out_path(out: str, rank: int, world_size: int) -> str:
    """``pool.parquet`` -> ``pool.rank0-of-2.parquet``: the pool of one data-parallel rank."""
    base, ext = os.path.splitext(out)
    return f"{base}.rank{rank}-of-{world_size}{ext}"


def _check_options(parser: CommandParser, args: argparse.Namespace, argv: list[str]) -> None:
    if not args.out.endswith((".jsonl", ".parquet")):
        parser.error(f"argument --out: a pool file ends in .jsonl or .parquet, got {args.out!r}")
    if os.path.isdir(args.out):
        parser.error(f"argument --out: {args.out!r} is a directory")
    if len(set(args.views)) != len(args.views):
        parser.error(f"argument --views: a view is given twice ({' '.join(args.views)})")
    if VIEWS[0] not in args.views:
        parser.error("argument --views: a pool needs the original view (add `original`)")
    for flag, path in (("--data", args.data), ("--model", args.model)):
        if os.path.exists(path) and same_file(path, args.out):
            parser.error(f"argument --out: {args.out!r} would overwrite {flag} {path!r}")
    check_engine_options(parser, args, argv)
    if args.batch_size is None:
        args.batch_size = default_batch_size(args)


def _settings(args: argparse.Namespace, max_new: int) -> dict:
    """What decides the rollouts (the shards' manifest): a re-run must match it. The model is recorded by
    its content too (``safe_files.content_sha256``), so a checkpoint replaced at the same path is refused
    rather than mixed into the pool."""
    from ..models import is_tiny

    model_sha = None if is_tiny(args.model) else content_sha256(args.model)  # a tiny model is its name + seed
    return {"model": args.model, "model_sha256": model_sha, "data": os.path.abspath(args.data),
            "data_sha256": file_sha256(args.data),
            "n": args.n, "views": list(args.views), "max_new_tokens": max_new,
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "seed": args.seed,
            "prompt_format": args.prompt_format, "answer_extractor": args.answer_extractor,
            "dtype": args.dtype, "engine": args.engine, "batch_size": args.batch_size}


def _print_metrics(records: list[dict], views: list[str], extractor: str) -> None:
    """avg@k / maj@k / pass@k of every view over the questions that have a gold answer."""
    from ..eval.sampled import sampled_metrics

    graded = [r for r in records if r["gold"] is not None]
    if not graded:
        print("no question has a gold answer: no avg@k / maj@k / pass@k")
        return
    for view in views:
        texts = [[ro["text"] for ro in r["rollouts"] if ro["view"] == view] for r in graded]
        metrics = sampled_metrics(texts, [r["gold"] for r in graded], [r["choices"] for r in graded],
                                  [r["id"] for r in graded], extract=ANSWER_EXTRACTORS[extractor])
        print(f"{view} view, {metrics.num_questions} questions with a gold answer:")
        for line in metrics_lines(metrics):
            print("  " + line)


def generate_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_options(parser, args, argv)
    from ..generate.sharding import DataParallel

    from .policy_source import policy_kind

    kind = policy_kind(args.model)
    max_new = args.max_new_tokens
    if max_new is None and kind == "hf":
        parser.error(_MAX_NEW_TOKENS_REQUIRED)
    from ..data.questions import read_questions

    questions = read_questions(args.data)
    dp = DataParallel.from_environment()
    device = args.device
    if device is None and dp.world_size > 1:
        import torch

        device = f"cuda:{dp.local_rank}" if torch.cuda.is_available() else "cpu"
    device = _device(parser, device)
    try:
        return _run(parser, args, questions, kind, max_new, device, dp)
    finally:
        dp.close()


class _Tokens:
    """Completion tokens sampled so far and their rate, for the progress bar and the closing line."""

    def __init__(self):
        self.count, self.t0 = 0, time.perf_counter()

    def add(self, n: int, bar) -> None:
        self.count += n
        bar.set_postfix_str(f"{self.rate:.1f} tok/s")

    @property
    def rate(self) -> float:
        return self.count / max(time.perf_counter() - self.t0, 1e-9)


def _load(parser, args, questions, max_new, device):
    """``(policy, max_new, builder, engine, seconds)``: the policy, the token budget (a tiny model's default
    when not given), the prompt builder (questions checked against it) and the sampling engine: at
    ``--batch-size 1`` on an engine that samples one question per call by default (the HF engine), one that
    samples each prompt by its own ``generate`` call (``per_prompt_generate``), for one (question, view) and
    its own seed at a time."""
    from ..generate import PromptBuilder
    from ..models import load_processor
    from .policy_source import load_policy

    t0 = time.perf_counter()
    policy = load_policy(args.model, dtype=args.dtype, device=device, seed=args.seed)
    if max_new is None:
        if not policy.is_tiny:
            parser.error(_MAX_NEW_TOKENS_REQUIRED)
        max_new = TINY_MAX_NEW_TOKENS
    base = policy.spec["model"] if policy.spec else args.model  # a checkpoint's processor is its base model's
    try:
        processor = load_processor(base)
    except (OSError, ValueError, KeyError, ImportError) as e:
        raise UserError(f"argument --model: the processor of {base} cannot be loaded "
                        f"({first_line(e)})") from None
    builder = PromptBuilder(policy.tokenizer, processor, args.prompt_format, args.data, model=args.model)
    from ..rollout import ROLLOUT_ENGINES

    builder.check(questions, ROLLOUT_ENGINES[args.engine])
    extra = {"per_prompt_generate": True} if _per_question(args) else {}
    engine = build_sampling_engine(args, policy.tokenizer, record_signals=True, processor=processor, **extra)
    return policy, max_new, builder, engine, time.perf_counter() - t0


def _per_question(args: argparse.Namespace) -> bool:
    """Whether each (question, view) is sampled alone with its own seed: ``--batch-size 1`` on an engine that
    samples one question per call by default (the HF engine); an engine that batches by default (vLLM) always
    samples batches."""
    from ..rollout import ROLLOUT_ENGINES

    return args.batch_size == 1 and ROLLOUT_ENGINES[args.engine].default_batch_size == 1


def _sample_one_by_one(args, questions, todo, policy, builder, engine, params, extract, store, bar, tokens):
    """Each question's views sampled in turn, one engine call per (question, view) with its own seed, so a
    question's rollouts do not depend on which other questions run, in which order, on which rank, or
    whether the run was resumed."""
    from ..generate import sample_batch
    from ..seeding import derive_seed

    for i in todo:
        q = questions[i]
        rollouts = []
        for view in args.views:
            seed_qv = derive_seed(args.seed, "generate", i, VIEWS.index(view))
            (record,), count = sample_batch(engine, policy.model, [builder.request(q, view)], [q], [view], params,
                                            seed_qv, extract)
            rollouts.extend(record["rollouts"])
            tokens.add(count, bar)
        store.add({"id": q["id"], "gold": q["gold"], "choices": q["choices"], "rollouts": rollouts})
        bar.update(1)


def _sample_batches(args, questions, mine, finished, policy, builder, engine, params, extract, store, bar,
                    tokens):
    """Batches of fixed positions in this rank's share: a re-run redoes an unfinished batch whole, with the
    same seed, and keeps the questions it did not have."""
    from ..generate import sample_batch
    from ..seeding import derive_seed

    for b in range(0, len(mine), args.batch_size):
        members = mine[b:b + args.batch_size]
        if all(questions[i]["id"] in finished for i in members):
            continue
        batch = [questions[i] for i in members]
        prompts = [builder.request(q, view) for q in batch for view in args.views]
        records, count = sample_batch(engine, policy.model, prompts, batch, list(args.views), params,
                                      derive_seed(args.seed, "generate_batch", members[0], args.batch_size),
                                      extract)
        for rec in records:
            if rec["id"] not in finished:
                store.add(rec)
                bar.update(1)
        tokens.add(count, bar)


def _write_pools(args, questions, mine, finished, store_dir, settings, dp, speed: str) -> int:
    """The pool at ``--out`` (one rank), or this rank's pool and, under a process group, rank 0's merge."""
    from ..data.pool import read_records, write_records
    from ..generate import merge_pool_files, merge_records

    ids = [q["id"] for q in questions]
    if dp.world_size == 1:
        records = merge_records([(store_dir, finished.values())], ids)
        write_records(records, args.out, settings)
        print(f"wrote {len(records)} questions to {args.out}; {speed}")
        _print_metrics(records, args.views, args.answer_extractor)
        return 0
    rank_path = rank_out_path(args.out, dp.rank, dp.world_size)
    write_records([finished[questions[i]["id"]] for i in mine], rank_path,
                  {**settings, "rank": dp.rank, "world_size": dp.world_size})
    print(f"rank {dp.rank}: wrote {len(mine)} questions to {rank_path}; {speed}")
    dp.barrier()
    paths = [rank_out_path(args.out, r, dp.world_size) for r in range(dp.world_size)]
    if not dp.grouped:
        if dp.rank == 0:
            print(f"no process group: merge the ranks' pools with `ttrl pool merge {' '.join(paths)} --out "
                  f"{args.out} --data {args.data}` once every rank has finished")
        return 0
    if dp.rank == 0:
        count = merge_pool_files(paths, args.out, ids)
        print(f"merged {dp.world_size} rank pools ({count} questions) into {args.out}")
        _print_metrics(list(read_records(args.out)), args.views, args.answer_extractor)
    dp.barrier()
    return 0


#: what a prompt's tokens plus the budget must fit
_CONTEXT = "the model's context (max_position_embeddings)"


def _run(parser, args, questions, kind, max_new, device, dp) -> int:
    from ..eval.progress_bar import progress_bar
    from ..generate import ShardStore, rank_indices
    from ..rollout import SamplingParams

    policy, max_new, builder, engine, t_load = _load(parser, args, questions, max_new, device)
    limit = context_limit(engine, policy.model)
    mine = rank_indices(len(questions), dp.rank, dp.world_size)
    # the context, before anything is written; a question with images is checked once its inputs exist
    for i in mine:
        q = questions[i]
        if not q["images"]:
            texts = [builder.text(q, view) for view in args.views]
            check_context_chars(texts, max_new, limit, policy.tokenizer, _CONTEXT, names=[q["id"]] * len(texts))
            lengths = [len(policy.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
            check_context(lengths, max_new, limit, _CONTEXT, names=[q["id"]] * len(lengths))
    settings = _settings(args, max_new)
    store = ShardStore(args.out, settings, dp.rank, dp.world_size, args.shard_size)
    finished = store.open()
    todo = [i for i in mine if questions[i]["id"] not in finished]
    params = SamplingParams(n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_new_tokens=max_new, seed=args.seed)
    extract = ANSWER_EXTRACTORS[args.answer_extractor]
    rank_note = f" (rank {dp.rank} of {dp.world_size}: {len(mine)} questions)" if dp.world_size > 1 else ""
    print(f"ttrl generate: {len(questions)} questions x {args.n} rollouts x {len(args.views)} view(s), "
          f"{builder.format} prompts, {len(mine) - len(todo)} already in {store.dir}{rank_note}", flush=True)

    bar = progress_bar(total=len(mine), desc="questions", enabled=not args.no_progress)
    bar.update(len(mine) - len(todo))
    tokens = _Tokens()
    interrupted = None  # the KeyboardInterrupt (Ctrl-C, or SIGTERM from the dispatcher) that stopped sampling
    try:
        if _per_question(args):
            _sample_one_by_one(args, questions, todo, policy, builder, engine, params, extract, store, bar, tokens)
        else:
            _sample_batches(args, questions, mine, finished, policy, builder, engine, params, extract, store,
                            bar, tokens)
    except KeyboardInterrupt as e:
        interrupted = e
    finally:
        bar.close()
        store.flush()  # keep everything finished, also on an error
        store.close()
    t_gen = time.perf_counter() - tokens.t0
    finished = store.open()
    store.close()
    done = sum(questions[i]["id"] in finished for i in mine)
    speed = (f"{tokens.count:,} tokens in {t_gen:.1f} s ({tokens.count / max(t_gen, 1e-9):.1f} tokens/s; model "
             f"loaded in {t_load:.1f} s)")
    if interrupted is not None:
        said, code = interrupt_exit(interrupted)
        print(f"\n{said}: {done} of {len(mine)} questions are in {store.dir}; run the same command "
              f"again to continue; {speed}", file=sys.stderr)
        return code
    return _write_pools(args, questions, mine, finished, store.dir, settings, dp, speed)
