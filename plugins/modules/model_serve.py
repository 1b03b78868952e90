#!/usr/bin/python
# Copyright: disagg.sglang contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Serve a staged model revision to the other hosts of the cluster for a while (module_utils/model/peer.py)."""

DOCUMENTATION = r"""
---
module: model_serve
short_description: Serve a staged model revision to the other hosts of a cluster while they stage it
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module]
description:
  - Serves the staged directory O(path) (one that M(disagg.sglang.model_stage) made - its stamp names its files)
    over HTTP on O(address) and O(port) - the files of its manifest and its stamp only, with Range so a cut copy
    resumes - until no request came for O(idle) seconds after the first one, or O(deadline) seconds passed. Run it
    with C(async) and C(poll 0); the other hosts stage with C(source.mirror) its URL.
  - Returns the bytes it served to each address, which are the bytes the cluster took from a peer.
options:
  path:
    description: The staged directory (C(<models_dir>/<name>-<revision>)).
    type: path
    required: true
  address:
    description: The address to listen on (the host's cluster address).
    type: str
    required: true
  port:
    description: The port to listen on.
    type: int
    required: true
  idle:
    description: Seconds without a request, after the first one, after which it stops.
    type: float
    default: 30
  deadline:
    description: Seconds after which it stops in any case.
    type: float
    default: 3600
attributes:
  check_mode:
    support: full
    details: Serves nothing in check mode (the other hosts fetch nothing then).
  diff_mode:
    support: none
    details: Changes nothing on the host.
"""

EXAMPLES = r"""
- name: Serve the staged revision to the other hosts
  disagg.sglang.model_serve:
    path: "{{ __staged.path }}"
    address: "{{ sglang_advertise_address }}"
    port: 8899
  async: 3600
  poll: 0
"""

RETURN = r"""
served:
  description: Per client address, C({bytes, requests}).
  type: dict
  returned: always
requests:
  description: The requests answered.
  type: int
  returned: always
reason:
  description: Why it stopped, C(idle) or C(deadline) (C(check_mode) in check mode).
  type: str
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.disagg.sglang.plugins.module_utils.model import peer


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "idle": {"type": "float", "default": 30.0},
            "deadline": {"type": "float", "default": 3600.0},
        },
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, served={}, requests=0, reason="check_mode")
    try:
        httpd = peer.server(params["path"], params["address"], params["port"], time.monotonic)
    except (OSError, ValueError, KeyError) as exc:
        module.fail_json(msg=f"cannot serve {params['path']} on {params['address']}:{params['port']}: {exc}")
    result = peer.serve(httpd, params["idle"], params["deadline"], time.monotonic, time.sleep)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
