#!/usr/bin/python
# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
# Documentation only: the action plugin plugins/action/deps_plan.py does the work.

DOCUMENTATION = r"""
---
module: deps_plan
short_description: Check one host's dependency lists and name this run's venvs by their package sets
version_added: "0.1.0"
extends_documentation_fragment: [disagg.sglang.module, disagg.sglang.module.controller]
description:
  - The dependency checks of the role disagg.sglang.sglang_deps run on its own (roles/sglang_deps/tasks/preflight.yml);
    site.yml's preflight does the same in M(disagg.sglang.host_plan), by the same code
    (C(plugins/module_utils/plan/plan_inputs.py) C(deps_problems) and C(venv_paths)).
  - Its inputs are the task's variables. In order, each only where the one before found nothing, the deps role's
    variables and the package lists against the collection's variable table, the package lists themselves (pins,
    the engine and the router they must hold, a distribution named twice), and the variables the collection no
    longer reads. It fails naming every problem of the first step that found any (joined by C(. )).
  - Then it names this run's venvs, each by a digest of its package set (RV(venv_paths)).
  - Runs on the controller only. Changes nothing, in any mode.
options: {}
seealso:
  - module: disagg.sglang.host_plan
  - module: disagg.sglang.deps_state
"""

EXAMPLES = r"""
- name: Check the dependency lists and name this run's venvs
  disagg.sglang.deps_plan:
  register: __deps_plan
"""

RETURN = r"""
venv_paths:
  description:
    - This run's venvs (C(sglang_deps_venv_paths)) - C(engine) and C(router), their paths; C(engine_stamp) and
      C(router_stamp), what each venv's stamp file holds; C(engine_pin), the engine's C(dist version) (null where it
      is not pinned); C(router_verify), the verification's arguments for the router venv.
  returned: success
  type: dict
"""
