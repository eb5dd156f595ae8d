"""The launch recipes in deploy/ (docs/deploy.md).

Run here for real, against the croupier command: the one-machine launcher (deploy/local_cluster.py),
deploy/torchrun.sh (torch.distributed.run) and deploy/mpirun.sh (OpenMPI), each with 3 ranks of
deploy/trainer.py over 2 epochs; what every rank received is compared by content hash with a
fault-free `croupier consume` run of the same job, and its record ids with the plan (exactly once,
equal steps). The Slurm scripts run under a real Slurm in tests/test_slurm.py.
The Kubernetes manifests are parsed with PyYAML and checked for consistency (no cluster here).
Every croupier flag in deploy/ and docs/deploy.md must appear in that command's --help.
"""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from doc_blocks import checkout_folder, doc_block, run_block, run_in_group, user_env
from service_cluster import BIN, ROOT, fault_free_run, synth_dataset

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
DOC = ROOT / "docs" / "deploy.md"
SHELL_SCRIPTS = sorted([*DEPLOY.glob("*.sh"), *DEPLOY.glob("slurm/*.sbatch"),
                        *DEPLOY.glob("slurm/*.bash")])

FEATURES = "id:int64,label:int64,image:bytes"
RECORDS, BATCH, WORLD, SEED, EPOCHS = 600, 16, 3, 3, 2


# --- the CLI's flags ------------------------------------------------------------------------------

def help_flags(command):
    """The flags `croupier COMMAND --help` names (`croupier job` prints its usage when bare)."""
    argv = ["job"] if command.startswith("job") else [command, "--help"]
    proc = subprocess.run([str(BIN), *argv], capture_output=True, text=True, timeout=30)
    flags = set(re.findall(r"--([a-z][a-z0-9-]*)", proc.stdout + proc.stderr))
    assert flags, f"croupier {' '.join(argv)} named no flags:\n{proc.stdout}{proc.stderr}"
    return flags


_INVOCATION = re.compile(
    r"""(?:"\$CROUPIER"|\$CROUPIER\b|(?<![\w/.-])croupier)\s+
        (dispatcher|producer|job\s+create|job\s+show|status|consume|synth|index|inspect|plan)\b
        ([^&|>;\n]*)""", re.VERBOSE)


def shell_invocations(text):
    """(command, [flags]) of each croupier command line in shell text; continuation lines
    joined."""
    text = re.sub(r"\\\n\s*", " ", text)
    return [(re.sub(r"\s+", " ", m.group(1)), re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)",
                                                        m.group(2)))
            for m in _INVOCATION.finditer(text)]


def shell_blocks(markdown):
    """The contents of the ```sh (or unlabelled) fenced blocks of a Markdown text."""
    blocks, current, lang = [], None, None
    for line in markdown.splitlines():
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                if lang in ("", "sh", "bash"):
                    blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_every_croupier_flag_in_deploy_and_its_doc_exists():
    used = []
    for path in SHELL_SCRIPTS:
        used += [(path.name, *inv) for inv in shell_invocations(path.read_text())]
    for block in shell_blocks(DOC.read_text()):
        used += [("docs/deploy.md", *inv) for inv in shell_invocations(block)]
    for doc in _yaml_docs():
        for c in _containers(doc):
            args = c.get("args") or []
            if args and args[0] in ("dispatcher", "producer", "job"):
                command = " ".join(args[:2]) if args[0] == "job" else args[0]
                used.append((doc["metadata"]["name"], command,
                             [a[2:] for a in args if a.startswith("--")]))
    commands = {c for _, c, _ in used}
    # The recipes start every kind of process and create the job.
    assert {"dispatcher", "producer", "job create"} <= commands, commands
    known = {c: help_flags(c) for c in commands}
    bad = [(where, c, f) for where, c, flags in used for f in flags if f not in known[c]]
    assert not bad, f"flags that croupier's --help does not name: {bad}"
    assert len(used) >= 10, used


def test_every_shell_script_parses():
    assert {p.name for p in SHELL_SCRIPTS} >= {"service.sh", "mpirun.sh", "torchrun.sh",
                                               "horovodrun.sh", "croupier.sbatch",
                                               "croupier-single.sbatch", "croupier-steps.bash"}
    for path in SHELL_SCRIPTS:
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"
    for path in DEPLOY.glob("*.py"):
        compile(path.read_text(), str(path), "exec")


# --- Kubernetes -----------------------------------------------------------------------------------

def _yaml_docs():
    yaml = pytest.importorskip("yaml")
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                doc["__file__"] = path.name
                docs.append(doc)
    return docs


