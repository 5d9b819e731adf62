"""lowcomm: communication-efficient distributed training (C++), from Python.

``import lowcomm.torch`` registers the ``"lowcomm"`` torch.distributed backend.
"""
