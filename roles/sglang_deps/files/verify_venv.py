"""Verify a serving venv instead of assuming it: run by the venv's own python on the host (--kind engine: no
sgl-kernel, NIXL creates its backend; --kind router: the router imports).

Prints one JSON line; exits 1 naming what is missing.
"""

import argparse
import importlib
import importlib.metadata
import json
import sys


def check_router(report, module, dist, others):
    """The chosen router (MODULE, run as python -m, from DIST) imports, and no other router distribution (OTHERS)
    is installed beside it: sglang-router and smg both ship an `smg` command."""
    try:
        importlib.import_module(module.split(".")[0])
    except ImportError as exc:
        return f"{module} does not import ({exc}): install {dist} into the router's venv"
    report["router"] = {"module": module, "dist": dist, "version": importlib.metadata.version(dist)}
    found = []
    for other in others:
        try:
            found.append(f"{other} {importlib.metadata.version(other)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    if found:
        return f"{', '.join(found)} is installed beside {dist}: the routers never share a venv (both ship smg)"
    return None


def check_nixl(report, backend):
    try:
        # The import sglang itself makes (sglang/srt/disaggregation/nixl/conn.py).
        from nixl._api import nixl_agent, nixl_agent_config  # noqa: PLC0415
    except ImportError as exc:
        return (
            f"nixl._api does not import ({exc}): install nixl and nixl-cu13 with --no-deps "
            "(sglang_deps_packages_nodeps), plus numpy"
        )
    agent = nixl_agent("disagg-sglang-verify", nixl_agent_config(backends=[]))
    plugins = sorted(agent.get_plugin_list())
    report["nixl_plugins"] = plugins
    if backend not in plugins:
        return f"NIXL backend '{backend}' not found: the plugin list is {plugins}"
    try:
        agent.create_backend(backend, {})
    except Exception as exc:  # any failure of the backend is the answer
        return f"NIXL lists '{backend}' but cannot create it: {exc}"
    report["nixl_backend"] = backend
    return None


def check_no_sgl_kernel(report):
    try:
        version = importlib.metadata.version("sgl-kernel")
    except importlib.metadata.PackageNotFoundError:
        return None
    report["sgl_kernel"] = version
    return (
        f"sgl-kernel {version} is installed beside sglang's sglang-kernel (same import name sgl_kernel): "
        "remove it with pip uninstall sgl-kernel"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nixl-backend", default="UCX")
    parser.add_argument("--expect-nixl", action="store_true")
    # engine: sglang's venv (no sgl-kernel beside sglang-kernel, NIXL); router: the router's own venv
    parser.add_argument("--kind", choices=("engine", "router"), default="engine")
    # router: the module the unit runs, its distribution, and the other routers' distributions (comma-separated)
    parser.add_argument("--router-module", default="sglang_router.launch_router")
    parser.add_argument("--router-dist", default="sglang-router")
    parser.add_argument("--other-router-dists", default="")
    args = parser.parse_args()
    report = {"kind": args.kind}
    others = [d for d in args.other_router_dists.split(",") if d]
    if args.kind == "router":
        problems = [check_router(report, args.router_module, args.router_dist, others)]
    else:
        problems = [check_no_sgl_kernel(report)]
    if args.kind == "engine" and args.expect_nixl:
        problems.append(check_nixl(report, args.nixl_backend))
    problems = [p for p in problems if p]
    report["problems"] = problems
    print(json.dumps(report))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
