"""The "lowcomm" torch.distributed backend.

    import lowcomm.torch                       # registers the backend
    dist.init_process_group("lowcomm")         # torchrun / `lowcomm launch` environment
    ...
    lowcomm.torch.traffic()                    # bytes this rank sent/received, by op and link

Collectives run on lowcomm's communicator (shared memory among the ranks of one host, our
ring / halving-doubling / hierarchical algorithms over TCP), queued in call order to one worker
thread per group, so async work (DDP's bucket allreduces) overlaps the caller. CPU tensors only.

Trust (include/lowcomm/c10d/backend_rendezvous.h): a job of several ranks needs LOWCOMM_JOB_TOKEN
(`lowcomm launch` sets it) unless LOWCOMM_INSECURE=1, which warns; the backend meets its peers
through lowcomm's authenticated store at MASTER_ADDR:LOWCOMM_RDZV_PORT (default MASTER_PORT + 1,
hosted by global rank 0), not through torch's store; a worker exits when its launcher dies
(LOWCOMM_LAUNCHER_PID, or torchrun's agent).
Environment: LOWCOMM_DETERMINISTIC=1 (rank-ordered sums), LOWCOMM_ALLREDUCE_ALGO, LOWCOMM_SHM,
LOWCOMM_STREAMS (auto|1..64, streams per cross-site pair), LOWCOMM_JOB_TOKEN, LOWCOMM_INSECURE, LOWCOMM_RDZV_PORT, LOCAL_WORLD_SIZE, GLOO_SOCKET_IFNAME.
"""
import atexit
import weakref

import torch.distributed as dist

from lowcomm import _C

BACKEND = "lowcomm"
ProcessGroupLowcomm = _C.ProcessGroupLowcomm
TimeoutError = _C.TimeoutError
PeerError = _C.PeerError
ConfigError = _C.ConfigError


_groups = weakref.WeakSet()


def _create(store, rank, size, timeout):
    # torch calls this for the default group before it exists, then for new_group() on its members.
    default = not dist.is_initialized()
    global_rank = rank if default else dist.get_rank()
    global_size = size if default else dist.get_world_size()
    pg = _C.create_process_group(store, rank, size, timeout, global_rank, global_size)
    _groups.add(pg)
    return pg


@atexit.register
def _drain():
    # A group's worker thread may still be releasing the last task's Python objects (DDP's
    # future callbacks) when the script ends; it must not need the GIL once Python finalizes.
    for pg in list(_groups):
        pg.drain()


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)


def _group(pg):
    return pg if pg is not None else dist.distributed_c10d._get_default_group()


def traffic(pg=None):
    """Bytes and messages this rank sent and received through `pg` (default: the default group):
    {"total": {...}, "by_op": {op: {...}}, "by_phase": {...}, "by_link": {"intra-node"|"inter-node": {...}}}."""
    return _C.traffic(_group(pg))


def reset_traffic(pg=None):
    """Zeroes the group's traffic meter (shared with its point-to-point communicator)."""
    _C.reset_traffic(_group(pg))
