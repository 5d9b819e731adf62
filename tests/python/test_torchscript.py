"""model.name = "torchscript": a model scripted in Python, trained by `lowcomm train` (2 processes,
DDP and local SGD), loaded back in Python from model_state.pt with load_state_dict and evaluated:
the same test accuracy lowcomm reported. AB-training refuses it with a clear error."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fmnist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOWCOMM = os.path.join(os.environ.get("LOWCOMM_BUILD", os.path.join(ROOT, "build")), "lowcomm")
TEST_LIMIT = 2000


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def normalised_test_images():
    """The first TEST_LIMIT test images normalised as lowcomm does: x * (1 / (255 s)) + (-m / s) in f32."""
    import gzip
    with gzip.open(os.path.join(fmnist.DIR, "t10k-images-idx3-ubyte.gz")) as f:
        raw = np.frombuffer(f.read(), np.uint8, offset=16)[:TEST_LIMIT * 784].copy()
    m, s = np.float32(0.2860), np.float32(0.3530)
    scale = np.float32(1.0) / (np.float32(255.0) * s)
    shift = -m / s
    x = torch.from_numpy(raw).float().view(-1, 1, 28, 28)
    return x * float(scale) + float(shift), fmnist.load("t10k", TEST_LIMIT)[1]


def train(tmp_path, strategy_sets):
    torch.manual_seed(0)
    path = tmp_path / "model.pt"
    torch.jit.script(SmallCnn()).save(str(path))
    out = tmp_path / "run"
    cmd = [LOWCOMM, "train", "--config", os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), "--nproc", "2",
           "--set", "model.name=torchscript", "--set", f"model.path={path}", "--set", "schedule.max_steps=60",
           "--set", "data.batch_size=32", "--set", f"data.test_limit={TEST_LIMIT}", "--set", "logging.progress=false",
           "--set", f"logging.out_dir={out}"] + [a for s in strategy_sets for a in ("--set", s)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return run, out


@pytest.mark.parametrize("sets", [[], ["strategy.name=local_sgd", "local_sgd.period=4"]], ids=["ddp", "local_sgd"])
def test_scripted_model_trains_and_loads_back_in_python(tmp_path, sets):
    run, out = train(tmp_path, sets)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    state = torch.load(out / "model_state.pt")
    model = SmallCnn()
    assert set(state) == set(model.state_dict())  # the user's own parameter names
    model.load_state_dict(state)
    scripted = torch.jit.load(str(tmp_path / "model.pt"))
    scripted.load_state_dict(state)
    x, y = normalised_test_images()
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
        acc_scripted = (scripted(x).argmax(1) == y).float().mean().item()
    assert summary["test_accuracy"] > 0.6, summary  # it trained: 10 classes
    assert acc == pytest.approx(summary["test_accuracy"], abs=1e-6), (acc, summary["test_accuracy"])
    assert acc_scripted == acc
    torch.manual_seed(0)
    initial = SmallCnn()  # what was scripted
    assert not torch.equal(initial.classifier.weight, model.classifier.weight)  # the weights are the trained ones


def test_ab_training_refuses_a_torchscript_module_clearly(tmp_path):
    run, _ = train(tmp_path, ["strategy.name=ab"])
    assert run.returncode != 0
    assert "strategy.name" in run.stderr and "TorchScript" in run.stderr, run.stderr[-2000:]


def test_a_file_that_is_not_torchscript_is_a_clear_error(tmp_path):
    bad = tmp_path / "model.pt"
    torch.save(SmallCnn().state_dict(), bad)  # a state dict, not a scripted module
    out = subprocess.run([LOWCOMM, "train", "--config", os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), "--set",
                          "model.name=torchscript", "--set", f"model.path={bad}", "--set", "schedule.max_steps=1",
                          "--set", f"logging.out_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "model.path" in out.stderr and "not a TorchScript module" in out.stderr, out.stderr[-2000:]