# The Kubernetes version the manifests are validated against (kubernetes-validate's bundled
# schemas, offline).
KUBERNETES_VERSION = "1.31"


def test_every_manifest_validates_against_the_kubernetes_schema():
    """kubernetes-validate, strict (unknown fields refused), against KUBERNETES_VERSION, for every
    manifest of a core kind. KEDA's ScaledObject is a CRD with no schema there: its fields are
    checked by test_the_autoscalers_size_the_producers_to_the_dispatchers_figure."""
    kv = pytest.importorskip("kubernetes_validate")
    yaml = pytest.importorskip("yaml")
    checked = 0
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None or doc["kind"] in ("Kustomization", "ScaledObject"):
                continue
            kv.validate(doc, KUBERNETES_VERSION, strict=True)  # raises ValidationError
            checked += 1
    assert checked >= 6  # PVC, Service, StatefulSet, Deployment, Job, HorizontalPodAutoscaler


def test_the_autoscalers_size_the_producers_to_the_dispatchers_figure():
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for p in K8S.glob("*.yaml") for d in yaml.safe_load_all(p.read_text())
            if d is not None}
    producers = docs["Deployment"]["metadata"]["name"]
    service = docs["Service"]
    metrics_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "metrics")
    keda = yaml.safe_load((K8S / "autoscale" / "keda-scaledobject.yaml").read_text())
    assert keda["spec"]["scaleTargetRef"]["name"] == producers
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["url"] == \
        f"http://{service['metadata']['name']}:{metrics_port}/api/scale"
    # The dispatcher's /api/scale answers {"producers": {"recommended": N, ...}}
    # (tests/test_advice.py reads it from a real dispatcher).
    assert trigger["metadata"]["valueLocation"] == "producers.recommended"
    assert trigger["metadata"]["targetValue"] == "1"
    hpa = yaml.safe_load((K8S / "autoscale" / "hpa-external.yaml").read_text())
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": producers}
    (metric,) = hpa["spec"]["metrics"]
    # A gauge the dispatcher's /metrics serves (docs/metrics.md).
    assert metric["external"]["metric"]["name"] == "croupier_producers_recommended"
    assert "croupier_producers_recommended" in (ROOT / "docs" / "metrics.md").read_text()
    for scaler in (keda["spec"], hpa["spec"]):
        low = scaler.get("minReplicaCount", scaler.get("minReplicas"))
        high = scaler.get("maxReplicaCount", scaler.get("maxReplicas"))
        assert 1 <= low <= high


