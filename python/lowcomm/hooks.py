"""DDP communication hooks running lowcomm's compressors: every codec (fp16, bf16, int8, qsgd,
terngrad, signsgd, signum, efsignsgd, onebit, topk, randomk, threshold, dgc), every error-feedback
memory, PowerSGD and `auto`, with their state checkpointable.

    import lowcomm.hooks
    st = lowcomm.hooks.state(codec="topk", ratio=0.01, memory="residual", model=ddp_model)
    ddp_model.register_comm_hook(st, lowcomm.hooks.compress)
    ...
    torch.save({"model": ..., "hook": st.state_dict()}, path)   # and st.load_state_dict(...)

Options are the keys of a TOML config's [compress] section (codec, memory, ratio, levels,
threshold, block, sample_ratio, momentum, clip, skip_1d, min_numel, exclude, rank, start_step,
min_compression, warm_start, auto_candidates, auto_trial_steps, auto_recheck_every, seed).

The compressed reduce runs on a lowcomm process group: the DDP model's own group when it is one
(init_process_group("lowcomm")), otherwise a lowcomm group over the same ranks that state()
creates (collectively: call it on every rank) — so the hooks also work under DDP on PyTorch's
Gloo backend, with the compressed payload on lowcomm's communicator and DDP's own traffic
(parameter broadcast, unused-parameter checks) on Gloo. The reduce is queued on that group's
worker thread: DDP overlaps it with the rest of backward as with its own allreduce hook.
"""
import torch
import torch.distributed as dist

import lowcomm.torch as _backend  # registers the "lowcomm" backend
from lowcomm import _C

CODECS = tuple(_C.compressor_names())


class CompressState:
    """A hook's compressor, its process group and the parameter names of its buckets."""

    def __init__(self, codec, process_group=None, model=None, **options):
        self.options = dict(options, codec=codec)
        self.compressor = _C.Compressor(self.options)  # ValueError (lowcomm ConfigError) for bad options
        group = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
        if dist.get_backend(group) == _backend.BACKEND:
            self.process_group, self.side_group = group, False
        else:
            ranks = None if process_group is None else dist.distributed_c10d._pg_group_ranks[group].keys()
            self.process_group = dist.new_group(ranks=None if ranks is None else sorted(ranks),
                                                backend=_backend.BACKEND)
            self.side_group = True
        # Parameter name and registration index; without `model`, DDP's own order and names.
        self._names, self._order = {}, {}
        if model is not None:
            for i, (name, p) in enumerate(model.named_parameters()):
                self._names[id(p)] = name[len("module."):] if name.startswith("module.") else name
                self._order[id(p)] = i
        self._ids = {}      # bucket membership (names in canonical order) -> compressor bucket id
        self._layouts = {}  # (DDP bucket index, parameter ids) -> _Layout

    def layout(self, bucket):
        """How a DDP bucket maps to the compressor's: DDP orders a bucket's gradients by when they
        became ready and rebuilds its buckets after the first step (and again in every resumed
        run), so the compressor sees each bucket's gradients in the model's registration order,
        under an id given by the bucket's members. Its state (residuals, factors) then follows
        the parameters, whichever layout DDP picked when it was saved or resumed."""
        params = bucket.parameters()
        key = (bucket.index(), tuple(id(p) for p in params))
        if key not in self._layouts:
            names = [self._names.get(id(p), f"bucket{bucket.index()}.param{i}") for i, p in enumerate(params)]
            order = sorted(range(len(params)), key=lambda j: (self._order.get(id(params[j]), j), j))
            members = tuple(names[j] for j in order)
            cid = self._ids.setdefault(members, len(self._ids))
            self._layouts[key] = _Layout(cid, order, [params[j] for j in order], members)
        return self._layouts[key]

    def state_dict(self):
        """Residuals, PowerSGD factors, step counters and `auto`'s decisions: torch.save-able."""
        layouts = sorted(self._ids, key=self._ids.get)
        return {"options": dict(self.options), "layouts": [list(m) for m in layouts],
                "compressor": self.compressor.state()}

    def load_state_dict(self, state):
        if state.get("options") != self.options:
            raise ValueError(f"lowcomm.hooks: state saved with options {state.get('options')}, "
                             f"this hook has {self.options}")
        self._ids = {tuple(m): i for i, m in enumerate(state.get("layouts", []))}
        self._layouts = {}
        self.compressor.load(state["compressor"])

    def stats(self):
        """raw_bytes, payload_bytes, compression_ratio, buckets, codec_s on this rank since creation."""
        return self.compressor.stats()

    def decisions(self):
        """`auto`'s per-bucket choices and the measurements behind them."""
        return self.compressor.decisions()


def state(codec, process_group=None, model=None, **options):
    """The hook state for `codec` (see the module doc); `model` names the parameters (for
    `exclude` and readable state) and `process_group` is DDP's group when it is not the default."""
    return CompressState(codec, process_group=process_group, model=model, **options)


class _Layout:
    def __init__(self, cid, order, params, names):
        self.id = cid
        self.order = order  # DDP position of the j-th gradient in canonical order
        self.identity = order == list(range(len(order)))
        self.segments, offset = [], 0
        for name, p in zip(names, params):
            self.segments.append((name, list(p.shape), offset, p.numel()))
            offset += p.numel()


def compress(state, bucket):
    """The comm hook: reduces the bucket with the state's compressor; the future yields the
    average over the ranks."""
    lay = state.layout(bucket)
    buf = bucket.buffer()
    if lay.identity:
        work = state.compressor.reduce(state.process_group, buf, lay.id, lay.segments)
        return work.get_future().then(lambda fut: fut.value()[0])
    grads = bucket.gradients()
    flat = torch.cat([grads[j].reshape(-1) for j in lay.order])

    def back(fut):
        out = fut.value()[0]
        pos = 0
        for j in lay.order:
            n = grads[j].numel()
            grads[j].view(-1).copy_(out[pos:pos + n])
            pos += n
        return buf

    work = state.compressor.reduce(state.process_group, flat, lay.id, lay.segments)
    return work.get_future().then(back)
