# Copyright: disagg.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""The KV transport probe's processes: NIXL (UCX backend) WRITE of VRAM on one GPU into VRAM on another.

Runs with the serving venv's Python, as `python -c <this file's source> --src 0 --dst 1 --mib 1024`
(plugins/module_utils/kv/kv_transport.py builds that command; the file imports nothing of the collection,
so its source alone is the program). A parent process that never touches CUDA forks two children:

  target     (the decode side) holds a zeroed buffer on --dst, registers it with NIXL, and after the
             last write's notification counts the bytes that hold the expected pattern;
  initiator  (the prefill side) holds the pattern on --src and WRITEs it into the target's buffer,
             as sglang's NIXL path pushes KV: one warm-up write, then --iters timed writes.

UCX_PROTO_INFO=y is set, so UCX prints the protocol table it chose for each operation (the lane of the
GPU->GPU put: `cuda_ipc/cuda` for zero-copy, `tcp/lo` when it falls back to software emulation).
The parent prints one line `KVPROBE_RESULT {json}` at the end: the children's results, or the error.
VRAM is allocated with torch when it imports (as sglang does, so PYTORCH_CUDA_ALLOC_CONF applies),
else with cupy.

With --mem dram (hosts without a GPU or without a CUDA array library) both buffers are host memory
(page-aligned anonymous mmap, registered as NIXL "DRAM"), --src/--dst are ignored, and UCX's table is
the host->host put (its lane is a shared-memory or TCP transport, never the GPU path).
"""

import argparse
import json
import multiprocessing
import os
import sys
import time
import traceback

MARKER = "KVPROBE_RESULT "
NOTIF = b"kvprobe-last"
NOTIF_GRACE_S = 10  # how long the target waits for the last notification once the writer is done


def _alloc(gpu, nbytes, fill):
    """(keep-alive object, device pointer, allocator name, verify()) of nbytes on CUDA device gpu."""
    try:
        import torch  # noqa: PLC0415 (children only: the parent must not touch CUDA before fork)
    except ImportError:
        torch = None
    if torch is not None:
        dev = torch.device("cuda", gpu)
        buf = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
        pattern = (torch.arange(nbytes, device=dev, dtype=torch.int64) % 251 + 1).to(torch.uint8)
        if fill:
            buf.copy_(pattern)
        torch.cuda.synchronize(dev)

        def verify():
            torch.cuda.synchronize(dev)
            return int((buf == pattern).sum().item())

        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
        return (buf, pattern), buf.data_ptr(), f"torch {torch.__version__} (alloc conf {conf!r})", verify
    import cupy  # noqa: PLC0415

    with cupy.cuda.Device(gpu):
        buf = cupy.zeros(nbytes, dtype=cupy.uint8)
        pattern = (cupy.arange(nbytes, dtype=cupy.int64) % 251 + 1).astype(cupy.uint8)
        if fill:
            buf[...] = pattern
        cupy.cuda.Device(gpu).synchronize()

    def verify():
        with cupy.cuda.Device(gpu):
            cupy.cuda.Device(gpu).synchronize()
            return int((buf == pattern).sum())

    return (buf, pattern), int(buf.data.ptr), f"cupy {cupy.__version__}", verify


def _alloc_dram(nbytes, fill):
    """(keep-alive object, address, allocator name, verify()) of nbytes of host memory (anonymous mmap)."""
    import ctypes  # noqa: PLC0415
    import mmap  # noqa: PLC0415

    buf = mmap.mmap(-1, nbytes)
    period = bytes(range(1, 252))  # the VRAM path's pattern: (i % 251) + 1
    pattern = (period * (nbytes // len(period) + 1))[:nbytes]
    if fill:
        buf[:] = pattern
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))

    def verify():
        try:
            import numpy  # noqa: PLC0415
        except ImportError:
            numpy = None
        if numpy is not None:
            got = numpy.frombuffer(buf, dtype=numpy.uint8)
            return int((got == numpy.frombuffer(pattern, dtype=numpy.uint8)).sum())
        chunk, good = 1 << 20, 0
        for off in range(0, nbytes, chunk):
            a, b = buf[off : off + chunk], pattern[off : off + chunk]
            good += len(a) if a == b else sum(x == y for x, y in zip(a, b, strict=True))
        return good

    return (buf, pattern), addr, "mmap (host memory)", verify


def _agent(name):
    from nixl._api import nixl_agent, nixl_agent_config  # noqa: PLC0415

    agent = nixl_agent(name, nixl_agent_config(backends=["UCX"]))
    if "UCX" not in agent.backends:
        raise RuntimeError(f"NIXL has no UCX backend (plugins: {agent.get_plugin_list()})")
    return agent


def _child(role, gpu, nbytes, iters, conn, *, mem="vram"):
    # GPUs are named by their host index (nvidia-smi's, PCI bus order): a worker's CUDA_VISIBLE_DEVICES,
    # passed along with the rest of its environment, would renumber them.
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    try:
        if mem == "dram":
            gpu, kind = 0, "DRAM"  # NIXL's device id of host memory
            keep, ptr, allocator, verify = _alloc_dram(nbytes, fill=(role == "initiator"))
        else:
            kind = "VRAM"
            keep, ptr, allocator, verify = _alloc(gpu, nbytes, fill=(role == "initiator"))
        agent = _agent(role)
        agent.register_memory([(ptr, nbytes, gpu, "")], kind)
        descs = agent.get_xfer_descs([(ptr, nbytes, gpu)], kind)
        conn.send({"meta": agent.get_agent_metadata(), "descs": agent.get_serialized_descs(descs)})
        peer = conn.recv()
        remote = agent.add_remote_agent(peer["meta"])
        if isinstance(remote, bytes):  # nixl 1.5.1 returns the name as bytes; notifications are keyed by str
            remote = remote.decode()
        if role == "target":
            deadline = time.monotonic() + peer["timeout"]
            notified, writer_done = False, None
            while True:
                if agent.check_remote_xfer_done(remote, NOTIF):
                    notified = True
                    break
                if writer_done is None and conn.poll(0):
                    conn.recv()  # the initiator's writes completed
                    writer_done = time.monotonic()
                if writer_done is not None and time.monotonic() - writer_done > NOTIF_GRACE_S:
                    break  # verify anyway: the bytes are the proof; the missing notification is reported
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no notification from {remote} in {peer['timeout']} s")
                time.sleep(0.001)
            good = verify()
            conn.send(
                {
                    "ok": True,
                    "gpu": gpu,
                    "allocator": allocator,
                    "bytes_verified": good,
                    "bytes": nbytes,
                    "notified": notified,
                }
            )
            return
        remote_descs = agent.deserialize_descs(peer["descs"])
        times = []
        for i in range(iters + 1):  # the first write sets the connection up: not timed
            notif = NOTIF if i == iters else b"kvprobe-%d" % i
            handle = agent.initialize_xfer("WRITE", descs, remote_descs, remote, notif)
            t0 = time.perf_counter()
            state = agent.transfer(handle, notif)  # an empty notif_msg here would replace the request's
            while state == "PROC":
                state = agent.check_xfer_state(handle)
            took = time.perf_counter() - t0
            agent.release_xfer_handle(handle)
            if state != "DONE":
                raise RuntimeError(f"NIXL WRITE {i} ended in state {state}")
            if i:
                times.append(took)
        conn.send({"ok": True, "gpu": gpu, "allocator": allocator, "seconds": times})
        while not conn.poll(0.001):  # stay alive (buffer registered) until the target has verified,
            agent.get_new_notifs()  # progressing UCX meanwhile: the last notification may still be queued
        conn.recv()
        del keep
    except BaseException as exc:
        conn.send({"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]})
    finally:
        _flush_c_stdio()


def _flush_c_stdio():
    """UCX prints its tables through C stdio; a forked child ends in os._exit, which would drop them."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def run(src, dst, mib, iters, timeout, *, mem="vram"):
    os.environ["UCX_PROTO_INFO"] = "y"
    nbytes = int(mib * 1024 * 1024)
    ctx = multiprocessing.get_context("fork")
    result = {"src": src, "dst": dst, "mem": mem, "bytes": nbytes, "iters": iters, "env": _env()}
    pipes, procs = {}, {}
    for role, gpu in (("target", dst), ("initiator", src)):
        parent_end, child_end = ctx.Pipe()
        pipes[role] = parent_end
        procs[role] = ctx.Process(
            target=_child, args=(role, gpu, nbytes, iters, child_end), kwargs={"mem": mem}, daemon=True
        )
        procs[role].start()
    deadline = time.monotonic() + timeout

    def recv(role):
        if not pipes[role].poll(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"{role} said nothing within the probe's {timeout} s")
        msg = pipes[role].recv()
        if not msg.get("ok", True):
            raise RuntimeError(f"{role} failed: {msg['error']}\n{msg.get('trace', '')}")
        return msg

    try:
        t_info, i_info = recv("target"), recv("initiator")
        pipes["target"].send({"meta": i_info["meta"], "timeout": timeout})
        pipes["initiator"].send({"meta": t_info["meta"], "descs": t_info["descs"]})
        result["initiator"] = recv("initiator")
        pipes["target"].send("initiator-done")
        result["target"] = recv("target")
        pipes["initiator"].send("done")
        result["ok"] = True
    except Exception as exc:
        result["ok"] = False
        result["error"] = str(exc)
    for proc in procs.values():
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return result


def _env():
    names = ("UCX_TLS", "UCX_NET_DEVICES", "UCX_PROTO_INFO", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    return {k: os.environ[k] for k in names if k in os.environ}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kv_probe_worker")
    parser.add_argument("--src", type=int, required=True, help="GPU index of the writer (prefill)")
    parser.add_argument("--dst", type=int, required=True, help="GPU index of the target (decode)")
    parser.add_argument("--mib", type=float, default=1024)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=90)
    parser.add_argument("--mem", choices=("vram", "dram"), default="vram", help="dram: host memory, no GPU")
    args = parser.parse_args(argv)
    result = run(args.src, args.dst, args.mib, args.iters, args.timeout, mem=args.mem)
    sys.stdout.flush()
    print(MARKER + json.dumps(result, default=repr), flush=True)  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function  # standalone program (venv python), not module code
