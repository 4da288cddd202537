"""``python -m rollhub_gateway.conformance``: the conformance run (as ``rollhub gateway
conformance``)."""

from rollhub_gateway.conformance import main

raise SystemExit(main())
