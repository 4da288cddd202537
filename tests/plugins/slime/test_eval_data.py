"""slime's eval datasets read as slime reads them: JSONL or Parquet, with ``@[start:end]``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rollhub.errors import ConfigError
from rollhub_slime.eval_data import eval_groups

from tests.plugins.slime.slime_stand_ins import make_args

ROWS = [
    {"question": "What is 2 + 3?", "answer": "5", "extra": {"id": "e1", "mode": "plain"}},
    {"question": "Add 2 and 3.", "answer": "6", "extra": {"id": "e2", "mode": "tool"}},
    {"question": "What is 1 + 1?", "answer": "2", "extra": {"id": "e3", "mode": "plain"}},
]


def config(path, n=None, **keys):
    fields = {"input_key": None, "label_key": None, "metadata_key": None, **keys}
    return SimpleNamespace(name="mini", path=str(path), n_samples_per_eval_prompt=n, **fields)


def sample_cls():
    from slime.utils.types import Sample

    return Sample


def test_parquet_dataset(tmp_path):
    path = tmp_path / "eval.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    cfg = config(path, 2, input_key="question", label_key="answer", metadata_key="extra")
    groups = eval_groups(cfg, make_args(), sample_cls())
    assert [[s.index for s in g] for g in groups] == [[0, 1], [2, 3], [4, 5]]
    assert [g[0].group_index for g in groups] == [0, 1, 2]
    assert [g[1].prompt for g in groups] == [r["question"] for r in ROWS]
    assert [g[0].label for g in groups] == ["5", "6", "2"]
    assert groups[1][1].metadata == {"id": "e2", "mode": "tool"}
    groups[0][0].metadata["id"] = "changed"  # each sample owns its copy
    assert groups[0][1].metadata["id"] == "e1"


def test_jsonl_dataset_with_a_row_slice_and_the_args_keys(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    args = make_args(input_key="question", label_key="answer", metadata_key="extra",
                     n_samples_per_eval_prompt=1)  # fmt: skip
    groups = eval_groups(config(f"{path}@[1:]"), args, sample_cls())
    assert [g[0].label for g in groups] == ["6", "2"]
    assert [g[0].index for g in groups] == [0, 1]
    assert [g[0].label for g in eval_groups(config(f"{path}@[-1:]"), args, sample_cls())] == ["2"]


def test_parquet_dataset_with_a_row_slice(tmp_path):
    path = tmp_path / "eval.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    cfg = config(f"{path}@[:2]", input_key="question")
    assert [g[0].prompt for g in eval_groups(cfg, make_args(), sample_cls())] == [
        "What is 2 + 3?",
        "Add 2 and 3.",
    ]


def test_unreadable_datasets_are_config_errors(tmp_path):
    csv = tmp_path / "eval.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(ConfigError, match=r"eval dataset 'mini'.*\.jsonl or \.parquet"):
        eval_groups(config(csv), make_args(), sample_cls())
    with pytest.raises(ConfigError, match="eval dataset 'mini': no file"):
        eval_groups(config(tmp_path / "missing.parquet"), make_args(), sample_cls())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "q"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"line 2 of .*bad\.jsonl is not JSON"):
        eval_groups(config(bad), make_args(), sample_cls())
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match=r"eval dataset 'mini': cannot read .*broken\.parquet"):
        eval_groups(config(broken), make_args(), sample_cls())
