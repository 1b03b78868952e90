"""Serve generated repositories: `python -m tests.sandbox.hubsim --repo org/name --seeds 0 1 --port 8900`.

The last seed's revision is the repository's `main`. The token, when wanted, is read from a file (never argv)."""

import argparse
import json
from pathlib import Path

from . import Hub, HubServer, generate
from .repo import BROKEN


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="hubsim")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--repo", default="hubsim/tiny-llama")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--shard-bytes", type=int, default=1 << 20)
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--broken", choices=BROKEN, help="the last seed's revision is one sglang cannot load (repo.py)")
    args = parser.parse_args(argv)
    revisions = [generate(seed, shards=args.shards, shard_bytes=args.shard_bytes,
                          broken=args.broken if i == len(args.seeds) - 1 else None)
                 for i, seed in enumerate(args.seeds)]  # fmt: skip
    token = args.token_file.read_text().strip() if args.token_file else None
    server = HubServer((args.host, args.port), Hub({args.repo: revisions}, token=token))
    print(json.dumps({"url": server.url, "repo": args.repo, "revisions": [r.commit for r in revisions]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
