"""Sandbox GPU hosts: systemd-nspawn containers with real systemd that simulate GPU boxes.

Run as `python -m tests.sandbox --help`. Test code, never part of the collection artifact.
"""
