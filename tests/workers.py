"""Worker processes of the multi-process framework tests: free loopback ports, and a wait that
bounds their time and leaves none behind."""
import json
import pathlib
import socket
import time


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_script(out_dir, name, text):
    """A worker's script: `text` written to out_dir/name. Returns its path."""
    script = pathlib.Path(out_dir) / name
    script.write_text(text)
    return script


def read_outputs(paths, key=None):
    """The JSON each worker wrote to its file of `paths`, in that order, or sorted by its field
    `key` (where each worker names itself)."""
    outs = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    return outs if key is None else sorted(outs, key=lambda o: o[key])


def run_all(procs, timeout):
    """Waits for every process; kills them all at the deadline or at the first failure."""
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise AssertionError(f"workers still running after {timeout} s (a hang)")
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed:
                raise AssertionError(f"a worker failed:\n{failed[0].stderr.read()[-4000:]}")
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
