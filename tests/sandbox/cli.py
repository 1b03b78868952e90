"""python -m tests.sandbox: throwaway GPU-box hosts (systemd-nspawn) for tests and the demo.

  up --name NAME [--hosts N] [--topology T[,T2...]]   boot NAME-1..N (no-op for hosts already up); a comma
                                               list gives host i the i-th topology (the last repeats)
  down --name NAME | --all                     remove hosts and everything they left
  status [--name NAME] [--json]                hosts, addresses, systemd state
  list                                         sandboxes of this checkout
  wheelhouse                                   fill the offline wheelhouse the guests install from

State per sandbox in .cache/sandbox/NAME/: ssh_config, inventory.yml, hosts.json, id_ed25519.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from . import fakegpu, nspawn, wheelhouse


def cmd_up(args: argparse.Namespace) -> int:
    if args.wheelhouse:
        wheelhouse.ensure()
    hosts = nspawn.up(args.name, args.hosts, args.topology.split(","))
    sdir = nspawn.state_dir(args.name)
    rel = os.path.relpath(sdir)
    if args.json:
        print((sdir / "hosts.json").read_text(), end="")
        return 0
    print(f"sandbox {args.name}: {len(hosts)} host(s)")
    for host in hosts:
        print(
            f"  {host['name']:<20} {host['address']:<15} {host['topology']:<16} ssh -F {rel}/ssh_config {host['name']}"
        )
    print(f"ansible:  ansible -i {rel}/inventory.yml all -m ping")
    print(f"hosts:    {rel}/hosts.json")
    print(f"down:     python -m tests.sandbox down --name {args.name}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    if args.all:
        for name in nspawn.sandboxes():
            nspawn.down(name)
        nspawn.sweep_orphans()
    else:
        nspawn.down(args.name)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else nspawn.sandboxes()
    report = {name: nspawn.status(name) for name in names}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name, hosts in report.items():
        print(f"sandbox {name}:")
        for h in hosts:
            print(f"  {h['name']:<20} {h['address']:<15} {h['interface']:<16} {h['system']}")
    if not report:
        print("no sandbox")
    return 0 if all(h["running"] for hosts in report.values() for h in hosts) else 1


def cmd_list(_args: argparse.Namespace) -> int:
    for name in nspawn.sandboxes():
        hosts = nspawn.load_hosts(name)
        up = sum(nspawn.host_running(h) for h in hosts)
        print(f"{name}\t{up}/{len(hosts)} up\t{nspawn.state_dir(name)}")
    return 0


def cmd_wheelhouse(_args: argparse.Namespace) -> int:
    path = wheelhouse.ensure()
    names = wheelhouse.contents()
    print(f"{path}: {len(names)} wheels")
    for name in names:
        print(f"  {name}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m tests.sandbox", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("up", help="boot NAME-1..N (idempotent)")
    p.add_argument("--name", required=True)
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument(
        "--topology",
        default=fakegpu.DEFAULT_TOPOLOGY,
        help="topology fixture of every host, or a comma list, one per host (the last repeats); known: "
        + ", ".join(fakegpu.topology_names()),
    )
    p.add_argument(
        "--no-wheelhouse",
        dest="wheelhouse",
        action="store_false",
        help="do not fill the wheelhouse first (the guests then see whatever is there)",
    )
    p.add_argument("--json", action="store_true", help="print hosts.json instead of the summary")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="remove hosts and everything they left behind")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--name")
    group.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("status", help="hosts and their systemd state")
    p.add_argument("--name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    sub.add_parser("list", help="sandboxes of this checkout").set_defaults(func=cmd_list)
    sub.add_parser("wheelhouse", help="fill the offline wheelhouse").set_defaults(func=cmd_wheelhouse)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if os.geteuid() != 0 and args.command in ("up", "down"):
        print("sandbox: up/down need root (mounts, veths, cgroups)", file=sys.stderr)
        return 2
    if getattr(args, "name", None) and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", args.name):
        print("sandbox: --name must be lowercase letters, digits and '-' (it becomes host names)", file=sys.stderr)
        return 2
    if args.command == "up" and set(args.topology.split(",")) - set(fakegpu.topology_names()):
        print(
            f"sandbox: --topology: unknown {args.topology}; known: {', '.join(fakegpu.topology_names())}",
            file=sys.stderr,
        )
        return 2
    if args.command == "up" and not 1 <= args.hosts <= 64:
        print("sandbox: --hosts must be 1..64", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except nspawn.SandboxError as err:
        print(f"sandbox: error: {err}", file=sys.stderr)
        return 1
