"""An S3 API on loopback for the tests: moto's server (moto[server], pinned in
scripts/requirements-dev.txt) started as a child process on 127.0.0.1 with a free port, with its
IAM checks on, so that a wrong key or secret is refused as a real store refuses it. Stopped (and
waited for) when the context ends."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import boto3

# moto checks credentials after this many unauthenticated calls: the three below that make the
# user, its key and its policy.
_UNAUTHENTICATED_SETUP_CALLS = 3
_ALLOW_ALL = json.dumps({"Version": "2012-10-17",
                         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoStore:
    """endpoint, access_key, secret_key; s3() is a boto3 client with the good key."""

    def __init__(self, endpoint, access_key, secret_key):
        self.endpoint = endpoint
        self.access_key = access_key
        self.secret_key = secret_key

    def s3(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def env(self, endpoint=None, **overrides):
        """The environment variables that point croupier at this store (or at `endpoint`)."""
        env = {"AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": self.access_key,
               "AWS_SECRET_ACCESS_KEY": self.secret_key}
        env.update(overrides)
        return env


# moto's server whose every answer starts `latency` seconds late (argv[1]), as a store across a
# network answers tens of milliseconds after the request (on loopback moto's own CPU is all the
# wait). The wait sleeps, so requests in flight at once wait together, as on a network.
_DELAYED_MOTO = """
import sys, time
import moto.server as server
latency = float(sys.argv.pop(1))
class Delayed(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        time.sleep(latency)
        return super().__call__(environ, start_response)
server.DomainDispatcherApplication = Delayed
server.main(sys.argv[1:])
"""


@contextlib.contextmanager
def moto_store(log_path, ready_timeout=60.0, latency_ms=0.0):
    """The store on 127.0.0.1; with `latency_ms`, each of its answers starts that much late."""
    port = free_port()
    host = "127.0.0.1"
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(_UNAUTHENTICATED_SETUP_CALLS))
    command = [sys.executable, "-m", "moto.server"]
    if latency_ms > 0:
        command = [sys.executable, "-c", _DELAYED_MOTO, str(latency_ms / 1000)]
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*command, "-H", host, "-p", str(port)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {proc.returncode}: "
                                   f"{open(log_path).read()[-2000:]}")
            try:
                socket.create_connection((host, port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not listen within {ready_timeout} s")
                time.sleep(0.1)
        endpoint = f"http://{host}:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="AKIASETUP", aws_secret_access_key="setup")
        iam.create_user(UserName="croupier")
        key = iam.create_access_key(UserName="croupier")["AccessKey"]
        iam.put_user_policy(UserName="croupier", PolicyName="all", PolicyDocument=_ALLOW_ALL)
        yield MotoStore(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
