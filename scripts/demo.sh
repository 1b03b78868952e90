#!/usr/bin/env bash
# `make demo`: boot the sandbox host (if not up), converge it with site.yml, and show the answer that came
# through the router. The sandbox stays up; `make down` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m tests.sandbox wheelhouse
python -m tests.sandbox up --name demo --hosts 1 --topology rtxpro6000-8x
ansible-playbook -i inventories/sandbox site.yml

state=.cache/sandbox/demo
cat <<MSG

The sandbox is up and serving: prefill and decode simulators under systemd, the real sglang-router in front.
  Reach the router:  ssh -F $state/ssh_config demo-1 "curl -s localhost:8000/generate \\
                       -H 'Content-Type: application/json' \\
                       -d '{\"text\": \"Hello\", \"sampling_params\": {\"max_new_tokens\": 8}}'"
  Converge again:    .venv/bin/ansible-playbook -i inventories/sandbox site.yml
  Take it down:      make down
MSG
