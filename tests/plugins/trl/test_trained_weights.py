"""What a TRL checkpoint keeps of the model (:mod:`rollhub_trl.trained_weights`), on a
small module: the trained parameters only, restored by name, refused on another base."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rollhub.errors import ConfigError
from rollhub_trl.trained_weights import MODEL_FILE, POLICY_FILE, load_trained, save_trained


def _model(seed: int, trained: int = 1) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(3)))
    model.requires_grad_(False)
    for layer in list(model)[3 - trained:]:
        layer.requires_grad_(True)
    return model


def test_only_the_trained_parameters_are_written_and_read_back(tmp_path: Path) -> None:
    trained = _model(0)
    assert save_trained(tmp_path, trained, "base", 1)
    from safetensors.torch import load_file

    assert sorted(load_file(str(tmp_path / POLICY_FILE))) == ["2.bias", "2.weight"]
    resumed = _model(1)  # another draw: every trained parameter must be overwritten
    assert load_trained(tmp_path, resumed, "base", 1)
    for (name, a), b in zip(trained.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b) == name.startswith("2."), name


def test_a_model_that_trains_every_parameter_is_left_to_trls_full_save(tmp_path: Path) -> None:
    assert not save_trained(tmp_path, _model(0, trained=3), "base", None)
    assert not (tmp_path / POLICY_FILE).exists()
    assert not load_trained(tmp_path, _model(0, trained=3), "base", None)


@pytest.mark.parametrize(
    ("model", "train_layers", "trained", "field"),
    [("other", 1, 1, "trainer.model"), ("base", 2, 2, "trainer.train_layers")],
)
def test_a_checkpoint_of_another_base_or_other_layers_is_refused(
    tmp_path: Path, model: str, train_layers: int, trained: int, field: str
) -> None:
    save_trained(tmp_path, _model(0), "base", 1)
    with pytest.raises(ConfigError, match=r"resume with") as info:
        load_trained(tmp_path, _model(1, trained=trained), model, train_layers)
    assert info.value.field == field
    assert (tmp_path / MODEL_FILE).is_file()


def test_rollhub_eval_finds_trls_newest_checkpoint_of_trained_layers(tmp_path: Path) -> None:
    from rollhub.commands.eval import resolve_checkpoint
    from rollhub.errors import UsageError
    from rollhub.plugins import build_host

    host = build_host()
    run = tmp_path / "run"
    for step in (4, 12):  # the newest by number, not by name
        save_trained(run / "trl" / f"checkpoint-{step}", _model(step), "base", 1)
    newest = run / "trl" / "checkpoint-12"
    assert resolve_checkpoint(run, host) == newest
    assert resolve_checkpoint(run / "trl" / "checkpoint-4", host) == run / "trl" / "checkpoint-4"
    with pytest.raises(UsageError, match=r"no trained parameters"):
        resolve_checkpoint(run)  # without the plugins, only the core loop's checkpoints
    # a run that trained every parameter: its newest checkpoint is TRL's full save
    (run / "trl" / "checkpoint-20").mkdir()
    with pytest.raises(UsageError, match=r"trl/checkpoint-N"):
        resolve_checkpoint(run, host)


def test_a_checkpoint_that_does_not_say_what_it_trained_is_refused(tmp_path: Path) -> None:
    save_trained(tmp_path, _model(0), "base", 1)
    (tmp_path / MODEL_FILE).unlink()  # e.g. copied without it
    with pytest.raises(ConfigError, match=r"model.json is missing") as info:
        load_trained(tmp_path, _model(1), "base", 1)
    assert info.value.field == "trainer.model"
    assert not list(tmp_path.glob(".*.part"))  # the writes left no temporary file


def test_parameters_of_another_architecture_are_named(tmp_path: Path) -> None:
    save_trained(tmp_path, _model(0), "base", 1)
    other = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    other[0].requires_grad_(False)  # trains "1.*", where the checkpoint holds "2.*"
    with pytest.raises(ConfigError, match=r"missing: \['1.bias', '1.weight'\]"):
        load_trained(tmp_path, other, "base", 1)
