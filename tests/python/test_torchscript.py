"""model.name = "torchscript": a model scripted (or traced) in Python, trained by `lowcomm train`
(2 processes: DDP, local SGD, AB-training), loaded back in Python from model_state.pt with
load_state_dict and evaluated: the same test accuracy lowcomm reported. AB-training factorises the
script's Linear/Conv layers between its first and last one."""
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


class AbNet(nn.Module):
    """SmallCnn with a hidden Linear: AB-training factorises features.3 and classifier.0 (features.0 is
    the stem, classifier.2 the head)."""
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))

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


def train(tmp_path, strategy_sets, net=SmallCnn):
    torch.manual_seed(0)
    path = tmp_path / "model.pt"
    torch.jit.script(net()).save(str(path))
    out = tmp_path / "run"
    cmd = [LOWCOMM, "train", "--config", os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), "--nproc", "2",
           "--set", "model.name=torchscript", "--set", f"model.path={path}", "--set", "schedule.max_steps=60",
           "--set", "data.batch_size=32", "--set", f"data.test_limit={TEST_LIMIT}", "--set", "logging.progress=false",
           "--set", f"logging.out_dir={out}"] + [a for s in strategy_sets for a in ("--set", s)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return run, out


AB = ["strategy.name=ab", "ab.group_size=1", "ab.warmup_steps=10", "ab.steps_btw_syncing=20",
      "ab.ddp_steps_after_sync=4", "ab.lr_rebound_steps=5", "ab.low_rank_cutoff=0.4"]


def check_loads_back(tmp_path, out, summary, net=SmallCnn, min_acc=0.6):
    """model_state.pt loads into the Python module and its scripted copy; their test accuracy is lowcomm's."""
    state = torch.load(out / "model_state.pt")
    model = net()
    assert set(state) == set(model.state_dict())  # the user's own parameter names
    model.load_state_dict(state)
    scripted = torch.jit.load(str(tmp_path / "model.pt"))
    scripted.load_state_dict(state)
    x, y = normalised_test_images()
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
        acc_scripted = (scripted(x).argmax(1) == y).float().mean().item()
    assert summary["test_accuracy"] > min_acc, summary  # it trained: 10 classes
    assert acc == pytest.approx(summary["test_accuracy"], abs=1e-6), (acc, summary["test_accuracy"])
    assert acc_scripted == acc
    torch.manual_seed(0)
    initial = net()  # what was scripted
    for k, v in initial.state_dict().items():  # the weights are the trained ones
        assert not torch.equal(v, model.state_dict()[k]), k


@pytest.mark.parametrize("sets", [[], ["strategy.name=local_sgd", "local_sgd.period=4"]], ids=["ddp", "local_sgd"])
def test_scripted_model_trains_and_loads_back_in_python(tmp_path, sets):
    run, out = train(tmp_path, sets)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    check_loads_back(tmp_path, out, json.loads((out / "summary.json").read_text()))


OTHER_STRATEGIES = {
    "zero1": ["strategy.zero=1"],
    "topk": ["compress.codec=topk", "compress.ratio=0.01"],
    "powersgd": ["compress.codec=powersgd", "compress.start_step=0"],
    "auto": ["compress.codec=auto"],
    "diloco": ["strategy.name=diloco", "diloco.period=4"],
    "gossip": ["strategy.name=gossip"],
    "ssp": ["strategy.name=ssp"],
}


@pytest.mark.parametrize("name", sorted(OTHER_STRATEGIES))
def test_every_other_data_parallel_strategy_trains_a_scripted_model(tmp_path, name):
    """docs/training.md's "every data-parallel strategy": each runs the script's forward, its model_state.pt
    loads back into the Python module and gives lowcomm's accuracy (60 steps: better than chance)."""
    run, out = train(tmp_path, OTHER_STRATEGIES[name])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    if name in ("topk", "powersgd"):
        assert summary["compression_ratio"] > 2, summary["compression_ratio"]  # the codec ran on the script's gradients
    check_loads_back(tmp_path, out, summary, min_acc=0.3)


def check_ab(out, summary):
    """60 steps, one A-group and one B-group: warm-up 0-9, SVD at 10, ab phase, syncs every 20 steps
    (each followed by 4 full-rank steps and a truncation), the final sync at 60: the model ends full-rank."""
    ab = summary["ab"]
    assert ab["full_rank_layers"] == ["features.0", "classifier.2"], ab
    assert [l["name"] for l in ab["layers"]] == ["features.3", "classifier.0"], ab["layers"]
    assert all(0 < l["rank"] <= l["full_rank"] for l in ab["layers"]), ab["layers"]
    assert any(l["rank"] < l["full_rank"] for l in ab["layers"]), ab["layers"]  # features.3: 15 of 16 at cutoff 0.4
    events = [(r["step"], r["event"]) for r in map(json.loads, open(out / "metrics.jsonl")) if r["type"] == "ab"]
    assert events == [(10, "svd"), (20, "sync"), (24, "truncate"), (40, "sync"), (44, "truncate"), (60, "final-sync")], events
    # Groups of one rank: the ab phase sends nothing, the syncs do.
    assert "ab" not in summary["bytes_by_phase"] and summary["bytes_by_phase"]["sync"]["sent"] > 0, summary["bytes_by_phase"]


def test_ab_training_factorises_the_scripts_layers(tmp_path):
    run, out = train(tmp_path, AB, net=AbNet)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    check_ab(out, summary)
    # 60 steps, 50 of them with two independent trainings averaged every 20: below DDP's 0.6.
    check_loads_back(tmp_path, out, summary, net=AbNet, min_acc=0.4)


def test_lowcomm_train_runs_ab_training_on_a_traced_module_from_python(tmp_path):
    """lowcomm.train: the same run from Python on a traced module, trained in place."""
    import lowcomm
    torch.manual_seed(0)
    model = AbNet()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    sets = dict(s.split("=", 1) for s in AB)
    overrides = {k: (float(v) if "." in v else int(v) if v.isdigit() else v) for k, v in sets.items()}
    overrides.update({"schedule.max_steps": 60, "data.batch_size": 32, "data.test_limit": TEST_LIMIT})
    out = tmp_path / "run"
    summary = lowcomm.train(model, os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), str(out), nproc=2,
                            overrides=overrides, example_input=torch.zeros(2, 1, 28, 28), exe=LOWCOMM, timeout=600)
    check_ab(out, summary)
    x, y = normalised_test_images()
    with torch.no_grad():
        acc = (model.eval()(x).argmax(1) == y).float().mean().item()
    assert summary["test_accuracy"] > 0.4 and acc == pytest.approx(summary["test_accuracy"], abs=1e-6), (acc, summary)
    assert all(not torch.equal(initial[k], v) for k, v in model.state_dict().items())
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="ab.low_rank_cutoff"):
        lowcomm.train(model, os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), str(tmp_path / "bad"),
                      overrides={**overrides, "ab.low_rank_cutoff": 2.0}, exe=LOWCOMM, timeout=300)
    assert all(torch.equal(trained[k], v) for k, v in model.state_dict().items())  # a failed run loads nothing


def test_ab_training_on_a_script_without_layers_to_factorise_is_a_clear_error(tmp_path):
    # SmallCnn: its only layer between the stem and the head is features.3; keep that full-rank too.
    run, _ = train(tmp_path, AB + ["ab.full_rank_layers=[\"stem\", \"features.3\", \"head\"]"])
    assert run.returncode != 0
    assert "no layer to factorise" in run.stderr and "features.0, features.3, classifier" in run.stderr, run.stderr[-2000:]


def test_a_file_that_is_not_torchscript_is_a_clear_error(tmp_path):
    bad = tmp_path / "model.pt"
    torch.save(SmallCnn().state_dict(), bad)  # a state dict, not a scripted module
    out = subprocess.run([LOWCOMM, "train", "--config", os.path.join(ROOT, "configs/fmnist_cnn_ddp.toml"), "--set",
                          "model.name=torchscript", "--set", f"model.path={bad}", "--set", "schedule.max_steps=1",
                          "--set", f"logging.out_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "model.path" in out.stderr and "not a TorchScript module" in out.stderr, out.stderr[-2000:]
