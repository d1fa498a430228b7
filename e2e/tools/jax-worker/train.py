"""A small real JAX training program for the real node's end-to-end tests (the jax-worker image).

One process per TPUJob worker, all joined by jax.distributed over gRPC, with CPU collectives over
gloo: every step is a data-parallel step of a linear regression whose gradients are all-reduced
across the processes, so a process that stops inside a step really blocks the others in the
collective, as a hung host blocks a TPU slice.

Where it runs (first match wins):
  JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID
      explicit (how it is run outside Kubernetes); the address may carry a port.
  else the operator's worker environment:
      TPU_WORKER_HOSTNAMES   this slice's hosts, comma-separated (worker 0 first)
      TPU_WORKER_ID          this host's index in the slice
      MEGASCALE_NUM_SLICES   slices (default 1), MEGASCALE_SLICE_ID this slice (default 0)
      MEGASCALE_COORDINATOR_ADDRESS  the coordinator host (multislice); else the first hostname
      processes = hosts x slices, process id = slice x hosts + worker id.
  else one process on its own (no jax.distributed).
  JAX_COORDINATOR_PORT  the coordinator's port when the address has none (default 8476, JAX's
      own default on TPU; MEGASCALE_PORT belongs to the multislice runtime and is not used).
  TRAIN_INIT_TIMEOUT_SECONDS  how long jax.distributed.initialize waits for all (default 300).

Checkpoints: Orbax under TPUJOB_CHECKPOINT_PATH (a directory shared by every worker; none saved
or restored without it). The parameters are replicated, so process 0 alone writes them (an Orbax
CheckpointManager whose active processes are {0}) and, at start, alone reads the latest one and
broadcasts it to the others over the same collectives.

Knobs:
  TRAIN_STEPS             steps in all; then exits 0 (default 100; 0 = run until stopped)
  TRAIN_STEP_SECONDS      sleep in each step before its collective, to slow it (default 0)
  TRAIN_CHECKPOINT_EVERY  save every K steps (default 10; 0 = only on SIGTERM)
  TRAIN_HANG_AT_STEP=k, TRAIN_HANG_PROCESS=i (default 0)
                          process i sleeps for good inside step k, before its collective: the
                          others block in the collective (no progress lines) until they are
                          killed. A SIGTERM ends the sleeping process (exit 143, no checkpoint);
                          the blocked ones cannot react to one.
  TRAIN_HANG_ONCE=1       hang only once: the hanging process first leaves the marker
                          <checkpoint path>/train-hung-at-step-<k>, and a later run that finds it
                          runs past step k.
  TRAIN_HANG_QUIET_STEPS=n
                          the hanging process prints no progress line for the n steps before
                          its hang (it still runs them): its last reported step is n below the
                          others', and its progress stops first, which makes it the one a stall
                          names as behind (the others' last step is k-1).
  TRAIN_SILENT=1          print none of the lines below (what is said on stderr stays, and so
                          does gloo's own "[Gloo] Rank R is connected to ..." line on stdout at
                          the first collective of a multi-process run).

Lines on stdout (flushed one by one; MaxText's format for the first):
  completed step: N, seconds: X.XXX, loss: L
  saved checkpoint at step N        (process 0, after each save)
  restored checkpoint at step N     (every process, at start, when a checkpoint was found)

SIGTERM: the processes agree through the next step's collective that one of them was told to
stop; process 0 saves that step (unless it just did), and all exit 143.
"""

import os
import signal
import sys
import time
import warnings

import numpy as np


def env_int(name, default):
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def env_float(name, default):
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def log(message):
    print(f"train.py: {message}", file=sys.stderr, flush=True)


SILENT = os.environ.get("TRAIN_SILENT", "") == "1"


def say(line):
    if not SILENT:
        print(line, flush=True)


def topology():
    """(coordinator address with port or None, process count, process id)."""
    port = env_int("JAX_COORDINATOR_PORT", 8476)

    def with_port(address):
        return address if ":" in address.rsplit("]", 1)[-1] else f"{address}:{port}"

    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return (with_port(os.environ["JAX_COORDINATOR_ADDRESS"]), env_int("JAX_NUM_PROCESSES", 1),
                env_int("JAX_PROCESS_ID", 0))
    hostnames = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if hostnames and os.environ.get("TPU_WORKER_ID"):
        slices = env_int("MEGASCALE_NUM_SLICES", 1)
        slice_id = env_int("MEGASCALE_SLICE_ID", 0)
        coordinator = os.environ.get("MEGASCALE_COORDINATOR_ADDRESS") or hostnames[0]
        return (with_port(coordinator), len(hostnames) * slices,
                slice_id * len(hostnames) + env_int("TPU_WORKER_ID", 0))
    return None, 1, 0


stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    stop_requested = True
    log("SIGTERM: stopping after this step's collective")


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    steps = env_int("TRAIN_STEPS", 100)
    step_seconds = env_float("TRAIN_STEP_SECONDS", 0.0)
    every = env_int("TRAIN_CHECKPOINT_EVERY", 10)
    hang_step = env_int("TRAIN_HANG_AT_STEP", 0)
    hang_process = env_int("TRAIN_HANG_PROCESS", 0)
    hang_once = os.environ.get("TRAIN_HANG_ONCE", "") == "1"
    hang_quiet = env_int("TRAIN_HANG_QUIET_STEPS", 0)
    ckpt_path = os.environ.get("TPUJOB_CHECKPOINT_PATH", "")

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

    coordinator, num_processes, process_id = topology()
    log(f"process {process_id} of {num_processes}, coordinator {coordinator or '(none)'}, "
        f"checkpoints in {ckpt_path or '(none)'}, jax {jax.__version__}")
    if num_processes > 1:
        # In a pod, jax also looks for its own Kubernetes bootstrap, and warns that it is not
        # installed: the arguments below are all it needs.
        warnings.filterwarnings("ignore", message="Kubernetes environment detected")
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
            initialization_timeout=env_int("TRAIN_INIT_TIMEOUT_SECONDS", 300))
        # jax.distributed installs a SIGTERM handler of its own (the preemption notifier):
        # this program's vote through the collectives takes its place.
        signal.signal(signal.SIGTERM, on_sigterm)
    if stop_requested:
        log("stopped before the first step")
        return 143
    process_id = jax.process_index()
    primary = process_id == 0

    manager = None
    if ckpt_path and primary:
        import orbax.checkpoint as ocp
        os.makedirs(ckpt_path, exist_ok=True)
        manager = ocp.CheckpointManager(
            os.path.abspath(ckpt_path),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=3, enable_async_checkpointing=False, create=False,
                multiprocessing_options=ocp.options.MultiprocessingOptions(
                    primary_host=0, active_processes={0})))

    # The model: y = x . w + b, fit to a fixed target with synthetic data.
    dim, batch = 16, 32
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(dim,)).astype(np.float32)
    state = {"w": np.zeros((dim,), np.float32), "b": np.zeros((), np.float32),
             "step": np.zeros((), np.int32)}
    if manager is not None and manager.latest_step() is not None:
        restored = manager.restore(manager.latest_step(),
                                   args=ocp.args.StandardRestore(state))
        state = {k: np.asarray(v, dtype=state[k].dtype) for k, v in restored.items()}
    if num_processes > 1:
        state = {k: np.asarray(v) for k, v in multihost_utils.broadcast_one_to_all(state).items()}
    start = int(state["step"])
    if start > 0:
        say(f"restored checkpoint at step {start}")

    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P("data"))

    def global_array(sharding, local):
        return jax.make_array_from_process_local_data(sharding, local)

    def local_value(array):
        return np.asarray(array.addressable_data(0))

    @jax.jit
    def train_step(params, x, y, stop):
        def loss_fn(p):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        params = jax.tree.map(lambda p, g: p - 0.05 * g, params, grads)
        # The mean over the global batch all-reduces; so does the stop vote.
        return params, loss, jnp.max(stop)

    params = {"w": global_array(replicated, state["w"]), "b": global_array(replicated, state["b"])}
    last_saved = start

    def save(step):
        nonlocal last_saved
        if manager is None or step == last_saved:
            return
        tree = {"w": local_value(params["w"]), "b": local_value(params["b"]),
                "step": np.asarray(step, np.int32)}
        manager.save(step, args=ocp.args.StandardSave(tree))
        manager.wait_until_finished()
        last_saved = step
        say(f"saved checkpoint at step {step}")

    marker = os.path.join(ckpt_path or "/tmp", f"train-hung-at-step-{hang_step}")
    step = start
    while steps == 0 or step < steps:
        step += 1
        began = time.monotonic()
        if step == hang_step and process_id == hang_process and not (
                hang_once and os.path.exists(marker)):
            if hang_once:
                open(marker, "w").close()
            log(f"hanging in step {step} before its collective")
            while not stop_requested:
                time.sleep(1)
            log("SIGTERM while hanging: exiting without a checkpoint")
            sys.stdout.flush()
            os._exit(143)
        if step_seconds > 0:
            time.sleep(step_seconds)
        key = np.random.default_rng([step, process_id])
        x = key.normal(size=(batch, dim)).astype(np.float32)
        y = (x @ true_w + 0.5 + 0.01 * key.normal(size=(batch,))).astype(np.float32)
        params, loss, stop = train_step(
            params, global_array(sharded, x), global_array(sharded, y),
            global_array(sharded, np.array([1 if stop_requested else 0], np.int32)))
        loss = float(local_value(loss))
        quiet = (hang_step > 0 and process_id == hang_process and hang_step - hang_quiet <= step
                 and not (hang_once and os.path.exists(marker)))
        if not quiet:
            say(f"completed step: {step}, seconds: {time.monotonic() - began:.3f}, "
                f"loss: {loss:.5f}")
        if every > 0 and step % every == 0:
            save(step)
        if int(local_value(stop)):
            save(step)
            log(f"stopping at step {step} (SIGTERM)")
            return 143
    save(step)
    log(f"done: {step} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
