"""Fashion-MNIST from Debian's dataset-fashion-mnist (no download), as float tensors in [0, 1]."""
import gzip
import os

import numpy as np
import torch

DIR = "/usr/share/datasets/fashion-mnist"


def load(split, n):
    """The first n images (N, 1, 28, 28) and labels of split "train" or "t10k"."""
    with gzip.open(os.path.join(DIR, f"{split}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)[: n * 784]
    with gzip.open(os.path.join(DIR, f"{split}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    x = torch.from_numpy(images.copy()).float().div_(255).view(-1, 1, 28, 28)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.copy()).long()
