"""verl's own tests run in their own environment (.venvs/verl, see test_verl_env.py).

verl pins transformers and tensordict below the versions of the shared environment, so the
modules under verl_side/ import verl only there; elsewhere they are not collected.
"""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["verl_side/*"]
