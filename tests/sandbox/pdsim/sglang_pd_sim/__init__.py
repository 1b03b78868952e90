"""sglang-pd-sim: a pure-stdlib stand-in for an SGLang 0.5.23 worker in prefill-decode (PD) mode.

A test double: it parses the real `sglang serve` flags (from the packaged 0.5.23 flag table) and speaks
the HTTP API that sglang-router 0.3.2 uses, so routers, systemd units and playbooks can be exercised
without GPUs. It never loads a model; text is deterministic filler derived from the prompt.
"""

# The source tree is release 0.1.0; tests/sandbox/wheelhouse.py rewrites this line (and pyproject.toml's version)
# in a copy for each release of releases.py, whose behaviour then follows the version (releases.current()).
__version__ = "0.1.0"
SGLANG_VERSION = "0.5.23"
