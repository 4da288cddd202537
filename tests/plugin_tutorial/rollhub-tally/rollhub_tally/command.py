"""``rollhub tally RUN_DIR``: print the tally a run left."""

import json
from pathlib import Path

from rollhub.errors import UsageError


def add_arguments(parser):
    parser.add_argument("run_dir", help="a run directory of a run with trainer 'tally'")


def run(args):
    path = Path(args.run_dir) / "tally.json"
    if not path.is_file():
        raise UsageError(f"{path} does not exist; was the run's trainer 'tally'?")
    for prompt, row in sorted(json.loads(path.read_text()).items()):
        mean = "-" if row["mean_reward"] is None else f"{row['mean_reward']:.2f}"
        print(f"{prompt:<12} {row['ok']}/{row['samples']} ok  mean reward {mean}")
    return 0
