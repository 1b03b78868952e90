"""Regenerate sglang_pd_sim/sglang_0_5_23_flags.tsv from the flag table of `sglang serve` 0.5.23.

Usage: python tools/gen_flags_tsv.py REFERENCE_TSV > sglang_pd_sim/sglang_0_5_23_flags.tsv

The reference table (columns flags, dest, type, default, choices, action) was read off the installed
sglang 0.5.23 parser (`ServerArgs.add_cli_args`). It has no nargs column, so the list-valued flags are
named here: upstream derives `nargs="+"` from every `List[...]` field of its ServerArgs dataclass unless
the field gives its own nargs. A flag missing from NARGS takes exactly one value.
"""

import sys

NARGS: dict[str, str] = {
    # List[...] fields: nargs "+" (derived by sglang's add_cli_args_from_dataclass)
    "numa_node": "+",
    "gc_threshold": "+",
    "log_requests_target": "+",
    "tokenizer_metrics_allowed_custom_labels": "+",
    "bucket_time_to_first_token": "+",
    "bucket_inter_token_latency": "+",
    "bucket_e2e_request_latency": "+",
    "prompt_tokens_buckets": "+",
    "generation_tokens_buckets": "+",
    "flashinfer_autotune_skip_ops": "+",
    "cuda_graph_bs_decode": "+",
    "cuda_graph_bs_prefill": "+",
    "allowed_media_domains": "+",
    "encoder_urls": "+",
    "encoder_register_urls": "+",
    "prefill_delayer_forward_passes_buckets": "+",
    "prefill_delayer_wait_seconds_buckets": "+",
    "debug_tensor_dump_layers": "+",
    # fields that set their own nargs
    "uvicorn_access_log_exclude_prefixes": "*",
    "lora_target_modules": "*",
    "lora_paths": "*",
    "custom_weight_loader": "*",
    "model_checksum": "?",
}
CONST = {"model_checksum": "''"}
REQUIRED = {"model_path"}

HEADER = """\
# Flag table of `sglang serve` 0.5.23 (sglang.srt.server_args.ServerArgs.add_cli_args), as read off the
# installed sglang 0.5.23 parser: 532 actions. Source: the project's reference table
# sglang-0.5.23-serve-flags.tsv (columns flags..action). Added here: nargs (not in the reference; from
# the List[...] fields of upstream's ServerArgs dataclass), const, required.
# Regenerate with tools/gen_flags_tsv.py. Columns are tab-separated; defaults are Python literals.
"""


def main(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        rows = [line.rstrip("\n").split("\t") for line in fh if line.strip()]
    header, body = rows[0], rows[1:]
    if header != ["flags", "dest", "type", "default", "choices", "action"]:
        print(f"unexpected header {header}", file=sys.stderr)
        return 1
    out = [HEADER.rstrip("\n"), "\t".join([*header, "nargs", "const", "required"])]
    seen = set()
    for row in body:
        dest = row[1]
        out.append("\t".join([*row, NARGS.get(dest, ""), CONST.get(dest, ""), "1" if dest in REQUIRED else ""]))
        seen.add(dest)
    missing = set(NARGS) - seen
    if missing:
        print(f"NARGS names unknown dests: {sorted(missing)}", file=sys.stderr)
        return 1
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