def test_a_map_jobs_producers_scale_on_that_jobs_own_target():
    """autoscale/keda-map-job.yaml: a Deployment of one map job's `croupier produce` processes and
    a ScaledObject on that job's figure (/api/scale?job=NAME; tests/test_advice.py reads it from
    a real dispatcher), all naming the same job; its flags are `croupier produce`'s."""
    yaml = pytest.importorskip("yaml")
    docs = {d["kind"]: d for d in yaml.safe_load_all(
        (K8S / "autoscale" / "keda-map-job.yaml").read_text())}
    deployment, keda = docs["Deployment"], docs["ScaledObject"]
    service = yaml.safe_load_all((K8S / "dispatcher.yaml").read_text())
    service = next(d for d in service if d["kind"] == "Service")
    metrics_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "metrics")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "croupier"]
    args = container["args"]
    assert args[0] == "produce"
    job = _flag(args, "job")
    assert _flag(args, "dispatcher") == f"{service['metadata']['name']}:5050"
    assert deployment["metadata"]["labels"]["croupier.dev/job"] == job
    assert keda["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["url"] == \
        f"http://{service['metadata']['name']}:{metrics_port}/api/scale?job={job}"
    assert trigger["metadata"]["valueLocation"] == "producers.recommended"
    assert trigger["metadata"]["targetValue"] == "1"
    proc = subprocess.run([sys.executable, "-m", "croupier", "produce", "--help"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    known = set(re.findall(r"--([a-z][a-z0-9-]*)", proc.stdout))
    used = {a[2:] for a in args if a.startswith("--")}
    assert used <= known, (used - known, proc.stdout + proc.stderr)


def _pod_spec(doc):
    if doc["kind"] in ("StatefulSet", "Deployment", "Job"):
        return doc["spec"]["template"]["spec"]
    return None


def _containers(doc):
    spec = _pod_spec(doc)
    if spec is None:
        return []
    return [*spec.get("initContainers", []), *spec["containers"]]


def _flag(args, name):
    """The value after --name in a container's args."""
    assert f"--{name}" in args, f"--{name} missing from {args}"
    return args[args.index(f"--{name}") + 1]


def _env(container):
    return {e["name"]: e for e in container.get("env", [])}


def _trainer_env_names():
    """The CROUPIER_* variables deploy/trainer.py reads, and the launcher variables croupier
    reads for rank and world."""
    names = set(re.findall(r"\b(CROUPIER_[A-Z_]+)\b", (DEPLOY / "trainer.py").read_text()))
    launcher = (ROOT / "python" / "croupier" / "launcher.py").read_text()
    return names | set(re.findall(r'"([A-Z][A-Z_]*)"', launcher))


def test_kubernetes_manifests_are_consistent():
    docs = _yaml_docs()
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), doc["__file__"]
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], doc["__file__"]
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    assert set(by_kind) == {"PersistentVolumeClaim", "Service", "StatefulSet", "Deployment",
                            "Job", "Kustomization"}, set(by_kind)
    # The kustomization lists every manifest.
    (kustomization,) = by_kind["Kustomization"]
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")

    # Selectors match the pod labels.
    for doc in [*by_kind["StatefulSet"], *by_kind["Deployment"]]:
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), doc["__file__"]

    # The dispatcher: a StatefulSet of one, behind the Service, journal on a claim at --work-dir.
    (service,) = by_kind["Service"]
    (sts,) = by_kind["StatefulSet"]
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (dispatcher,) = sts["spec"]["template"]["spec"]["containers"]
    args = dispatcher["args"]
    assert args[0] == "dispatcher"
    ports = {p["name"]: p["containerPort"] for p in dispatcher["ports"]}
    assert int(_flag(args, "port")) == ports["grpc"]
    assert int(_flag(args, "metrics-port")) == ports["metrics"]
    assert _flag(args, "bind") == "0.0.0.0"  # reachable from the other pods
    for p in service["spec"]["ports"]:
        target = p["targetPort"]
        assert target in ports or target in ports.values(), p
        assert p["port"] == (ports[target] if target in ports else target), p
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in dispatcher["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == _flag(args, "work-dir")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # Probes on declared ports; readiness on the HTTP endpoint the dispatcher serves.
    ready = dispatcher["readinessProbe"]["httpGet"]
    assert ready["path"] == "/metrics" and ready["port"] in ports
    assert dispatcher["livenessProbe"]["tcpSocket"]["port"] in ports
    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    address = f"{service['metadata']['name']}:{service_ports['grpc']}"

    # Producers: a scalable Deployment that reaches the dispatcher through the Service.
    (deployment,) = by_kind["Deployment"]
    assert deployment["spec"]["replicas"] >= 1
    (producer,) = deployment["spec"]["template"]["spec"]["containers"]
    args = producer["args"]
    assert args[0] == "producer" and _flag(args, "dispatcher") == address
    assert int(_flag(args, "port")) == producer["ports"][0]["containerPort"]
    assert _flag(args, "advertise-host") == "$(POD_IP)"
    assert _env(producer)["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert producer["readinessProbe"]["tcpSocket"]["port"] == producer["ports"][0]["name"]

    # The data volume is one claim, mounted at the same path wherever files are read.
    (data_claim,) = by_kind["PersistentVolumeClaim"]
    for doc in (sts, deployment):
        volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        data_mounts = [m for m in container["volumeMounts"]
                       if volumes.get(m["name"], {}).get("persistentVolumeClaim", {})
                       .get("claimName") == data_claim["metadata"]["name"]]
        assert [m["mountPath"] for m in data_mounts] == ["/data"], doc["__file__"]

    # Trainers: an indexed Job; rank from the completion index; world, completions, parallelism
    # and the job's --consumers agree; every variable set is one the trainer or croupier reads.
    (job,) = by_kind["Job"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    world = spec["completions"]
    assert spec["parallelism"] == world
    (create,) = spec["template"]["spec"]["initContainers"]
    (trainer,) = spec["template"]["spec"]["containers"]
    env = _env(trainer)
    assert int(env["WORLD_SIZE"]["value"]) == world
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["CROUPIER_DISPATCHER"]["value"] == address
    assert set(env) <= _trainer_env_names(), set(env) - _trainer_env_names()
    cargs = create["args"]
    assert cargs[:2] == ["job", "create"] and "--exist-ok" in cargs
    assert int(_flag(cargs, "consumers")) == world
    assert _flag(cargs, "files").startswith("/data/")
    assert _env(create)["CROUPIER_JOB"]["value"] == env["CROUPIER_JOB"]["value"]
    assert _env(create)["CROUPIER_EPOCHS"]["value"] == env["CROUPIER_EPOCHS"]["value"]

    # Every $(VAR) in args is defined in that container's env; every process gets the token.
    for doc in docs:
        for c in _containers(doc):
            for var in re.findall(r"\$\(([A-Z_]+)\)", " ".join(c.get("args", []))):
                assert var in _env(c), f"{doc['__file__']} {c['name']}: $({var}) not in env"
            token = _env(c)["CROUPIER_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert token == {"name": "croupier-auth", "key": "token"}, c["name"]


# --- running the launchers ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small dataset and each rank's [(epoch, step, hash)] from a fault-free run."""
    base = tmp_path_factory.mktemp("deploy")
    files = synth_dataset(base / "data", RECORDS, files=2, image_bytes=32)
    reference = fault_free_run(base / "reference", files, FEATURES, BATCH, WORLD, SEED,
                               epochs=EPOCHS)
    return base / "data", reference


def _env_for(tmp_path, **extra):
    env = dict(os.environ, CROUPIER=str(BIN), CROUPIER_BIN=str(BIN),
               CROUPIER_WORK_DIR=str(tmp_path / "work"), CROUPIER_PORT="0",
               CROUPIER_BIND="127.0.0.1", CROUPIER_HOST="127.0.0.1",
               CROUPIER_PRODUCER_THREADS="1", CROUPIER_BATCH_SIZE=str(BATCH),
               CROUPIER_EPOCHS=str(EPOCHS), CROUPIER_SEED=str(SEED), CROUPIER_FEATURES=FEATURES,
               CROUPIER_REPORT_DIR=str(tmp_path / "reports"), CROUPIER_TIMEOUT="60",
               CROUPIER_INDEX_DIR=str(tmp_path / "index"), CROUPIER_PYTHON=sys.executable,
               OMP_NUM_THREADS="1")
    for name in ("CROUPIER_DISPATCHER", "CROUPIER_AUTH_TOKEN", "RANK", "WORLD_SIZE",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(name, None)
    env.update(extra)
    return env


def _run(argv, env, tmp_path, timeout=120, code=0):
    """Runs a launch script in its own process group (doc_blocks.run_in_group: nothing it started
    may be left behind) and checks that it exits with `code`. Its output, stderr included."""
    proc = run_in_group(argv, tmp_path, env, timeout, merge_stderr=True)
    assert proc.returncode == code, f"{argv} exited {proc.returncode}:\n{proc.stdout[-4000:]}"
    return proc.stdout


def _check_reports(report_dir, reference):
    """Each rank's batches are the fault-free run's, bit for bit (hashes), and across ranks each
    epoch's record ids are the plan's, each exactly once, in equal steps."""
    reports = [json.loads((report_dir / f"rank-{r}.json").read_text()) for r in range(WORLD)]
    assert [(r["rank"], r["world"]) for r in reports] == [(r, WORLD) for r in range(WORLD)]
    for rank, report in enumerate(reports):
        got = [(e["epoch"], step, h)
               for e in report["epochs"] for step, h in enumerate(e["hashes"])]
        assert got == [tuple(x) for x in reference[rank]], f"rank {rank} differs from reference"
    check_plan(reports, RECORDS, BATCH, WORLD, SEED, EPOCHS)
    return sum(e["steps"] for r in reports for e in r["epochs"])


def check_plan(reports, records, batch, world, seed, epochs):
    """`reports` (deploy/trainer.py's rank-R.json, parsed, in rank order) hold, for each epoch,
    the epoch plan's batches: every step of every rank, equal steps, each record once."""
    import croupier
    assert [(r["rank"], r["world"]) for r in reports] == [(r, world) for r in range(world)]
    for epoch in range(epochs):
        plan = croupier.EpochPlan(records, batch, world, seed=seed, epoch=epoch)
        ids = []
        for rank, report in enumerate(reports):
            (e,) = [e for e in report["epochs"] if e["epoch"] == epoch]
            assert e["steps"] == plan.steps_per_consumer > 0
            for step, ids_of_step in enumerate(e["ids"]):
                assert ids_of_step == plan.batch(plan.global_batch(rank, step)).tolist()
            ids += [i for ids_of_step in e["ids"] for i in ids_of_step]
        assert len(ids) == len(set(ids)) == plan.steps_per_consumer * world * batch


@pytest.mark.timeout(150)
def test_local_cluster_launcher(tmp_path, dataset):
    data, reference = dataset
    env = _env_for(tmp_path)
    out = _run([sys.executable, str(DEPLOY / "local_cluster.py"), "--files",
                f"{data}/*.tfrecord", "--features", FEATURES, "--trainers", str(WORLD),
                "--producers", "2", "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
                "--seed", str(SEED), "--work-dir", str(tmp_path / "work"),
                "--report-dir", str(tmp_path / "reports"), "--timeout", "100"], env, tmp_path)
    assert "steps per epoch for each of 3 trainers" in out
    assert _check_reports(tmp_path / "reports", reference) == WORLD * EPOCHS * 12


@pytest.mark.timeout(150)
def test_torchrun_script(tmp_path, dataset):
    pytest.importorskip("torch")
    data, reference = dataset
    env = _env_for(tmp_path, CROUPIER_FILES=f"{data}/*.tfrecord",
                   CROUPIER_TORCHRUN=f"{shlex.quote(sys.executable)} -m torch.distributed.run")
    out = _run(["bash", str(DEPLOY / "torchrun.sh"), str(WORLD)], env, tmp_path)
    assert "croupier: dispatcher at 127.0.0.1:" in out
    assert _check_reports(tmp_path / "reports", reference) == WORLD * EPOCHS * 12
    # Run again in the same folder: the saved state holds the job, done. The script says so and
    # fails, instead of training 0 steps and exiting 0.
    out = _run(["bash", str(DEPLOY / "torchrun.sh"), str(WORLD)], env, tmp_path, code=3)
    assert "croupier: job 'train' is done already: every epoch was delivered" in out, out
    assert "croupier job delete train" in out


@pytest.mark.timeout(150)
def test_mpirun_script(tmp_path, dataset):
    data, reference = dataset
    # As root, and on loopback only (as scripts/demo_train.py does).
    env = _env_for(tmp_path, CROUPIER_FILES=f"{data}/*.tfrecord",
                   CROUPIER_MPIRUN_ARGS="--oversubscribe", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,tcp",
                   OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    out = _run(["bash", str(DEPLOY / "mpirun.sh"), str(WORLD)], env, tmp_path)
    assert "croupier: dispatcher at 127.0.0.1:" in out
    assert _check_reports(tmp_path / "reports", reference) == WORLD * EPOCHS * 12


@pytest.mark.timeout(240)
def test_the_mpirun_block_of_the_doc_runs_as_written(tmp_path):
    """The one-machine mpirun block of docs/deploy.md, run as a user copies it into a shell, in a
    folder that has this checkout's .venv, scripts, deploy, examples and build: with no
    `croupier` on PATH, no CROUPIER_PORT, no CROUPIER_MPIRUN_ARGS. Only what the doc says root
    and a loopback-only host need is added (OpenMPI's variables), and the service is kept on
    loopback. Before, the block failed three times: `croupier: command not found`, no mpirun
    slots for 4 ranks on 2 cores, and `job has 1 epochs; no epoch 1`. The exactly-once checks of
    mpirun runs are test_mpirun_script's; this one checks that the doc's words work."""
    script = doc_block("mpirun (and the Horovod pattern over MPI)",
                       from_line="# On one machine, with examples/mpi_allreduce.py")
    assert "deploy/mpirun.sh 4" in script and "scripts/demo_data.py digits" in script, script
    env = user_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl="self,tcp", OMPI_MCA_btl_tcp_if_include="lo",
                   OMPI_MCA_oob_tcp_if_include="lo", CROUPIER_BIND="127.0.0.1",
                   CROUPIER_HOST="127.0.0.1", CROUPIER_PRODUCER_THREADS="1", OMP_NUM_THREADS="1")
    done = run_block(script, checkout_folder(tmp_path), env, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "[rank 0] epoch 0:" in out and "[rank 0] epoch 1:" in out, out[-3000:]
    assert "croupier: dispatcher at 127.0.0.1:" in out and ":5050" not in out


def test_the_doc_states_what_was_run_and_what_was_not():
    text = DOC.read_text()
    for recipe in ("deploy/local_cluster.py", "deploy/torchrun.sh", "deploy/mpirun.sh",
                   "deploy/horovodrun.sh", "deploy/slurm/croupier.sbatch",
                   "deploy/slurm/croupier-single.sbatch", "deploy/kubernetes"):
        assert recipe in text, recipe
        assert (ROOT / recipe).exists(), recipe
    assert "Not run here" in text or "not run here" in text
    assert "tests/test_deploy.py" in text and "tests/test_slurm.py" in text
