"""lowcomm: communication-efficient distributed training (C++), from Python.

``import lowcomm.torch`` registers the ``"lowcomm"`` torch.distributed backend;
``lowcomm.hooks`` has the DDP comm hooks; ``lowcomm.train(module, config, out_dir, ...)`` trains a
plain ``nn.Module`` with ``lowcomm train`` (any strategy, AB-training included) and loads the
trained weights back into it.
"""
from .trainer import train  # noqa: F401
