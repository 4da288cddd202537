"""``python -m rollhub.a2a module:app``: serve a rollout agent over A2A."""

from rollhub.a2a.server import main

raise SystemExit(main())
